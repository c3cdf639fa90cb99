"""The one layer the HTTP API (and through it the CLI, console and provider) calls.

Declarations: create, list, get, update, delete, status. Credentials and secrets. Messages by
hand: send (now or delayed), receive (with a sealed receipt handle), delete by receipt, peek,
export (every message as it stands, nothing taken) and clear. Every method raises errors from
``errors.py`` with one sentence naming the object.

What touches a queue's stream (messages, stats, dead letters, export, clear) first asks
``ready``: a queue the reconciler has not made Ready yet is a Conflict, "not ready yet", never a
broker error. Once a queue has been Ready its stream exists until it is deleted, so its id is
remembered and the status is read once per queue, not once per message.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

import nats.errors
import nats.js.errors
from nats.nuid import NUID

from .auth.provenance import Provenance
from .auth.secrets import MasterKey, SealError
from .broker.connection import (
    UNAVAILABLE,
    BrokerConnection,
    retry_unavailable,
)
from .contents import EXPORT_PAGE_BYTES, QueueContents
from .controller.accounts import Accounts
from .controller.desk import drop_expired
from .controller.sampler import read_samples
from .depth import Depth, depth_reads, read_depth, read_depths
from .envelope import (
    DELAY_RULE,
    check_delay,
    deadline_of,
    delay_subject,
    lane_subject,
    message_id,
    nak_payload,
    prior_attempts,
    publish_as_next,
    put_headers,
    rfc3339,
    schedule_headers,
)
from .errors import (
    BrokerUnavailable,
    Conflict,
    MessageTooLarge,
    NotFound,
    SpecError,
    publish_refused,
)
from .names import CONSUMER, LANES, inbox_prefix, lane_consumer, notes_subject, send_subject, stream_name, username
from .redrive import DeadLetterOps
from .spec import (
    MAX_HISTORY_HOURS,
    MAX_NACK_DELAY,
    MAX_PEEK,
    MAX_RECEIVE,
    MAX_RECEIVE_WAIT,
    NACK_DELAY_RULE,
    PEEK_LIMIT_RULE,
    PROJECT_PATTERN,
    QUEUE_NAME_PATTERN,
    RECEIVE_MAX_RULE,
    RECEIVE_WAIT_RULE,
    Queue,
    QueuePatch,
    QueueSpec,
    check_dedupe_key,
    password_secret_name,
    queue_key,
    rule,
    subject_for,
)
from .state.kv import Store
from .state.records import QueueRecord, QueueStatus

log = logging.getLogger("enclave.service")

RECEIPT_PURPOSE = "receipt"
SEND_TIMEOUT = 5.0  #: seconds
PRIORITY_POLL = 0.1  #: seconds between looks at every priority lane while a receive by hand waits
DELETE_ATTEMPTS = 5  #: times a delete reads the record again when another write came first


#: seconds one pull of a receive by hand waits at most: a longer wait sends another, so a broker
#: restarted meanwhile (which forgets pending pulls) is asked again
PULL_SECONDS = 2.0


def _queue_missing(project: str, name: str) -> NotFound:
    return NotFound(f"Queue '{name}' does not exist in project '{project}'.")


def not_ready(record: QueueRecord) -> Conflict:
    """The Conflict of a queue whose stream is not there yet (just created, or its account is
    being loaded by the broker)."""
    name, project = record.spec.name, record.spec.project
    return Conflict(f"Queue '{name}' in project '{project}' is not ready yet; wait until its status is Ready "
                    f"(GET /v1/projects/{project}/queues/{name}/status?wait_seconds=30).")


def was_ready(status: QueueStatus) -> bool:
    """Whether the reconciler has made the queue Ready at some generation: it is Ready now, or its
    Ready condition has a reason (a condition that was never true keeps ``NotObserved``, see
    ``QueueStatus.transition``). A queue Ready once keeps its stream until it is deleted."""
    return status.state == "Ready" or any(c.type == "Ready" and c.reason != "NotObserved" for c in status.conditions)


class QueueService:
    def __init__(self, store: Store, conn: BrokerConnection, accounts: Accounts, master: MasterKey,
                 broker_url: Callable[[], str], internal_broker_url: str,
                 status_changed: Optional[Callable[[str, float], Awaitable[None]]] = None) -> None:
        self.store = store
        self.status_changed = status_changed
        self.dead_letters = DeadLetterOps(self, Provenance.from_master(master))
        self.contents = QueueContents(self)
        self.conn = conn
        self.accounts = accounts
        self.master = master
        self.broker_url = broker_url
        self.internal_broker_url = internal_broker_url
        #: ids of queues seen Ready (account ids are never reused: a deleted queue's account goes)
        self._ready: set[str] = set()

    # -- declarations ---------------------------------------------------------------------------

    def view(self, record: QueueRecord) -> Queue:
        spec = record.spec
        return Queue(
            id=record.id,
            **spec.model_dump(),
            username=username(record.id),
            password_secret=password_secret_name(spec.name),
            subject=subject_for(spec.project, spec.name),
            broker_url=self.broker_url(),
            internal_broker_url=self.internal_broker_url,
        )

    async def _get(self, project: str, name: str) -> tuple[QueueRecord, int]:
        if not (PROJECT_PATTERN.fullmatch(project) and QUEUE_NAME_PATTERN.fullmatch(name)):
            raise _queue_missing(project, name)  # names nothing (and is no state-store key)
        found = await self.store.queues.get(queue_key(project, name))
        if found is None:
            raise _queue_missing(project, name)
        return found

    async def live(self, project: str, name: str) -> QueueRecord:
        """The record of a queue that exists and is not being deleted; NotFound otherwise."""
        record, _ = await self._get(project, name)
        if record.deleting:
            raise _queue_missing(project, name)
        return record

    async def ready(self, project: str, name: str) -> QueueRecord:
        """The record of a live queue whose stream is there; NotFound, or Conflict (``not_ready``)
        while the reconciler has not made it Ready yet. The status is read until it has been."""
        record = await self.live(project, name)
        if record.id not in self._ready:
            found = await self.store.status.get(record.key)
            if found is None or not was_ready(found[0]):
                raise not_ready(record)
            self._ready.add(record.id)
        return record

    async def list(self, project: str) -> list[Queue]:
        records = await self.store.queues.items(f"{project}.*")
        return [self.view(r) for _, r, _ in sorted(records, key=lambda item: item[0]) if not r.deleting]

    async def get(self, project: str, name: str) -> Queue:
        return self.view(await self.live(project, name))

    async def _check_dead_letter_queue(self, spec: QueueSpec) -> None:
        """SpecError naming dead_letter_queue if it names no live queue of the project, or a queue
        whose own chain of dead-letter queues leads back here: a cycle (a → b → a) would leave
        each queue of it another's DLQ, so none could ever be deleted."""
        dlq = spec.dead_letter_queue
        if dlq is None:
            return
        found = await self.store.queues.get(queue_key(spec.project, dlq))
        if found is None or found[0].deleting:
            message = f"names queue '{dlq}', which does not exist in project '{spec.project}'"
            raise SpecError(f"dead_letter_queue {message}.", errors=[{"field": "dead_letter_queue", "message": message}])
        chain = [spec.name, dlq]
        record = found[0]
        while record.spec.dead_letter_queue is not None and record.spec.dead_letter_queue not in chain[1:]:
            chain.append(record.spec.dead_letter_queue)
            if chain[-1] == spec.name:
                message = f"names queue '{dlq}', which would form a cycle {' → '.join(chain)}"
                raise SpecError(f"dead_letter_queue {message}: a queue's dead letters must end somewhere.",
                                errors=[{"field": "dead_letter_queue", "message": message}])
            nxt = await self.store.queues.get(queue_key(spec.project, chain[-1]))
            if nxt is None or nxt[0].deleting:
                return
            record = nxt[0]

    async def create(self, spec: QueueSpec) -> Queue:
        """Declare a queue. Conflict if the name is taken; SpecError if the DLQ does not exist;
        StorageFull if its max_bytes does not fit in the broker's store."""
        existing = await self.store.queues.get(spec.key)
        if existing is not None:
            raise self._taken(spec.project, spec.name, existing[0])
        await self._check_dead_letter_queue(spec)
        account = await self.accounts.claim(spec.key, spec.max_bytes)
        record = QueueRecord(id=account.id, spec=spec)
        try:
            await self.store.queues.create(spec.key, record)
        except Conflict:
            await self.accounts.release(account.id)
            found = await self.store.queues.get(spec.key)
            raise self._taken(spec.project, spec.name, found[0] if found else None) from None
        return self.view(record)

    @staticmethod
    def _taken(project: str, name: str, record: Optional[QueueRecord]) -> Conflict:
        if record is not None and record.deleting:
            return Conflict(f"Queue '{name}' in project '{project}' is still being deleted; try again shortly.")
        return Conflict(f"Queue '{name}' already exists in project '{project}'.")

    async def update(self, project: str, name: str, patch: QueuePatch) -> Queue:
        """Change settings in place; the reconciler applies them to the broker."""
        for _ in range(5):
            record, revision = await self._get(project, name)
            if record.deleting:
                raise _queue_missing(project, name)
            spec = patch.apply(record.spec)
            if spec == record.spec:
                return self.view(record)
            if spec.dead_letter_queue != record.spec.dead_letter_queue:
                await self._check_dead_letter_queue(spec)
            if spec.max_bytes > record.spec.max_bytes:  # refused now, not found Errored later
                self.accounts.check_room(spec.max_bytes, record.id, f"Queue '{name}'")
            changed = record.model_copy(update={"spec": spec, "generation": record.generation + 1})
            try:
                await self.store.queues.update(record.key, changed, revision)
            except Conflict:
                continue  # changed by someone else meanwhile: apply the patch to the new version
            return self.view(changed)
        raise Conflict(f"Queue '{name}' in project '{project}' kept changing; try again.")

    async def delete(self, project: str, name: str) -> None:
        """Start deleting a queue (the reconciler finishes it); a queue already being deleted is
        left to it. Conflict if it is another live queue's DLQ; NotFound if it does not exist. A
        record written by someone else meanwhile (a PATCH, another delete, the reconciler removing
        it) is read again, not answered as a Conflict: those are the store's compare-and-set."""
        for _ in range(DELETE_ATTEMPTS):
            record, revision = await self._get(project, name)
            if record.deleting:
                return
            users = [r.spec.name for _, r, _ in await self.store.queues.items(f"{project}.*")
                     if r.spec.dead_letter_queue == name and not r.deleting]
            if users:
                raise Conflict(
                    f"Queue '{name}' is the dead-letter queue of queue '{users[0]}' in project '{project}'; "
                    "change or delete that queue first."
                )
            changed = record.model_copy(update={"deleting": True, "generation": record.generation + 1})
            try:
                await self.store.queues.update(record.key, changed, revision)
            except Conflict:
                continue
            self._ready.discard(record.id)
            return
        raise Conflict(f"Queue '{name}' in project '{project}' kept changing while being deleted; try again.")

    async def status(self, project: str, name: str) -> dict[str, Any]:
        """The queue's state and conditions. A spec the reconciler has not applied yet reads as
        ``Reconciling``, whatever the last outcome was."""
        record, _ = await self._get(project, name)
        found, counts = await asyncio.gather(self.store.status.get(record.key), self.store.counts(record.key))
        status = found[0] if found else QueueStatus.initial()
        state, message = status.state, status.message
        if record.deleting and state != "Deleting":
            state, message = "Deleting", "Waiting for the controller to delete the queue."
        elif not record.deleting and status.observed_generation < record.generation:
            state, message = "Reconciling", f"Waiting for the controller to apply generation {record.generation}."
        return {
            "state": state,
            "message": message,
            "generation": record.generation,
            "observed_generation": status.observed_generation,
            "conditions": [c.model_dump(mode="json") for c in status.conditions],
            "dead_lettered": counts.dead_lettered,
            "discarded": counts.discarded,
        }

    async def wait_settled(self, project: str, name: str, timeout: float) -> dict[str, Any]:
        """The status once the latest spec is applied (``Ready`` or ``Errored``), or as it stands
        after ``timeout`` seconds. NotFound once a deleted queue is gone."""
        deadline = time.monotonic() + timeout
        key = queue_key(project, name)
        while True:
            status = await self.status(project, name)
            settled = status["state"] in ("Ready", "Errored") and status["observed_generation"] >= status["generation"]
            remaining = deadline - time.monotonic()
            if settled or remaining <= 0:
                return status
            if self.status_changed is None:
                await asyncio.sleep(min(0.05, remaining))
            else:
                # wake on the reconciler's next write, and look again now and then in case the
                # change came from elsewhere (another control process, a restart)
                await self.status_changed(key, min(1.0, remaining))

    # -- depth --------------------------------------------------------------------------------

    async def depth(self, project: str, name: str) -> Depth:
        """How many messages the queue holds now, and where they are (see depth.py)."""
        record = await self.ready(project, name)
        dlq = await self._dead_letter_queue(record)
        try:
            return await read_depth(self.conn, record.id, dlq.id if dlq else None)
        except UNAVAILABLE:
            raise not_ready(record) from None

    async def _dead_letter_queue(self, record: QueueRecord) -> Optional[QueueRecord]:
        """The record of the queue's dead-letter queue, if it has one that is live."""
        if not record.spec.dead_letter_queue:
            return None
        found = await self.store.queues.get(queue_key(record.spec.project, record.spec.dead_letter_queue))
        return found[0] if found and not found[0].deleting else None

    async def depths(self, project: str) -> list[tuple[Queue, Optional[Depth]]]:
        """Every queue of a project with its depth (None where it could not be read: not ready)."""
        records = [r for _, r, _ in sorted(await self.store.queues.items(f"{project}.*"), key=lambda i: i[0])
                   if not r.deleting]
        found = await read_depths(self.conn, depth_reads(records))
        return [(self.view(r), d if isinstance(d, Depth) else None) for r, d in zip(records, found, strict=True)]

    async def overview(self, project: str) -> list[dict[str, Any]]:
        """One row a queue of the project: its state and depth (what the console's table shows)."""
        rows, statuses = await asyncio.gather(self.depths(project), self.store.status.items(f"{project}.*"))
        state_of = {key: status for key, status, _ in statuses}
        out = []
        for queue, depth in rows:
            status = state_of.get(queue_key(project, queue.name))
            out.append({
                "name": queue.name,
                "state": status.state if status else "Reconciling",
                "message": status.message if status else "Waiting for the controller.",
                "dead_letter_queue": queue.dead_letter_queue,
                "visibility_timeout_seconds": queue.visibility_timeout_seconds,
                "max_receives": queue.max_receives,
                "depth": depth.view() if depth else None,
            })
        return out

    async def projects(self) -> list[str]:
        """The projects that have queues (and ``default``), sorted."""
        keys = {key.split(".", 1)[0] for key, record, _ in await self.store.queues.items() if not record.deleting}
        return sorted(keys | {"default"})

    async def depth_history(self, project: str, name: str, hours: int = 24) -> list[dict[str, Any]]:
        """The queue's depth samples of the last ``hours`` hours, oldest first: ``{"t", "waiting",
        "in_flight", "delayed", "dead"}`` each (see controller/sampler.py)."""
        if not 1 <= hours <= MAX_HISTORY_HOURS:
            message = f"must be {rule('hours')} (got {hours!r})"
            raise SpecError(f"hours {message}.", errors=[{"field": "hours", "message": message}])
        record = await self.live(project, name)
        return await read_samples(self.conn, record.id, datetime.now(UTC) - timedelta(hours=hours))

    # -- credentials ----------------------------------------------------------------------------

    async def credentials(self, project: str, name: str) -> dict[str, str]:
        """What a raw NATS client needs to use the queue."""
        record = await self.live(project, name)
        return {
            "broker_url": self.broker_url(),
            "username": username(record.id),
            "password": self.accounts.password(record.id),
            "subject": subject_for(project, name),
            "inbox_prefix": inbox_prefix(record.id),
            "stream": stream_name(record.id),
            "consumer": CONSUMER,
        }

    async def read_secret(self, project: str, secret: str) -> dict[str, str]:
        """A managed secret's value (today: a queue's password, ``<queue>-password``)."""
        name = secret.removesuffix("-password")
        found = await self.store.queues.get(queue_key(project, name)) if name != secret else None
        if found is None or found[0].deleting:
            raise NotFound(f"Secret '{secret}' does not exist in project '{project}'.")
        return {"name": secret, "project": project, "value": self.accounts.password(found[0].id)}

    # -- messages by hand -----------------------------------------------------------------------

    async def send(self, project: str, name: str, body: bytes, content_type: Optional[str] = None,
                   dedupe_key: Optional[str] = None, delay: float = 0.0) -> dict[str, Any]:
        """Publish one message and wait for the broker to store it. Returns its ``sequence`` and
        whether it was a ``duplicate`` (a ``dedupe_key`` seen within the window: the first message's
        sequence, nothing stored). With ``delay`` seconds (0–604800) the message is stored as a
        one-shot schedule that the broker copies onto the queue when due (envelope.py), and the
        answer adds ``delayed_until``; its ``sequence`` is the schedule's, which the copy carries as
        its id (``Enclave-Id``). Raises QueueFull at ``max_messages``, MessageTooLarge, SpecError."""
        try:
            delay = check_delay(delay)
        except SpecError:  # the API's name of the field
            message = f"must be {DELAY_RULE} (got {delay!r})"
            raise SpecError(f"delay_seconds {message}.",
                            errors=[{"field": "delay_seconds", "message": message}]) from None
        if dedupe_key is not None:
            check_dedupe_key(dedupe_key)
        record = await self.ready(project, name)
        limit = record.spec.max_message_bytes
        if len(body) > limit:
            raise MessageTooLarge(
                f"The message is {len(body)} bytes; queue '{name}' accepts at most {limit} (max_message_bytes)."
            )
        subject = subject_for(project, name)
        headers = {"Content-Type": content_type} if content_type else {}
        if dedupe_key is not None:
            headers["Nats-Msg-Id"] = dedupe_key
        due = None
        if delay > 0 and record.spec.max_messages:  # schedules need discard old (controller/mapping.py)
            message = f"cannot be used with queue '{name}', which has max_messages (a limit rules out delayed messages)"
            raise SpecError(f"delay_seconds {message}.", errors=[{"field": "delay_seconds", "message": message}])
        if delay > 0:
            now = datetime.now(UTC)
            due = now + timedelta(seconds=delay)
            headers.update({**schedule_headers(subject, due), **put_headers(now, delay_s=delay)})
            schedule = delay_subject(subject, NUID().next().decode())
            ack = await publish_as_next(lambda h: self._publish(record, schedule, body, h), headers,
                                        (await self._stream_info(record)).state.last_seq)
            if "error" not in ack and not ack.get("duplicate"):
                await self._note_scheduled(record)
        else:
            ack = await self._publish(record, subject, body, headers)
        if "error" in ack:
            raise publish_refused(ack["error"], f"'{name}' in project '{project}'", record.spec.max_messages, record.spec.max_bytes)
        sent = {"sequence": ack["seq"], "duplicate": bool(ack.get("duplicate"))}
        return {**sent, "delayed_until": rfc3339(due)} if due else sent

    async def _publish(self, record: QueueRecord, subject: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        """Publish to ``subject`` (in the queue's account) and return the broker's answer (PubAck or error)."""
        name = record.spec.name
        try:
            reply = await retry_unavailable(lambda: self.conn.control.request(
                send_subject(record.id, subject), body, timeout=SEND_TIMEOUT, headers=headers or None))
        except UNAVAILABLE:
            raise not_ready(record) from None
        except nats.errors.TimeoutError as exc:
            raise BrokerUnavailable(f"The broker did not confirm the message to queue '{name}' in time.") from exc
        return json.loads(reply.data)

    async def _note_scheduled(self, record: QueueRecord) -> None:
        """Tell the desk a schedule was stored, as the SDK does (controller/desk.py counts them so
        that metrics tell deletions by workers from schedules that fired). The message is stored
        already: a note that does not land is logged, not raised."""
        try:
            await retry_unavailable(lambda: self.conn.js.publish(notes_subject(record.id), b'{"scheduled": 1}'))
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            log.warning("schedule of queue %s stored but not noted: %r", record.key, exc)

    async def _stream_info(self, record: QueueRecord) -> Any:
        try:
            return await retry_unavailable(lambda: self.conn.queue_js(record.id).stream_info(stream_name(record.id)))
        except (*UNAVAILABLE, nats.js.errors.NotFoundError):
            raise not_ready(record) from None

    async def _consumer_info(self, record: QueueRecord, consumer: str = CONSUMER) -> Any:
        try:
            return await retry_unavailable(
                lambda: self.conn.queue_js(record.id).consumer_info(stream_name(record.id), consumer))
        except (*UNAVAILABLE, nats.js.errors.NotFoundError):
            raise not_ready(record) from None

    @staticmethod
    def _levels(record: QueueRecord) -> tuple[int, ...]:
        """The queue's priority levels that have a consumer: 0, and 1–9 with ``priorities``."""
        return (0, *LANES) if record.spec.priorities else (0,)

    async def _floors(self, record: QueueRecord) -> dict[str, int]:
        """The last sequence each consumer delivered, by the subject it delivers: a message at or
        below it has been taken (it is in flight), one above it waits."""
        subject = subject_for(record.spec.project, record.spec.name)
        levels = self._levels(record)
        infos = await asyncio.gather(*(self._consumer_info(record, lane_consumer(level)) for level in levels))
        return {lane_subject(subject, level): info.delivered.stream_seq for level, info in zip(levels, infos, strict=True)}

    async def receive(self, project: str, name: str, max_messages: int = 1, wait: float = 1.0) -> list[dict[str, Any]]:
        """Take up to ``max_messages`` messages, waiting up to ``wait`` seconds for the first.
        Each stays hidden for the visibility timeout unless deleted by its receipt."""
        for field, value, ok, phrase in (("max", max_messages, 1 <= max_messages <= MAX_RECEIVE, RECEIVE_MAX_RULE),
                                         ("wait", wait, 0 <= wait <= MAX_RECEIVE_WAIT, RECEIVE_WAIT_RULE)):
            if not ok:
                message = f"must be {phrase} (got {value!r})"
                raise SpecError(f"{field} {message}.", errors=[{"field": field, "message": message}])
        record = await self.ready(project, name)
        if record.spec.priorities:
            msgs = await self._take_by_priority(record, max_messages, wait)
        else:
            msgs = await self._take(record, CONSUMER, max_messages, wait)
        now = datetime.now(UTC)
        kept = []
        for msg in msgs:  # one past its start deadline is not started again: dropped, counted expired
            deadline = deadline_of(dict(msg.headers or {}))
            if deadline is not None and deadline <= now:
                await drop_expired(self.conn, self.store, record, msg.metadata.sequence.stream, taken_ok=True)
                with contextlib.suppress(nats.errors.Error):
                    await msg.ack()
            else:
                kept.append(msg)
        return [self._received(record, msg, now + timedelta(seconds=self._lease(record, msg))) for msg in kept]

    async def _take(self, record: QueueRecord, consumer: str, count: int, wait: float) -> list[Any]:
        """Up to ``count`` messages from one consumer, waiting up to ``wait`` seconds for the first."""
        js = self.conn.queue_js(record.id)
        try:
            sub = await retry_unavailable(lambda: js.pull_subscribe_bind(consumer, stream=stream_name(record.id)))
        except UNAVAILABLE:
            raise not_ready(record) from None
        deadline = time.monotonic() + max(wait, 0.05)
        try:
            while True:  # pulls of at most PULL_SECONDS: a restarted broker forgets a pending one
                left = deadline - time.monotonic()
                try:
                    return await sub.fetch(count, timeout=max(min(left, PULL_SECONDS), 0.05))
                except (nats.errors.TimeoutError, TimeoutError):  # nats-py raises either when nothing came
                    if deadline - time.monotonic() < 0.05:
                        return []
        except UNAVAILABLE:  # nobody answers for the consumer: the broker is loading the account
            raise not_ready(record) from None
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def _take_by_priority(self, record: QueueRecord, count: int, wait: float) -> list[Any]:
        """Up to ``count`` messages, the highest priority lane first. The lanes' consumers say
        which have messages to deliver (never delivered, or handed back); while none has, they
        are asked again every PRIORITY_POLL seconds, for up to ``wait`` seconds."""
        deadline = time.monotonic() + wait
        levels = sorted(self._levels(record), reverse=True)
        while True:
            infos = await asyncio.gather(*(self._consumer_info(record, lane_consumer(level)) for level in levels))
            msgs: list[Any] = []
            for level, info in zip(levels, infos, strict=True):
                if len(msgs) < count and (info.num_pending or info.num_ack_pending):
                    fetch_wait = 1.0 if info.num_pending else 0.1  # a handed-back one may not be due yet
                    msgs += await self._take(record, lane_consumer(level), count - len(msgs), fetch_wait)
            if msgs or time.monotonic() >= deadline:
                return msgs
            await asyncio.sleep(min(PRIORITY_POLL, max(deadline - time.monotonic(), 0)))

    @staticmethod
    def _lease(record: QueueRecord, msg: Any) -> float:
        """How long a message just received stays hidden: the retry schedule's entry for this
        receive when the queue has one (the broker leases by it), else the visibility timeout."""
        if record.spec.retry_backoff_seconds:
            return record.spec.retry_delay(msg.metadata.num_delivered)
        return float(record.spec.visibility_timeout_seconds)

    def _received(self, record: QueueRecord, msg: Any, hidden_until: datetime) -> dict[str, Any]:
        """A received message as the API returns it, with its sealed receipt."""
        meta = msg.metadata
        receipt = self.master.seal(json.dumps({"r": msg.reply, "until": hidden_until.timestamp(),
                                              "n": meta.num_delivered}).encode(),
                                   RECEIPT_PURPOSE, record.id)
        headers = dict(msg.headers or {})
        out: dict[str, Any] = {
            "receipt": receipt,
            "id": message_id(headers, meta.sequence.stream),
            "sequence": meta.sequence.stream,
            "receive_count": meta.num_delivered,
            "attempts": prior_attempts(headers) + meta.num_delivered,
            "sent_at": meta.timestamp.isoformat() if meta.timestamp else None,
            "visible_again_at": hidden_until.isoformat(),
            "content_type": (msg.headers or {}).get("Content-Type"),
        }
        try:
            out["body"] = msg.data.decode()
        except UnicodeDecodeError:
            out["body"], out["body_base64"] = None, base64.b64encode(msg.data).decode()
        return out

    async def peek(self, project: str, name: str, limit: int = 10) -> list[dict[str, Any]]:
        """The oldest ``limit`` messages, waiting or in flight, read without receiving them."""
        if not 1 <= limit <= MAX_PEEK:
            message = f"must be {PEEK_LIMIT_RULE} (got {limit!r})"
            raise SpecError(f"limit {message}.", errors=[{"field": "limit", "message": message}])
        record = await self.ready(project, name)
        peeked = []
        for letter in await self.dead_letters.read(record, 0, limit):
            view = letter.view()
            peeked.append({"sequence": letter.sequence, "sent_at": letter.stored_at,
                           "content_type": view["content_type"], "body": view["body"],
                           **({"body_base64": view["body_base64"]} if "body_base64" in view else {})})
        return peeked

    def _unseal_receipt(self, record: QueueRecord, receipt: str) -> dict[str, Any]:
        """The receipt's content; SpecError if it is not one of this queue's, Conflict if expired."""
        name, project = record.spec.name, record.spec.project
        try:
            sealed = json.loads(self.master.unseal(receipt, RECEIPT_PURPOSE, record.id))
        except (SealError, ValueError):
            message = f"is not a receipt handle of queue '{name}' in project '{project}'"
            raise SpecError(f"receipt {message}.", errors=[{"field": "receipt", "message": message}]) from None
        if time.time() > sealed["until"]:
            expired = datetime.fromtimestamp(sealed["until"], UTC).isoformat(timespec="seconds")
            raise Conflict(f"The receipt expired at {expired} with its visibility timeout; the message may "
                           "have been received again. Receive it again to delete or nack it.")
        return sealed

    async def _settle(self, record: QueueRecord, reply: str, payload: bytes, verb: str) -> None:
        try:
            await retry_unavailable(lambda: self.conn.control.request(reply, payload, timeout=SEND_TIMEOUT))
        except (nats.errors.TimeoutError, *UNAVAILABLE) as exc:
            raise BrokerUnavailable(f"The broker did not confirm the {verb} on queue '{record.spec.name}'.") from exc

    async def delete_message(self, project: str, name: str, receipt: str) -> None:
        """Delete a received message by its receipt handle (acknowledge it to the broker)."""
        record = await self.live(project, name)
        sealed = self._unseal_receipt(record, receipt)
        await self._settle(record, sealed["r"], b"+ACK", "delete")

    async def nack_message(self, project: str, name: str, receipt: str, delay: float = 0) -> None:
        """Hand a received message back by its receipt: visible again after ``delay`` seconds
        (at once by default). The receive it used still counts toward ``max_receives``."""
        if not 0 <= delay <= MAX_NACK_DELAY:
            message = f"must be {NACK_DELAY_RULE} (got {delay!r})"
            raise SpecError(f"delay {message}.", errors=[{"field": "delay", "message": message}])
        record = await self.live(project, name)
        sealed = self._unseal_receipt(record, receipt)
        payload = nak_payload(delay, sealed.get("n", 1), list(record.spec.retry_backoff_seconds or []))
        await self._settle(record, sealed["r"], payload, "nack")

    # -- the queue's contents (contents.py) ---------------------------------------------------

    async def export_page(self, project: str, name: str, cursor: Optional[str] = None,
                          max_bytes: int = EXPORT_PAGE_BYTES) -> tuple[list[dict[str, Any]], Optional[str]]:
        return await self.contents.export_page(project, name, cursor, max_bytes)

    def export(self, project: str, name: str) -> AsyncIterator[dict[str, Any]]:
        return self.contents.export(project, name)

    async def clear(self, project: str, name: str) -> dict[str, int]:
        return await self.contents.clear(project, name)
