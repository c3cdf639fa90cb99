"""The state store: JetStream KV buckets in the control plane's account on the same broker.

=================  =======================  ==========================================
bucket             key                      value
=================  =======================  ==========================================
enclave-queues     ``<project>.<name>``     QueueRecord (the desired state)
enclave-status     ``<project>.<name>``     QueueStatus (what the reconciler observed)
enclave-accounts   ``<queue id>``           AccountRecord (sealed password, bcrypt hash)
enclave-tokens     sha256 of the token      TokenRecord
enclave-counters   ``<project>.<name>``     QueueCounters (dead-lettered, discarded, nacked)
enclave-access-keys  access key id          AccessKeyRecord (SQS access keys: sealed secret)
enclave-sqs        ``<project>.<name>``     SqsQueueRecord (SQS-only attributes, tags)
enclave-sqs-leases ``<queue id>.<seq>``     SqsLease (a ChangeMessageVisibility's lease; 13 h)
=================  =======================  ==========================================

Desired state and status are separate buckets so the API and the reconciler never overwrite
each other's writes. Writes that must not race use the entry's revision (compare-and-set).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, Optional, TypeVar

import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue
from pydantic import BaseModel, ValidationError

from .. import pushes
from ..errors import BrokerUnavailable, Conflict
from ..names import ACCOUNTS_BUCKET, COUNTERS_BUCKET, QUEUES_BUCKET, STATUS_BUCKET, TOKENS_BUCKET
from ..retry import placement_pending, retry_unavailable
from .records import (
    AccessKeyRecord,
    AccountRecord,
    QueueCounters,
    QueueRecord,
    QueueStatus,
    SqsLease,
    SqsQueueRecord,
    TokenRecord,
)

R = TypeVar("R", bound=BaseModel)

ACCESS_KEYS_BUCKET = "enclave-access-keys"  #: the SQS endpoint's access keys (sqs/keys.py)
SQS_BUCKET = "enclave-sqs"  #: the SQS endpoint's own attributes and tags of each queue
SQS_LEASES_BUCKET = "enclave-sqs-leases"  #: leases ChangeMessageVisibility set (queues/sqs.py)
SQS_LEASE_TTL = 13 * 3600.0  #: seconds an entry lives: past SQS's 12 h limit on a message's visibility

#: seconds a state operation may take before the broker counts as unavailable
OP_TIMEOUT = 5.0
#: seconds the broker keeps a finished listing's consumer. nats-py's default is 5 minutes, and
#: nats-server 2.15 refuses a stream's 1001st consumer (measured): 1000 listings of one bucket
#: within 5 minutes (resyncs, samples, scrapes, console refreshes) would stop every later one
LISTING_LINGER = 1.0
WATCH_RECHECK = 1.0  #: seconds between a watch's looks at whether its connection was lost meanwhile
#: events a queue's counters remember (``Store.count(once=…)``): more than can be in flight at a crash
RECENT_EVENTS = 256


#: the stops of watchers made after their maker was cancelled (a task is kept until it ends)
_ABANDONED: set[asyncio.Task[None]] = set()


@contextlib.asynccontextmanager
async def _watcher(make: Callable[[], Awaitable[KeyValue.KeyWatcher]]) -> AsyncIterator[KeyValue.KeyWatcher]:
    """The watcher ``make()`` makes, stopped when the block ends, however it ends: also when the
    block is cancelled while nats-py makes it (after its subscribe), or the connection closed
    first (``pushes``)."""
    making = asyncio.ensure_future(make())
    try:
        watcher = await asyncio.shield(making)
    except asyncio.CancelledError:  # it is made all the same: stopped once it is
        making.add_done_callback(_stop_when_made)
        raise
    try:
        yield watcher
    finally:
        await pushes.unsubscribe(watcher._sub)  # no end marker: nothing reads the watcher any more


def _stop_when_made(making: asyncio.Future[KeyValue.KeyWatcher]) -> None:
    if making.cancelled() or making.exception() is not None:
        return
    task = asyncio.ensure_future(pushes.unsubscribe(making.result()._sub))
    _ABANDONED.add(task)
    task.add_done_callback(_ABANDONED.discard)


class Bucket(Generic[R]):
    """One KV bucket of one record type, with JSON encoding and compare-and-set."""

    def __init__(self, kv: KeyValue, model: type[R]) -> None:
        self._kv = kv
        self._model = model

    async def get(self, key: str) -> Optional[tuple[R, int]]:
        """The record and its revision, or None."""
        try:
            entry = await retry_unavailable(lambda: self._kv.get(key))
        except nats.js.errors.KeyNotFoundError:
            return None
        return self._model.model_validate_json(entry.value or b""), entry.revision

    async def create(self, key: str, record: R) -> int:
        """Store a new record; Conflict if the key exists."""
        try:
            return await retry_unavailable(lambda: self._kv.create(key, record.model_dump_json().encode()))
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise Conflict(f"{key} already exists.") from exc

    async def update(self, key: str, record: R, revision: int) -> int:
        """Replace the record if it is still at ``revision``; Conflict otherwise."""
        try:
            return await retry_unavailable(
                lambda: self._kv.update(key, record.model_dump_json().encode(), last=revision))
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise Conflict(f"{key} changed while it was being updated.") from exc

    async def put(self, key: str, record: R) -> int:
        return await retry_unavailable(lambda: self._kv.put(key, record.model_dump_json().encode()))

    async def delete(self, key: str) -> None:
        await retry_unavailable(lambda: self._kv.purge(key))

    async def items(self, pattern: str = ">") -> list[tuple[str, R, int]]:
        """Every (key, record, revision) whose key matches ``pattern`` (a NATS subject pattern).

        Read until the entry the broker says is the last one (``delta`` 0), deletes included so
        that the last one is always seen. nats-py's own "nothing more" marker is not enough: its
        first check races with the first deliveries, and about one listing in 300 came back
        empty from a full bucket (measured; at start-up that once made every queue's account
        look orphaned). An early marker is believed only when the broker says no key matches."""
        items: list[tuple[str, R, int]] = []
        async with _watcher(lambda: retry_unavailable(
                lambda: self._kv.watch(pattern, inactive_threshold=LISTING_LINGER))) as watcher:
            try:
                while True:
                    entry = await watcher.updates(timeout=OP_TIMEOUT)
                    if entry is None:
                        if not await self._any_key(pattern):
                            break
                        continue  # entries are on their way
                    if entry.operation is None and entry.value:
                        items.append((entry.key, self._model.model_validate_json(entry.value), entry.revision))
                    if entry.delta == 0:
                        break
            except nats.errors.TimeoutError as exc:
                raise BrokerUnavailable("The state store did not answer in time.") from exc
        return items

    async def _any_key(self, pattern: str) -> bool:
        """Whether the bucket's stream holds any message under ``pattern`` (deletes included).
        nats-py 2.16's KeyValue keeps its JetStream context and stream name private."""
        kv: Any = self._kv
        info = await retry_unavailable(
            lambda: kv._js.stream_info(kv._stream, subjects_filter=f"{kv._pre}{pattern}"))
        return bool(info.state.subjects)

    def reconnects(self) -> int:
        """How many times the connection to the broker has been lost and made again."""
        return int(self._kv._js._nc.stats["reconnects"])

    async def watch(self, recheck: float = WATCH_RECHECK) -> AsyncIterator[tuple[str, Optional[R]]]:
        """Every key with its record as it is now, then each change as it happens: (key, record),
        or (key, None) for a key deleted (or one that does not parse). Raises BrokerUnavailable
        once the connection has reconnected since the watch began (looked at every ``recheck``
        seconds): a restarted broker forgot the watch's consumer, and nats-py would only find out
        after two missed heartbeats (10 s); watch again."""
        reconnects = self.reconnects()
        async with _watcher(lambda: retry_unavailable(lambda: self._kv.watch(">"))) as watcher:
            while True:
                try:
                    entry = await watcher.updates(timeout=recheck)
                except nats.errors.TimeoutError:
                    if self.reconnects() != reconnects:
                        raise BrokerUnavailable("The connection to the broker was lost meanwhile.") from None
                    continue
                if entry is None:  # nats-py's "the values so far were sent" marker
                    continue
                record = None
                if entry.operation is None and entry.value:
                    with contextlib.suppress(ValidationError):  # unreadable: as if unknown (a get raises)
                        record = self._model.model_validate_json(entry.value)
                yield entry.key, record

    async def watch_keys(self) -> AsyncIterator[str]:
        """Keys as they change, from now on (deletes included)."""
        async with _watcher(lambda: self._kv.watch(">", meta_only=True)) as watcher:
            async for entry in watcher:
                if entry is not None:
                    yield entry.key


class Store:
    """The buckets, opened (and created on first start) on the control account's JetStream."""

    def __init__(self, queues: Bucket[QueueRecord], status: Bucket[QueueStatus],
                 accounts: Bucket[AccountRecord], tokens: Bucket[TokenRecord],
                 counters: Bucket[QueueCounters], access_keys: Bucket[AccessKeyRecord],
                 sqs: Bucket[SqsQueueRecord], sqs_leases: Bucket[SqsLease]) -> None:
        self.queues = queues
        self.status = status
        self.accounts = accounts
        self.tokens = tokens
        self.counters = counters
        self.access_keys = access_keys
        self.sqs = sqs
        self.sqs_leases = sqs_leases
        #: one count of a queue's at a time in this process: concurrent compare-and-sets of one key
        #: retried each other's losses, a storm of reads and writes (a flood of releases)
        self._counting: dict[str, asyncio.Lock] = {}

    async def count(self, key: str, field: str, by: int = 1, *, once: Optional[str] = None) -> bool:
        """Add ``by`` to one of a queue's counters (compare-and-set, so concurrent adds all land).
        With ``once``, a token naming the event (``move:<seq>``): an event counted already, among
        the queue's last RECENT_EVENTS, is not counted again. Returns whether it was counted."""
        lock = self._counting.setdefault(key, asyncio.Lock())
        async with lock:
            return await self._count(key, field, by, once)

    async def _count(self, key: str, field: str, by: int, once: Optional[str]) -> bool:
        while True:
            found = await self.counters.get(key)
            current = found[0] if found else QueueCounters()
            if once is not None and once in current.recent:
                return False
            update: dict[str, Any] = {field: getattr(current, field) + by}
            if once is not None:
                update["recent"] = (*current.recent, once)[-RECENT_EVENTS:]
            changed = current.model_copy(update=update)
            try:
                if found is None:
                    await self.counters.create(key, changed)
                else:
                    await self.counters.update(key, changed, found[1])
                return True
            except Conflict:  # another process counted meanwhile (a cluster's other node)
                await asyncio.sleep(random.uniform(0, 0.02))

    async def counts(self, key: str) -> QueueCounters:
        found = await self.counters.get(key)
        return found[0] if found else QueueCounters()

    @classmethod
    async def open(cls, js: JetStreamContext, *, attempts: int = 100, replicas: int = 1) -> Store:
        """Open or create the buckets (``replicas``: on that many nodes of a cluster); retries while
        JetStream is still starting, or a cluster is still electing its leaders or waiting for peers."""
        for attempt in range(attempts):
            try:
                return cls(
                    Bucket(await _bucket(js, QUEUES_BUCKET, history=5, replicas=replicas), QueueRecord),
                    Bucket(await _bucket(js, STATUS_BUCKET, replicas=replicas), QueueStatus),
                    Bucket(await _bucket(js, ACCOUNTS_BUCKET, replicas=replicas), AccountRecord),
                    Bucket(await _bucket(js, TOKENS_BUCKET, replicas=replicas), TokenRecord),
                    Bucket(await _bucket(js, COUNTERS_BUCKET, replicas=replicas), QueueCounters),
                    Bucket(await _bucket(js, ACCESS_KEYS_BUCKET, replicas=replicas), AccessKeyRecord),
                    Bucket(await _bucket(js, SQS_BUCKET, replicas=replicas), SqsQueueRecord),
                    Bucket(await _bucket(js, SQS_LEASES_BUCKET, replicas=replicas, ttl=SQS_LEASE_TTL), SqsLease),
                )
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError,
                    nats.js.errors.ServerError, nats.js.errors.BadRequestError) as exc:
                # a cluster without its peers yet: no placement (a 400: 10005), no resources
                if isinstance(exc, nats.js.errors.BadRequestError) and not placement_pending(exc):
                    raise
                if attempt == attempts - 1:
                    raise BrokerUnavailable("JetStream did not become ready to hold the state store.") from None
                await asyncio.sleep(0.1)
        raise AssertionError("unreachable")


async def _bucket(js: JetStreamContext, name: str, history: int = 1, replicas: int = 1,
                  ttl: Optional[float] = None) -> KeyValue:
    try:
        return await js.key_value(name)
    except nats.js.errors.BucketNotFoundError:
        # direct gets may be answered by any replica, one that has not applied the last write yet:
        # replicated, every read goes to the bucket's leader (a create is then read back at once)
        return await js.create_key_value(api.KeyValueConfig(
            bucket=name, history=history, storage=api.StorageType.FILE, direct=replicas == 1, replicas=replicas,
            ttl=ttl))
