"""The dead-letter mover: a message that used up its receives leaves its queue for the queue's
dead-letter queue, exactly once, carrying where it came from and why it failed.

How nats-server 2.15 behaves (DESIGN.md): after ``max_deliver`` receives it stops delivering a
message, keeps it in the stream, and emits a MAX_DELIVERIES advisory — lazily, only while a pull
request is waiting. So there are two ways in:

- **advisories**, imported from every queue account and kept in the ``ENCLAVE_ADVISORIES``
  stream, so none is lost while the mover is down; a durable consumer works through them;
- **the sweep**, every ``sweep_seconds``, for messages whose advisory never came (no pull was
  waiting, ``max_receives`` was lowered): first a *probe*, a pull request for at most 1 byte,
  which makes the server retire exhausted messages (and emit their advisories) while it can
  deliver nothing (measured: it answers 409 and leases nothing; redeliveries are not lost).
  Then, if the consumer has nothing in flight, every message still in the stream at or below
  the last delivered sequence is dead and is moved directly.

A move: read the message by sequence; publish it to the DLQ with a ``Nats-Msg-Id`` that is a MAC
of the queue id and the sequence (a repeated move within the DLQ's dedupe window stores nothing
new, and no app can guess the id to pre-empt it) and headers naming the source, the receive
count, the first enqueue time, the last error the app reported and when it was dead-lettered,
signed with an ``Enclave-Provenance`` MAC (auth/provenance.py); then count it (once: a repeated
move counts nothing again); then delete it from the source; then ack the advisory. A queue without a DLQ has the message discarded after its last receive,
counted as discarded.

The last error is the note an app left for the message (state/notes.py; the stream and its
bounds: errornotes.py). ``reject`` asks this process (``enclave.reject`` -> ``deadletter.<id>``)
to move a message at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from datetime import UTC, datetime
from typing import Any, Optional

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from .. import envelope
from ..auth.provenance import Provenance
from ..broker.config import CONTROL_STREAM_BYTES
from ..broker.connection import BrokerConnection, delete_message, ensure_stream, publish_into, stored_seq
from ..envelope import (
    DEAD_LETTERED_AT,
    FIRST_ENQUEUED,
    LAST_ERROR,
    RECEIVE_COUNT,
    SOURCE_PROJECT,
    SOURCE_QUEUE,
    SOURCE_SEQUENCE,
    clean_headers,
    one_line,
)
from ..errors import EnclaveError
from ..names import (
    ADVISORY_STREAM,
    LANES,
    MOVER,
    advisory_subject,
    lane_consumer,
    reject_subject,
    stream_name,
)
from ..recent import Recent
from ..retry import retry_unavailable
from ..spec import subject_for
from ..state.kv import Store
from ..state.notes import drop_note, last_error, write_note
from ..state.queries import QueueIndex, dead_letter_queue_of
from ..state.records import QueueRecord

log = logging.getLogger("enclave.deadletters")

#: the advisories the stream keeps: every queue account sends all its consumer's advisories
#: (broker/config.py), but only a message out of receives needs one kept while this process is down
ADVISORY_SUBJECTS = [advisory_subject("*", "MAX_DELIVERIES")]
KEEP_SECONDS = 14 * 24 * 3600.0  #: advisories live as long as the longest retention
PROBE = json.dumps({"batch": 1, "no_wait": True, "max_bytes": 1}).encode()
#: fault injection for the tests: "exit-after-dlq-publish" kills the process between the copy to
#: the dead-letter queue and the count, "exit-after-dead-letter-count" between the count and the
#: delete from the source, as a crash would
FAULT = os.environ.get("ENCLAVE_FAULT", "")


class MoveError(EnclaveError):
    """A dead letter could not be moved now (the DLQ refused it, or is missing); it stays put and
    the move is tried again."""


def stored_at(msg: api.RawStreamMsg) -> str:
    when = msg.time or datetime.now(UTC)
    return when.astimezone(UTC).isoformat()


class Mover:
    """The mover, the sweep and the reject service, in the control process."""

    def __init__(self, store: Store, conn: BrokerConnection, index: QueueIndex, sweep_seconds: float,
                 provenance: Provenance) -> None:
        self.store = store
        self.provenance = provenance
        self.conn = conn
        self.index = index  #: finds the queue of an advisory or a reject by its id
        self.recent = Recent()  #: rejects answered lately, answered the same when asked again
        self.sweep_seconds = sweep_seconds
        self.moved = 0
        self.discarded = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._sub: Any = None
        self._advisory_sub: Any = None

    # -- start and stop -------------------------------------------------------------------------

    async def start(self) -> None:
        js = self.conn.js
        await ensure_stream(js, api.StreamConfig(
            name=ADVISORY_STREAM, subjects=ADVISORY_SUBJECTS, retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_age=KEEP_SECONDS, max_bytes=CONTROL_STREAM_BYTES[ADVISORY_STREAM],
            discard=api.DiscardPolicy.OLD, num_replicas=1,
        ))
        with contextlib.suppress(nats.js.errors.BadRequestError):  # exists already
            await retry_unavailable(lambda: js.add_consumer(ADVISORY_STREAM, api.ConsumerConfig(
                durable_name=MOVER, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30.0, max_deliver=-1,
            )))
        self._sub = await self.conn.control.subscribe(reject_subject("*"), queue="movers", cb=self._on_reject)
        self._tasks = [
            asyncio.create_task(self._advisories(), name="deadletters-advisories"),
            asyncio.create_task(self._sweeps(), name="deadletters-sweep"),
        ]

    async def stop(self) -> None:
        for sub in (self._sub, self._advisory_sub):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def forget(self, queue_id: str) -> None:
        """A queue was deleted: nothing of it is moved any more."""
        self._locks.pop(queue_id, None)

    # -- moving ---------------------------------------------------------------------------------

    async def move(self, record: QueueRecord, seq: int, receive_count: Optional[int] = None,
                   error: Optional[str] = None) -> str:
        """Move message ``seq`` of ``record``'s queue to its DLQ (or discard it if it has none).
        Returns 'moved', 'discarded' or 'gone' (no such message any more). Safe to repeat."""
        lock = self._locks.setdefault(record.id, asyncio.Lock())
        async with lock:
            return await self._move(record, seq, receive_count, error)

    async def _move(self, record: QueueRecord, seq: int, receive_count: Optional[int], error: Optional[str]) -> str:
        source = self.conn.queue_js(record.id)
        stream = stream_name(record.id)
        try:
            msg = await retry_unavailable(lambda: source.get_msg(stream, seq=seq, direct=True))
        except nats.js.errors.NotFoundError:
            return "gone"
        spec = record.spec
        own = dict(msg.headers or {})
        noted_as = envelope.message_id(own, seq)  #: error notes are kept by message id
        noted: Optional[str] = None
        if spec.dead_letter_queue:
            dlq = await dead_letter_queue_of(self.store, record)
            if dlq is None:
                raise MoveError(f"Dead-letter queue '{spec.dead_letter_queue}' of queue '{spec.name}' does not exist.")
            noted = await last_error(self.conn.js, record.id, noted_as)
            reason = error if error is not None else noted
            headers = {
                **clean_headers(msg.headers),
                "Nats-Msg-Id": self.provenance.move_id(record.id, seq),
                SOURCE_QUEUE: spec.name,
                SOURCE_PROJECT: spec.project,
                SOURCE_SEQUENCE: str(seq),
                RECEIVE_COUNT: str((receive_count if receive_count is not None else spec.max_receives)
                                   + envelope.prior_attempts(own)),
                FIRST_ENQUEUED: own.get(envelope.ENQUEUED_AT) or stored_at(msg),
                DEAD_LETTERED_AT: datetime.now(UTC).isoformat(),
            }
            if reason:
                headers[LAST_ERROR] = one_line(reason)
            headers = self.provenance.sign(dlq.id, headers, msg.data or b"")
            subject = subject_for(dlq.spec.project, dlq.spec.name)
            stored_seq(await publish_into(self.conn, dlq.id, subject, msg.data or b"", headers), dlq.spec)
            if FAULT == "exit-after-dlq-publish":
                os._exit(70)
            outcome = "moved"
        else:
            outcome = "discarded"
        # counted before the delete, once: a move cut short after the count and repeated finds the
        # message still there and counts nothing again; one cut short before it counts it then
        await self.store.count(record.key, "dead_lettered" if outcome == "moved" else "discarded",
                               once=f"move:{seq}")
        if FAULT == "exit-after-dead-letter-count":
            os._exit(70)
        await delete_message(source, stream, seq)
        if spec.dead_letter_queue is None or noted is not None:  # the note has served; without a DLQ, unread
            await drop_note(self.conn.js, record.id, noted_as)
        if outcome == "moved":
            self.moved += 1
        else:
            self.discarded += 1
        log.info("message %d of queue %s %s", seq, record.key,
                 f"moved to {spec.dead_letter_queue}" if outcome == "moved" else "discarded (no dead-letter queue)")
        return outcome

    # -- the three ways in ----------------------------------------------------------------------

    async def _advisories(self) -> None:
        """Work through the MAX_DELIVERIES advisories, oldest first."""
        while True:
            try:
                sub = self._advisory_sub = await retry_unavailable(
                    lambda: self.conn.js.pull_subscribe_bind(MOVER, stream=ADVISORY_STREAM))
                while True:
                    try:
                        batch = await sub.fetch(50, timeout=5)
                    except (nats.errors.TimeoutError, TimeoutError):  # nats-py raises either when nothing came
                        continue
                    # queues in parallel; each queue's moves are serialised by its lock
                    await asyncio.gather(*(self._handle_advisory(advisory) for advisory in batch))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker restarting, say: start over
                log.warning("advisory consumer interrupted (%s); restarting it", exc)
                await asyncio.sleep(1)

    async def _handle_advisory(self, advisory: Msg) -> None:
        queue_id, kind = advisory.subject.split(".")[1:3]
        try:
            if kind.lower() == "max_deliveries":  # earlier versions stored adv.<id>.max_deliveries
                body = json.loads(advisory.data)
                record = await self.index.record_of(queue_id)
                if record is not None and not record.deleting:
                    await self.move(record, int(body["stream_seq"]), int(body.get("deliveries") or 0) or None)
            await advisory.ack()
        except Exception as exc:
            log.warning("dead letter from advisory %s not moved yet: %s", advisory.subject, exc)
            await advisory.nak(delay=2)

    async def _sweeps(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_seconds)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("dead-letter sweep failed: %s", exc)

    async def sweep(self) -> int:
        """Move every dead message whose advisory never came; returns how many were moved."""
        count = 0
        for _, record, _ in await self.store.queues.items():
            if record.deleting or not record.spec.max_receives:
                continue
            try:
                count += await self.sweep_queue(record)
            except (nats.errors.Error, EnclaveError) as exc:
                log.info("sweep of %s skipped: %s", record.key, exc)
        return count

    async def sweep_queue(self, record: QueueRecord) -> int:
        count = 0
        for level in (0, *(LANES if record.spec.priorities else ())):
            count += await self._sweep_lane(record, level)
        return count

    async def _sweep_lane(self, record: QueueRecord, level: int) -> int:
        """The sweep of one consumer: the queue's own (level 0) or a priority lane's."""
        js = self.conn.queue_js(record.id)
        stream = stream_name(record.id)
        consumer = lane_consumer(level)
        # the probe: the server retires exhausted messages and emits their advisories
        async with self.conn.account(record.id) as nc:
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", PROBE, reply="_INBOX.enclave-probe")
        info = await retry_unavailable(lambda: js.consumer_info(stream, consumer))
        if info.num_ack_pending or not info.delivered.stream_seq:
            return 0  # something is in flight: only advisories can tell the dead apart
        last = info.delivered.stream_seq
        subject = envelope.lane_subject(subject_for(record.spec.project, record.spec.name), level)
        seq, count = 1, 0
        while seq <= last:
            try:
                msg = await retry_unavailable(
                    lambda seq=seq: js.get_msg(stream, seq=seq, subject=subject, direct=True, next=True))
            except nats.js.errors.NotFoundError:
                break
            if msg.seq is None or msg.seq > last:
                break
            if await self.move(record, msg.seq, info.config.max_deliver) != "gone":
                count += 1
            seq = msg.seq + 1
        return count

    async def _on_reject(self, request: Msg) -> None:
        asyncio.create_task(self._reject(request))

    async def _reject(self, request: Msg) -> None:
        queue_id = request.subject.split(".")[1]
        try:
            body = json.loads(request.data)
            subject = str(body.get("subject", ""))  # queue.<project>.<name>: a hint, checked against the id
            record = await self.index.record_of(queue_id, ".".join(subject.split(".")[1:3]) or None)
            if record is None or record.deleting:
                raise EnclaveError("The queue does not exist any more.")
            seq, error = int(body["seq"]), body.get("error") or None
            noted_as = int(body.get("id") or seq)
            receive_count = body.get("receive_count")

            async def reject() -> str:
                if error:  # kept as the message's note, should this move fail and a later one happen
                    await write_note(self.conn.js, record.id, noted_as, error)
                outcome = await self.move(record, seq, receive_count, error)
                if outcome != "gone":
                    await self.store.count(record.key, "rejected")
                return outcome

            # asked again after a reconnect: the same answer, not "gone" for the message it moved
            reply: dict[str, Any] = {"result": await self.recent.once((record.id, seq, receive_count), reject)}
        except Exception as exc:  # answered to the app, which raises it
            reply = {"error": str(exc) or type(exc).__name__}
        with contextlib.suppress(nats.errors.Error):
            await request.respond(json.dumps(reply).encode())
