"""The desk: what a queue's apps ask the control plane about their own queue, and start deadlines.

An app (the SDK, as the queue's user) reaches the desk with a request to ``enclave.desk.<verb>``
in its own account; the broker delivers it to the control account as ``desk.<queue id>.<verb>``
(broker/config.py). The queue id comes from that import, not from the request, so an app can ask
only about its own queue. Answers are JSON: ``{"result": …}`` or ``{"error": <problem>}`` (the
API's problem shape, which the SDK turns back into the same exception class).

Verbs: ``release`` (hand a message back without spending an attempt: a copy that keeps its id,
attempts, put time and deadline replaces it), ``notes`` (the last errors of some messages),
``expire`` (drop messages past their start deadline, counted), ``metrics``, ``history``,
``dead_letters`` / ``retry`` / ``discard`` (this queue's letters on its dead-letter queue),
``clear`` and ``export`` (QueueService).

Start deadlines (``put(ttl_s=)``): after the broker stored such a message the SDK publishes a
note ``{"seq", "deadline"}`` to ``enclave.notes``, stored in the control account's
``ENCLAVE_NOTES`` stream even while this process is down. The desk reads every note (an ordered
consumer from the start), keeps them in a heap by deadline, and at each deadline removes the
message if no worker has taken it yet (its sequence is above the consumer's last delivered one),
counting it as expired; then it deletes the note. A message taken before its deadline is left to
its worker; if it comes back after the deadline, the SDK drops it on receipt (``expire``). A note
for a delayed put (``{"scheduled": 1}``) counts a schedule stored, which ``metrics`` needs to
tell deletions by workers from schedules that fired.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Optional

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from .. import envelope
from ..broker.config import CONTROL_STREAM_BYTES
from ..broker.connection import BrokerConnection, delete_message, ensure_stream, retry_unavailable
from ..depth import read_depth
from ..errors import EnclaveError, NotFound, SpecError, publish_refused
from ..names import errors_subject, lane_consumer, send_subject, stream_name
from ..spec import subject_for
from ..state.kv import Store
from ..state.records import QueueCounters, QueueRecord
from .deadletters import ERRORS_STREAM, DeadLetters, clean_headers
from .naks import NakCounter

if TYPE_CHECKING:
    from ..service import QueueService

log = logging.getLogger("enclave.desk")

NOTES_STREAM = "ENCLAVE_NOTES"
NOTES_KEEP = envelope.MAX_TTL + 86400.0  #: seconds a note is kept (the longest deadline, and a day)
NOTES_PER_QUEUE = 5000  #: notes (pending start deadlines) one queue may have stored at once
NOTE_SKEW = 300.0  #: seconds an app's clock may run ahead of ours: a later deadline is no put's
MAX_IDS = 1000  #: messages one ``notes`` or ``expire`` request may name
MAX_LIST = 100  #: dead letters one ``dead_letters`` request may return
EXPIRY_TICK = 0.25  #: seconds between looks at the earliest deadline


def removed_otherwise(counts: QueueCounters, delayed_now: int) -> int:
    """Messages a queue's stream removed that no worker acked: those the control plane removed
    itself (dead-lettered, discarded, expired, cleared, released originals) and the delayed
    messages' schedules that fired (stored and not cleared, less those still waiting)."""
    fired = max(counts.scheduled - delayed_now, 0)
    return counts.dead_lettered + counts.discarded + counts.expired + counts.cleared + counts.released + fired


def outcomes(depth: Any, counts: QueueCounters, unsaved_naks: int = 0) -> dict[str, int]:
    """A queue's outcome counts since it was created, from its depth (the broker's sequences)
    and its stored counters.

    - processed: receives that spent an attempt (``received`` less the ones released);
    - succeeded: messages a worker deleted: everything removed from the stream except what the
      control plane removed (dead-lettered, discarded, expired, cleared, released originals) and
      schedules that fired (stored and not cleared, less those still waiting);
    - failed: attempts a worker reported failed (nacked or rejected; a lease that runs out is
      not seen: it shows in ``processed`` only); retried: nacked;
    - expired, dead_lettered (a reject included), discarded.
    """
    nacked = counts.nacked + unsaved_naks
    succeeded = depth.removed - removed_otherwise(counts, depth.delayed)
    return {
        "processed": max(depth.received - counts.released, 0),
        "succeeded": max(succeeded, 0),
        "failed": nacked + counts.rejected,
        "retried": nacked,
        "expired": counts.expired,
        "dead_lettered": counts.dead_lettered,
        "discarded": counts.discarded,
    }


def _problem(exc: EnclaveError) -> dict[str, Any]:
    return {"status": exc.status, "title": exc.title, "detail": exc.message, "errors": exc.errors}


def _int(body: dict[str, Any], field: str, low: int, high: int, default: Optional[int] = None) -> int:
    value = body.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        message = f"must be an integer from {low} to {high} (got {value!r})"
        raise SpecError(f"{field} {message}.", errors=[{"field": field, "message": message}])
    return value


def _ids(body: dict[str, Any], field: str) -> list[int]:
    values = body.get(field)
    if not isinstance(values, list) or len(values) > MAX_IDS or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        message = f"must be a list of at most {MAX_IDS} positive integers"
        raise SpecError(f"{field} {message}.", errors=[{"field": field, "message": message}])
    return values


class Desk:
    def __init__(self, store: Store, conn: BrokerConnection, service: QueueService, movers: DeadLetters,
                 naks: NakCounter) -> None:
        self.store = store
        self.conn = conn
        self.service = service
        self.movers = movers
        self.naks = naks
        self._deadlines: list[tuple[datetime, str, int, int]] = []  #: (deadline, queue id, seq, note seq)
        self._wake = asyncio.Event()
        self._subs: list[Any] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._expiry: Optional[asyncio.Task[None]] = None

    async def start(self) -> None:
        await ensure_stream(self.conn.js, api.StreamConfig(
            name=NOTES_STREAM, subjects=["notes.*"], retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_age=NOTES_KEEP, max_msg_size=1024,
            # each queue's notes are one subject: the broker refuses a queue's note past
            # NOTES_PER_QUEUE (the put stands; its SDK still drops it on receipt after its
            # deadline), and a full stream refuses new notes instead of dropping other queues'
            max_bytes=CONTROL_STREAM_BYTES[NOTES_STREAM], max_msgs_per_subject=NOTES_PER_QUEUE,
            discard=api.DiscardPolicy.NEW, discard_new_per_subject=True, num_replicas=1,
        ))
        self._subs.append(await self.conn.control.subscribe("desk.*.*", queue="desk", cb=self._on_request))
        self._expiry = asyncio.create_task(self._expire_due(), name="desk-expiry")

    async def _read_notes(self) -> None:
        """Read every note from the start, then each new one (an ordered consumer). Its creation
        is retried: JetStream can be slow to answer while the control plane starts."""
        delay = 0.1
        while True:
            try:
                self._subs.append(await self.conn.js.subscribe("notes.*", ordered_consumer=True, cb=self._on_note))
                return
            except (nats.errors.Error, nats.js.errors.Error) as exc:
                log.info("notes not read yet: %r", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        tasks = [*self._tasks, *([self._expiry] if self._expiry else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- requests -------------------------------------------------------------------------------

    async def _on_request(self, request: Msg) -> None:
        task = asyncio.create_task(self._answer(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, request: Msg) -> None:
        _, queue_id, verb = request.subject.split(".", 2)
        try:
            body = json.loads(request.data or b"{}")
            if not isinstance(body, dict):
                raise SpecError("The request must be a JSON object.")
            record = await self.movers.record_of(queue_id)
            if record is None or record.deleting:
                raise NotFound("The queue does not exist any more.")
            handler = getattr(self, f"_verb_{verb}", None)
            if handler is None:
                raise NotFound(f"The desk has no verb '{verb}'.")
            reply: dict[str, Any] = {"result": await handler(record, body)}
        except EnclaveError as exc:
            reply = {"error": _problem(exc)}
        except (ValueError, KeyError, TypeError) as exc:
            reply = {"error": _problem(SpecError(f"Bad request: {exc}."))}
        except Exception as exc:  # answered, so the app fails at once instead of timing out
            log.warning("desk %s for %s failed: %r", verb, queue_id, exc)
            reply = {"error": _problem(EnclaveError(f"The control plane failed: {exc!r}."))}
        with contextlib.suppress(nats.errors.Error):
            await request.respond(json.dumps(reply).encode())

    async def _verb_release(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Any]:
        """Replace message ``seq`` by a copy that has spent ``receive_count - 1`` receives of its
        own (so the attempt being released is given back), visible after ``delay_s``."""
        seq = _int(body, "seq", 1, 2**63)
        receive_count = _int(body, "receive_count", 1, 2**31)
        return await self._release(record, seq, receive_count, envelope.check_delay(body.get("delay_s", 0)))

    async def _verb_release_many(self, record: QueueRecord, body: dict[str, Any]) -> int:
        """``release`` for many messages at once (``messages``: ``[{"seq", "receive_count"}]``),
        visible again at once: what an iteration left early hands back. How many were released
        (one gone meanwhile is skipped)."""
        given = body.get("messages")
        if not isinstance(given, list) or len(given) > MAX_IDS:
            message = f"must be a list of at most {MAX_IDS} objects with seq and receive_count"
            raise SpecError(f"messages {message}.", errors=[{"field": "messages", "message": message}])
        released = 0
        for item in given:
            with contextlib.suppress(NotFound):
                await self._release(record, _int(item, "seq", 1, 2**63), _int(item, "receive_count", 1, 2**31), 0.0)
                released += 1
        return released

    async def _release(self, record: QueueRecord, seq: int, receive_count: int, delay: float) -> dict[str, Any]:
        source = self.conn.queue_js(record.id)
        stream = stream_name(record.id)
        try:
            msg = await retry_unavailable(lambda: source.get_msg(stream, seq=seq, direct=True))
        except nats.js.errors.NotFoundError:
            raise NotFound(f"Message {seq} is not on the queue any more (deleted, or its lease ran out and "
                           "someone else took it and deleted it).") from None
        headers = dict(msg.headers or {})
        copy = {k: v for k, v in clean_headers(headers).items() if k not in envelope.SYSTEM_HEADERS}
        copy[envelope.ID] = str(envelope.message_id(headers, seq))
        copy[envelope.PRIOR_ATTEMPTS] = str(envelope.prior_attempts(headers) + receive_count - 1)
        copy[envelope.ENQUEUED_AT] = headers.get(envelope.ENQUEUED_AT) or envelope.rfc3339(msg.time or datetime.now(UTC))
        if envelope.DEADLINE in headers:
            copy[envelope.DEADLINE] = headers[envelope.DEADLINE]
        subject = subject_for(record.spec.project, record.spec.name)
        lane = envelope.lane_subject(subject, envelope.priority_of(msg.subject or ""))  # it keeps its priority
        target = lane
        if delay > 0:
            copy.update(envelope.schedule_headers(lane, datetime.now(UTC) + timedelta(seconds=delay)))
            target = envelope.delay_subject(subject, f"r{record.id}{seq}")
        reply = await retry_unavailable(lambda: self.conn.control.request(
            send_subject(record.id, target), msg.data or b"", timeout=5, headers=copy))
        ack = json.loads(reply.data)
        if "error" in ack:
            raise publish_refused(ack["error"], f"'{record.spec.name}' in project '{record.spec.project}'",
                                  record.spec.max_messages, record.spec.max_bytes)
        await delete_message(source, stream, seq)
        await self.store.count(record.key, "released")
        if delay > 0:
            await self.store.count(record.key, "scheduled")
        return {"id": int(copy[envelope.ID]), "sequence": int(ack["seq"])}

    async def _verb_notes(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Optional[str]]:
        """The last error reported for each message id (null where none was)."""
        ids = _ids(body, "ids")
        errors = await asyncio.gather(*(self.movers.last_error(record.id, i) for i in ids))
        return {str(i): error for i, error in zip(ids, errors, strict=True)}

    async def _verb_expire(self, record: QueueRecord, body: dict[str, Any]) -> int:
        """Drop the messages ``seqs`` that are past their start deadline; how many were dropped."""
        dropped = 0
        for seq in _ids(body, "seqs"):
            dropped += await drop_expired(self.conn, self.store, record, seq, taken_ok=True)
        return dropped

    async def _verb_metrics(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, int]:
        depth = await read_depth(self.conn, record.id)
        async with self.naks.lock:
            counts = await self.store.counts(record.key)
            unsaved = self.naks.pending.get(record.id, 0)
        return outcomes(depth, counts, unsaved)

    async def _verb_history(self, record: QueueRecord, body: dict[str, Any]) -> list[dict[str, Any]]:
        hours = _int(body, "hours", 1, 10**6, default=24)
        return await self.service.depth_history(record.spec.project, record.spec.name, hours)

    async def _dead_letter_queue(self, record: QueueRecord) -> QueueRecord:
        if not record.spec.dead_letter_queue:
            raise NotFound(f"Queue '{record.spec.name}' has no dead-letter queue.")
        return await self.service.live(record.spec.project, record.spec.dead_letter_queue)

    def _ours(self, record: QueueRecord, headers: dict[str, str]) -> bool:
        """Whether a letter (read through ``dead_letters.read``, so its provenance is vouched for)
        came from ``record``'s queue."""
        return (headers.get(envelope.SOURCE_QUEUE) == record.spec.name
                and headers.get(envelope.SOURCE_PROJECT) == record.spec.project)

    async def _verb_dead_letters(self, record: QueueRecord, body: dict[str, Any]) -> list[dict[str, Any]]:
        """This queue's oldest ``limit`` dead letters (its DLQ may hold other queues' letters too)."""
        limit = _int(body, "limit", 1, MAX_LIST, default=10)
        if not record.spec.dead_letter_queue:
            return []
        dlq = await self._dead_letter_queue(record)
        found: list[dict[str, Any]] = []
        after = 0
        while len(found) < limit:
            letters = await self.service.dead_letters.read(dlq, after, MAX_LIST)
            found += [letter.view() for letter in letters if self._ours(record, letter.headers)]
            if len(letters) < MAX_LIST:
                break
            after = letters[-1].sequence
        return found[:limit]

    async def _our_letter(self, record: QueueRecord, body: dict[str, Any]) -> tuple[QueueRecord, int]:
        seq = _int(body, "seq", 1, 2**63)
        dlq = await self._dead_letter_queue(record)
        letters = await self.service.dead_letters.read(dlq, seq - 1, 1)
        if not letters or letters[0].sequence != seq or not self._ours(record, letters[0].headers):
            raise NotFound(f"Dead letter {seq} of queue '{record.spec.name}' does not exist.")
        return dlq, seq

    async def _verb_retry(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Any]:
        dlq, seq = await self._our_letter(record, body)
        return await self.service.dead_letters.retry(dlq.spec.project, dlq.spec.name, seq)

    async def _verb_discard(self, record: QueueRecord, body: dict[str, Any]) -> None:
        dlq, seq = await self._our_letter(record, body)
        await self.service.dead_letters.discard(dlq.spec.project, dlq.spec.name, seq)

    async def _verb_clear(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, int]:
        return await self.service.clear(record.spec.project, record.spec.name)

    async def _verb_export(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Any]:
        cursor = body.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise SpecError("cursor must be the text a previous page returned.",
                            errors=[{"field": "cursor", "message": "must be the text a previous page returned"}])
        lines, after = await self.service.export_page(record.spec.project, record.spec.name, cursor,
                                                      max_bytes=512 * 1024)
        return {"messages": lines, "cursor": after}

    # -- start deadlines ------------------------------------------------------------------------

    async def _on_note(self, note: Msg) -> None:
        queue_id = note.subject.split(".", 1)[1]
        try:
            body = json.loads(note.data)
            seq = int(body.get("seq", 0))
        except (ValueError, TypeError, AttributeError):
            return
        note_seq = note.metadata.sequence.stream
        if body.get("scheduled"):
            record = await self.movers.record_of(queue_id)
            if record is not None:
                await self.store.count(record.key, "scheduled")
            await self._forget_note(note_seq)
            return
        deadline = envelope.parse_time(body.get("deadline"))
        latest = datetime.now(UTC) + timedelta(seconds=envelope.MAX_TTL + NOTE_SKEW)
        if deadline is None or seq <= 0 or deadline > latest:  # no put makes such a note: forget it
            await self._forget_note(note_seq)
            return
        heapq.heappush(self._deadlines, (deadline, queue_id, seq, note_seq))
        self._wake.set()

    async def _forget_note(self, note_seq: int) -> None:
        with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
            await delete_message(self.conn.js, NOTES_STREAM, note_seq)

    async def _expire_due(self) -> None:
        await self._read_notes()
        while True:
            now = datetime.now(UTC)
            due = []
            while self._deadlines and self._deadlines[0][0] <= now:
                due.append(heapq.heappop(self._deadlines))
            for _due, queue_id, seq, note_seq in due:
                try:
                    record = await self.movers.record_of(queue_id)
                    if record is not None and not record.deleting:
                        await drop_expired(self.conn, self.store, record, seq, taken_ok=False)
                    await self._forget_note(note_seq)
                except Exception as exc:  # the broker restarting: try again a little later
                    log.info("deadline of message %d of %s not handled yet: %r", seq, queue_id, exc)
                    heapq.heappush(self._deadlines, (now + timedelta(seconds=1), queue_id, seq, note_seq))
            self._wake.clear()
            wait = EXPIRY_TICK
            if self._deadlines:
                wait = min(max((self._deadlines[0][0] - datetime.now(UTC)).total_seconds(), 0.0), EXPIRY_TICK)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)


async def drop_expired(conn: BrokerConnection, store: Store, record: QueueRecord, seq: int, *, taken_ok: bool) -> int:
    """Delete message ``seq`` if it carries a start deadline that has passed and (unless
    ``taken_ok``: it was found on a redelivery) no worker has taken it yet; count it as expired.
    1 if dropped, else 0."""
    js = conn.queue_js(record.id)
    stream = stream_name(record.id)
    try:
        msg = await retry_unavailable(lambda: js.get_msg(stream, seq=seq, direct=True))
    except nats.js.errors.NotFoundError:
        return 0  # deleted by its worker, or dropped already
    headers = dict(msg.headers or {})
    deadline = envelope.deadline_of(headers)
    if deadline is None or deadline > datetime.now(UTC):
        return 0
    if not taken_ok:  # the consumer of its priority lane (the queue's own for 0)
        consumer = lane_consumer(envelope.priority_of(msg.subject or ""))
        info = await retry_unavailable(lambda: js.consumer_info(stream, consumer))
        if seq <= info.delivered.stream_seq:
            return 0  # a worker took it in time; it is that worker's now
    await store.count(record.key, "expired", once=f"expire:{seq}")  # before the delete: a repeat counts nothing
    if not await delete_message(js, stream, seq):
        return 0
    with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
        await conn.js.purge_stream(ERRORS_STREAM, subject=errors_subject(record.id, envelope.message_id(headers, seq)))
    return 1
