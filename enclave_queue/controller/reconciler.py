"""The reconciler: moves the broker toward each declared queue, one step that is safe to repeat.

It learns of changes from a watch on the queue bucket and, every ``resync_seconds`` (jittered),
looks at every queue again, so drift made behind its back (a stream or consumer deleted or
changed) is repaired. A server-wide JSZ snapshot (jsz.py) shows every queue's stream and
consumers with their configs, and only the queues it does not show as last reconciled (missing,
drifted, not Ready at their generation) are reconciled, a few at a time behind what the watch
brings: an idle resync costs a few requests, not three a queue through its own connection.
One reconcile at a time per queue, queues in parallel. Each outcome is written as the queue's
status: ``Ready``, ``Errored`` with the error's text, or ``Deleting``;
a queue whose latest spec is not yet applied reads as ``Reconciling``. While the broker's store
cannot take writes (broker/storage.py: a full disk), a reconciled queue reads ``Errored`` with
reason ``StorageFull`` and the guard's sentence, and ``Ready`` again once it can.

Deleting a queue: its stream goes first (its files with it), then its account and user leave
the broker (their connections are cut), then its records. A control process killed at any step
resumes from the records when it starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Optional

import nats.errors
import nats.js.errors
from nats.js import api

from ..broker.connection import BrokerConnection
from ..broker.storage import StorageGuard
from ..broker.tasks import keep_running, stop_tasks
from ..errors import BrokerUnavailable, EnclaveError, StorageFull
from ..metrics.instruments import ControlMetrics
from ..names import CONSUMER, stream_name
from ..retry import api_codes, placement_pending
from ..state.kv import Store
from ..state.records import QueueRecord, QueueStatus, State
from . import mapping
from .accounts import Accounts
from .jsz import Snapshot

log = logging.getLogger("enclave.controller")

RETRY_DELAYS = (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)  #: seconds before retrying a failed reconcile
PARALLEL = 32  #: queues reconciled at the same time
#: of those, how many a resync may hold: it walks every queue, and must not keep the changes the
#: watch brings (a create waiting for its stream) behind thousands of queues that changed nothing
#: (a 3,000-queue resync held creates for 3–10 s when it took every slot)
RESYNC_PARALLEL = 4
#: a broker that is starting, reloading or reconnecting: worth a quick retry, not an Errored status
TEMPORARY = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
             nats.errors.ConnectionReconnectingError, nats.js.errors.ServiceUnavailableError, BrokerUnavailable)
PATIENCE = 8  #: temporary failures in a row (about 4 s) before the status says Errored


def is_temporary(exc: BaseException) -> bool:
    """A failure worth a quick retry: the broker unreachable or reloading, or a JetStream API
    error on the server's side (5xx). nats-server 2.15 once answered a stream create with 10049
    "error creating store for stream" during a burst of creates after a burst of deletes
    (bench.provider); shown as Errored at once, that stopped an apply that a retry would finish.
    After PATIENCE failures in a row the status says Errored all the same."""
    if isinstance(exc, TEMPORARY) or placement_pending(exc):  # a replicated queue while a node is away
        return True
    return isinstance(exc, nats.js.errors.APIError) and api_codes(exc)[0] >= 500


class PermanentError(EnclaveError):
    """A state the reconciler cannot repair by itself; shown as Errored until the spec changes."""


class Reconciler:
    def __init__(self, store: Store, conn: BrokerConnection, accounts: Accounts, resync_seconds: float,
                 on_deleted: Optional[Callable[[str], Awaitable[None]]] = None,
                 metrics: Optional[ControlMetrics] = None, storage: Optional[StorageGuard] = None) -> None:
        self.store = store
        self.storage = storage  #: its health is part of every queue's status
        self.metrics = metrics
        self.on_deleted = on_deleted  #: called with a deleted queue's id (the mover drops its notes)
        self.conn = conn
        self.accounts = accounts
        self.resync_seconds = resync_seconds
        self.reconciles = 0
        self.errors = 0
        self.duration_seconds = 0.0  #: total time spent reconciling
        self._running: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._failures: dict[str, int] = {}
        self._status: dict[str, QueueStatus] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._slots = asyncio.Semaphore(PARALLEL)
        self._listeners: dict[str, set[asyncio.Future[None]]] = {}

    async def start(self) -> None:
        for key, _, _ in await self.store.queues.items():
            self.enqueue(key)
        self._tasks = [keep_running(self._watch, "reconciler-watch"), keep_running(self._resync, "reconciler-resync")]

    async def reconcile_all(self) -> None:
        """Reconcile every queue soon (the store's health changed: their statuses say so)."""
        for key, _, _ in await self.store.queues.items():
            self.enqueue(key)

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        await stop_tasks(self._tasks + list(self._running.values()))

    def enqueue(self, key: str) -> None:
        """Reconcile ``key`` soon; if it is being reconciled now, once more after that."""
        if key in self._running:
            self._again.add(key)
            return
        self._running[key] = asyncio.create_task(self._run(key), name=f"reconcile:{key}")

    async def _watch(self) -> None:
        while True:
            try:
                async with contextlib.aclosing(self.store.queues.watch_keys()) as keys:
                    async for key in keys:
                        self.enqueue(key)
            except (nats.errors.Error, EnclaveError) as exc:
                log.warning("queue watch interrupted (%s); restarting it", exc)
                await asyncio.sleep(0.5)

    async def _resync(self) -> None:
        walking: Optional[asyncio.Task[None]] = None
        try:
            while True:
                await asyncio.sleep(self.resync_seconds * random.uniform(0.8, 1.2))
                try:
                    await self.accounts.sync()  # an account removed from the broker behind our back comes back
                    # the walk goes on in the background: a queue slow to reconcile (its broker
                    # account missing until the sync above) must not hold the next sync back
                    if walking is None or walking.done():
                        keys = await self.out_of_step()
                        walking = asyncio.create_task(self._walk(keys), name="reconciler-walk")
                except (nats.errors.Error, EnclaveError) as exc:
                    log.warning("resync failed: %s", exc)
        finally:
            if walking is not None:
                walking.cancel()

    async def out_of_step(self) -> list[str]:
        """The keys of the queues a resync must reconcile: every queue but those the broker's JSZ
        snapshot shows exactly as this process last reconciled them (Ready at their generation,
        stream and consumers there with their desired config). Every queue if the snapshot fails."""
        items = await self.store.queues.items()
        try:
            snapshot = await Snapshot.read(self.conn)
        except BrokerUnavailable as exc:
            log.info("resync snapshot failed (%s); reconciling every queue", exc)
            return [key for key, _, _ in items]
        return [key for key, record, _ in items if not self._in_step(record, snapshot)]

    def _in_step(self, record: QueueRecord, snapshot: Snapshot) -> bool:
        status = self._status.get(record.key)
        if (record.deleting or status is None or status.state != "Ready"
                or status.observed_generation != record.generation or record.key in self._failures
                or record.id not in self.accounts.applied):
            return False
        stream = snapshot.stream(record.id)
        if stream is None or not stream.get("config"):
            return False
        actual = api.StreamConfig.from_response(dict(stream["config"]))
        want = mapping.stream_config(record.id, record.spec, schedules=bool(actual.allow_msg_schedules))
        if mapping.drift(actual, want, mapping.STREAM_FIELDS):
            return False
        consumers = {c.get("name"): c.get("config") for c in stream.get("consumer_detail") or []}
        for want_consumer in mapping.consumer_configs(record.id, record.spec):
            config = consumers.get(want_consumer.durable_name)
            if not config or mapping.drift(api.ConsumerConfig.from_response(dict(config)), want_consumer,
                                           mapping.CONSUMER_FIELDS):
                return False
        return True

    async def _walk(self, keys: list[str]) -> None:
        """Reconcile every one of ``keys``, RESYNC_PARALLEL at a time, skipping those being
        reconciled already."""
        pending = iter(keys)

        async def walker() -> None:
            for key in pending:
                if key in self._running:
                    continue
                task = self._running[key] = asyncio.create_task(self._run(key), name=f"resync:{key}")
                with contextlib.suppress(Exception):
                    await task

        await asyncio.gather(*(walker() for _ in range(RESYNC_PARALLEL)))

    async def _run(self, key: str) -> None:
        try:
            while True:
                self._again.discard(key)
                async with self._slots:
                    await self._reconcile_once(key)
                if key not in self._again:
                    return
        finally:
            self._running.pop(key, None)

    async def _reconcile_once(self, key: str) -> None:
        started = time.perf_counter()
        record: Optional[QueueRecord] = None
        try:
            found = await self.store.queues.get(key)
            if found is None:
                self._forget(key)
                return
            record = found[0]
            if record.deleting:
                await self._finalize(record)
            else:
                message = await self.reconcile(record)
                problem = self.storage.health.problem if self.storage is not None else None
                if problem is None:
                    await self._set_status(record, "Ready", message, "Reconciled")
                else:
                    await self._set_status(record, "Errored", f"{problem[0].upper()}{problem[1:]}.", "StorageFull")
            self._failures.pop(key, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure becomes a status and a retry, never a dead loop
            self.errors += 1
            if self.metrics is not None:
                self.metrics.reconcile_errors.inc()
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            text = str(exc) or type(exc).__name__
            if is_temporary(exc):
                log.info("reconcile of %s will be retried: %r", key, exc)
            elif not isinstance(exc, EnclaveError):
                log.exception("reconcile of %s failed", key)
            else:
                log.warning("reconcile of %s failed: %s", key, text)
            if record is not None:
                with contextlib.suppress(Exception):
                    state: State = "Errored"
                    if record.deleting:
                        state = "Deleting"
                    # a replicated queue waits for its nodes as long as they are away
                    elif is_temporary(exc) and (failures < PATIENCE or placement_pending(exc)):
                        state, text = "Reconciling", f"Waiting for the broker: {text}"
                    await self._set_status(record, state, text, type(exc).__name__)
            delay = RETRY_DELAYS[min(failures, len(RETRY_DELAYS)) - 1]
            self._retry_later(key, delay)
        finally:
            self.reconciles += 1
            elapsed = time.perf_counter() - started
            self.duration_seconds += elapsed
            if self.metrics is not None:
                self.metrics.reconcile_seconds.observe(elapsed)

    def _retry_later(self, key: str, delay: float) -> None:
        old = self._timers.pop(key, None)
        if old:
            old.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self.enqueue, key)

    async def changed(self, key: str, timeout: float) -> None:
        """Return when the status of ``key`` changes (or the queue is gone), or after ``timeout``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._listeners.setdefault(key, set()).add(future)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass
        finally:
            listeners = self._listeners.get(key)
            if listeners is not None:
                listeners.discard(future)
                if not listeners:
                    del self._listeners[key]

    def _notify(self, key: str) -> None:
        for future in self._listeners.pop(key, ()):
            if not future.done():
                future.set_result(None)

    def _forget(self, key: str) -> None:
        self._notify(key)
        self._status.pop(key, None)
        self._failures.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer:
            timer.cancel()

    async def reconcile(self, record: QueueRecord) -> str:
        """Bring one live queue's account, stream and consumer to its spec. Returns what was done."""
        if await self.accounts.fetch(record.id) is None:
            raise PermanentError(
                f"The broker account of queue '{record.spec.name}' is missing; delete and re-create the queue."
            )
        done: list[str] = []
        try:
            if await self.accounts.reserve(record.id, record.spec.max_bytes):
                done.append("storage limit set")
        except StorageFull as exc:
            raise PermanentError(str(exc)) from None
        await self.accounts.ensure_applied(record.id)
        js = self.conn.queue_js(record.id)
        stream = stream_name(record.id)

        try:
            info = await js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            await js.add_stream(mapping.stream_config(record.id, record.spec))
            done.append("stream created")
        else:  # schedules, once turned on (queues/schedules.py), cannot be turned off: kept
            want_stream = mapping.stream_config(record.id, record.spec,
                                                schedules=bool(info.config.allow_msg_schedules))
            changed = mapping.drift(info.config, want_stream, mapping.STREAM_FIELDS)
            if set(changed) & mapping.IMMUTABLE_STREAM:
                raise PermanentError(
                    f"The stream of queue '{record.spec.name}' was changed outside Enclave "
                    f"({', '.join(sorted(set(changed) & mapping.IMMUTABLE_STREAM))}) and cannot be repaired in place."
                )
            if changed:
                await js.update_stream(want_stream)
                done.append(f"stream updated ({', '.join(changed)})")

        for want_consumer in mapping.consumer_configs(record.id, record.spec):
            name = want_consumer.durable_name
            try:
                cinfo = await js.consumer_info(stream, name)
            except nats.js.errors.NotFoundError:
                await js.add_consumer(stream, want_consumer)
                done.append("consumer created" if name == CONSUMER else f"consumer {name} created")
                continue
            changed = mapping.drift(cinfo.config, want_consumer, mapping.CONSUMER_FIELDS)
            if set(changed) & mapping.IMMUTABLE_CONSUMER:
                raise PermanentError(
                    f"The consumer {name} of queue '{record.spec.name}' was changed outside Enclave "
                    f"({', '.join(sorted(set(changed) & mapping.IMMUTABLE_CONSUMER))}) and cannot be repaired in place."
                )
            if changed:
                await js.add_consumer(stream, want_consumer)  # same durable name: an update
                done.append(f"consumer {'' if name == CONSUMER else name + ' '}updated ({', '.join(changed)})")
        if done:
            log.info("queue %s: %s", record.key, "; ".join(done))
        return "Queue is ready." if not done else f"Queue is ready ({'; '.join(done)})."

    async def _finalize(self, record: QueueRecord) -> None:
        """Delete a queue from the broker, then its records. Every step tolerates a repeat."""
        await self._set_status(record, "Deleting", "Deleting the queue's stream, account and secret.", "Deleting")
        if await self.accounts.fetch(record.id) is not None:
            await self.accounts.ensure_applied(record.id)
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await self.conn.queue_js(record.id).delete_stream(stream_name(record.id))
            await self.accounts.remove(record.id)
        if self.on_deleted is not None:
            await self.on_deleted(record.id)
        await self.store.counters.delete(record.key)
        await self.store.status.delete(record.key)
        await self.store.queues.delete(record.key)
        self._forget(record.key)
        log.info("queue %s deleted", record.key)

    async def _set_status(self, record: QueueRecord, state: State, message: str, reason: str) -> None:
        current = self._status.get(record.key)
        if current is None:
            found = await self.store.status.get(record.key)
            current = found[0] if found else QueueStatus.initial()
        if current.state == state and current.message == message and current.observed_generation == record.generation:
            self._status[record.key] = current
            return
        status = current.transition(state, message, reason, record.generation)
        await self.store.status.put(record.key, status)
        self._status[record.key] = status
        self._notify(record.key)
