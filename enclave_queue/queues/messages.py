"""Messages by hand: send (now or delayed), receive (with a sealed receipt handle), delete and
nack by receipt, and peek (read without receiving).

A receipt is the message's reply subject (its ack subject), sealed under the master key for this
queue with the time its lease ends and its receive count: only this queue's receipts open, and an
expired one is refused (the message may have been received again). Deleting acks the message,
nacking hands it back (``-NAK``, envelope.nak_payload), both through the control account's import
of the queue's ack subjects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

import nats.errors
import nats.js.errors
from nats.nuid import NUID

from ..auth.secrets import MasterKey, SealError
from ..broker.connection import BrokerConnection, delete_message, publish_into, stored_seq
from ..broker.pull import pull
from ..envelope import (
    DEAD_GRACE,
    DELAY_RULE,
    body_view,
    check_delay,
    dead_word,
    deadline_of,
    delay_subject,
    delay_subjects,
    delivery_counts,
    last_receive,
    message_id,
    nak_payload,
    prior_attempts,
    publish_as_next,
    put_headers,
    rfc3339,
    schedule_headers,
)
from ..errors import (
    BrokerUnavailable,
    Conflict,
    EnclaveError,
    MessageTooLarge,
    NotFound,
    SpecError,
    field_error,
    out_of_range,
)
from ..names import CONSUMER, lane_consumer, notes_subject, reject_subject, stream_name
from ..retry import UNAVAILABLE, retry_unavailable
from ..spec import (
    MAX_NACK_DELAY,
    MAX_PEEK,
    MAX_RECEIVE,
    MAX_RECEIVE_WAIT,
    NACK_DELAY_RULE,
    PEEK_LIMIT_RULE,
    RECEIVE_MAX_RULE,
    RECEIVE_WAIT_RULE,
    check_dedupe_key,
    subject_for,
)
from ..state.kv import Store
from ..state.records import QueueRecord, SqsLease
from .expiry import drop_expired
from .letters import Letters
from .lookup import Lookup, not_ready
from .schedules import publish_delayed
from .streams import consumer_info, levels, stream_info

log = logging.getLogger("enclave.service")

RECEIPT_PURPOSE = "receipt"
SEND_TIMEOUT = 5.0  #: seconds
PRIORITY_POLL = 0.1  #: seconds between looks at every priority lane while a receive by hand waits


def sender_headers(headers: dict[str, str]) -> dict[str, str]:
    """The headers its sender gave a message: not the broker's (``Nats-…``), nor Enclave's
    (``Enclave-…``), nor its Content-Type (shown as ``content_type``)."""
    return {key: value for key, value in headers.items()
            if not key.lower().startswith(("nats-", "enclave-")) and key.lower() != "content-type"}



#: seconds taken off a lease as a receipt counts it: the broker's lease began when it delivered the
#: message, a moment before this process saw it, and must never end before the receipt's does
LEASE_MARGIN = 0.25


def lease_key(queue_id: str, seq: int) -> str:
    """The key of a message's lease changed by hand (an SQS visibility change, an API nack) in the
    store's bucket of such leases."""
    return f"{queue_id}.{seq}"


async def settle(conn: BrokerConnection, record: QueueRecord, reply: str, payload: bytes, verb: str) -> None:
    """Ack or nak a delivery (``payload`` to its ``reply`` subject) and wait for the broker's
    confirmation; BrokerUnavailable naming ``verb`` if it does not come."""
    try:
        async with conn.account(record.id) as nc:
            await retry_unavailable(lambda: nc.request(reply, payload, timeout=SEND_TIMEOUT))
    except (nats.errors.TimeoutError, *UNAVAILABLE) as exc:
        raise BrokerUnavailable(f"The broker did not confirm the {verb} on queue '{record.spec.name}'.") from exc


async def tell_mover(conn: BrokerConnection, record: QueueRecord, reply: str) -> None:
    """Tell the dead-letter mover that the delivery of ``reply`` was handed back on its last
    receive, so it moves the message now (best effort: else the broker's advisory has it moved)."""
    receive_count, sequence = delivery_counts(reply)
    with contextlib.suppress(nats.errors.Error, OSError):
        await conn.control.publish(reject_subject(record.id),
                                   dead_word(sequence, receive_count, subject_for(record.spec.project, record.spec.name)))


async def take(conn: BrokerConnection, record: QueueRecord, consumer: str, count: int, wait: float) -> list[Any]:
    """Up to ``count`` messages from one consumer of the queue, waiting up to ``wait`` seconds for
    the first (the API's receive and the SQS endpoint's)."""
    async with conn.account(record.id) as nc:
        try:
            until = time.monotonic() + wait  # a pull asked again (no responders) waits only what is left
            return await retry_unavailable(lambda: pull(nc, stream_name(record.id), consumer, count,
                                                        max(until - time.monotonic(), 0.0), lambda: conn.closing))
        except UNAVAILABLE:  # nobody answers for the consumer: the broker is loading the account
            raise not_ready(record) from None


class Messages:
    """A queue's messages by hand, for the API and the console."""

    def __init__(self, conn: BrokerConnection, store: Store, lookup: Lookup, letters: Letters,
                 master: MasterKey) -> None:
        self.conn = conn
        self.store = store
        self.lookup = lookup
        self.letters = letters
        self.master = master

    # -- send -----------------------------------------------------------------------------------

    async def send(self, project: str, name: str, body: bytes, content_type: Optional[str] = None,
                   dedupe_key: Optional[str] = None, delay: float = 0.0,
                   headers: Optional[dict[str, str]] = None) -> dict[str, Any]:
        """Publish one message and wait for the broker to store it. Returns its ``sequence`` and
        whether it was a ``duplicate`` (a ``dedupe_key`` seen within the window: the first message's
        sequence, nothing stored). With ``delay`` seconds (0–604800) the message is stored as a
        one-shot schedule that the broker copies onto the queue when due (envelope.py), and the
        answer adds ``delayed_until``; its ``sequence`` is the schedule's, which the copy carries as
        its id (``Enclave-Id``). Raises QueueFull at ``max_messages``, MessageTooLarge, SpecError."""
        try:
            delay = check_delay(delay)
        except SpecError:  # the API's name of the field
            raise out_of_range("delay_seconds", DELAY_RULE, repr(delay)) from None
        if dedupe_key is not None:
            check_dedupe_key(dedupe_key)
        record = await self.lookup.ready(project, name)
        limit = record.spec.max_message_bytes
        if len(body) > limit:
            raise MessageTooLarge(
                f"The message is {len(body)} bytes; queue '{name}' accepts at most {limit} (max_message_bytes)."
            )
        subject = subject_for(project, name)
        # ``headers``: the caller's own (the SQS endpoint's message attributes), under ours
        headers = {**(headers or {}), **({"Content-Type": content_type} if content_type else {})}
        if dedupe_key is not None:
            headers["Nats-Msg-Id"] = dedupe_key
        due = None
        if delay > 0 and record.spec.max_messages:  # schedules need discard old (controller/mapping.py)
            raise field_error("delay_seconds", f"cannot be used with queue '{name}', which has max_messages "
                                               "(a limit rules out delayed messages)")
        if delay > 0:
            now = datetime.now(UTC)
            due = now + timedelta(seconds=delay)
            headers.update({**schedule_headers(subject, due), **put_headers(now, delay_s=delay)})
            schedule = delay_subject(subject, NUID().next().decode())
            last = (await stream_info(self.conn, record)).state.last_seq
            ack = await publish_delayed(self.conn, record, lambda: publish_as_next(
                lambda h: self._publish(record, schedule, body, h), headers, last))
            if "error" not in ack and not ack.get("duplicate"):
                await self._note_scheduled(record)
        else:
            ack = await self._publish(record, subject, body, headers)
        sent = {"sequence": stored_seq(ack, record.spec), "duplicate": bool(ack.get("duplicate"))}
        return {**sent, "delayed_until": rfc3339(due)} if due else sent

    async def _publish(self, record: QueueRecord, subject: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        """Publish to ``subject`` (in the queue's account) and return the broker's answer (PubAck or error)."""
        try:
            return await publish_into(self.conn, record.id, subject, body, headers, timeout=SEND_TIMEOUT)
        except UNAVAILABLE:
            raise not_ready(record) from None
        except nats.errors.TimeoutError as exc:
            raise BrokerUnavailable(f"The broker did not confirm the message to queue '{record.spec.name}' "
                                    "in time.") from exc

    async def _note_scheduled(self, record: QueueRecord) -> None:
        """Tell the desk a schedule was stored, as the SDK does (desk/deadlines.py counts them so
        that metrics tell deletions by workers from schedules that fired). The message is stored
        already: a note that does not land is logged, not raised."""
        try:
            await retry_unavailable(lambda: self.conn.js.publish(notes_subject(record.id), b'{"scheduled": 1}'))
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            log.warning("schedule of queue %s stored but not noted: %r", record.key, exc)

    # -- receive --------------------------------------------------------------------------------

    async def receive(self, project: str, name: str, max_messages: int = 1, wait: float = 1.0) -> list[dict[str, Any]]:
        """Take up to ``max_messages`` messages, waiting up to ``wait`` seconds for the first.
        Each stays hidden for the visibility timeout unless deleted by its receipt."""
        for field, value, ok, phrase in (("max", max_messages, 1 <= max_messages <= MAX_RECEIVE, RECEIVE_MAX_RULE),
                                         ("wait", wait, 0 <= wait <= MAX_RECEIVE_WAIT, RECEIVE_WAIT_RULE)):
            if not ok:
                raise out_of_range(field, phrase, repr(value))
        record = await self.lookup.ready(project, name)
        try:
            if record.spec.priorities:
                msgs = await self._take_by_priority(record, max_messages, wait)
            else:
                msgs = await self._take(record, CONSUMER, max_messages, wait)
        except (EnclaveError, nats.errors.Error, nats.js.errors.Error, TimeoutError):
            await self.lookup.live(project, name)  # deleted while the receive waited: NotFound
            raise
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
        return await take(self.conn, record, consumer, count, wait)

    async def _take_by_priority(self, record: QueueRecord, count: int, wait: float) -> list[Any]:
        """Up to ``count`` messages, the highest priority lane first. The lanes' consumers say
        which have messages to deliver (never delivered, or handed back); while none has, they
        are asked again every PRIORITY_POLL seconds, for up to ``wait`` seconds."""
        deadline = time.monotonic() + wait
        lanes = sorted(levels(record), reverse=True)
        while True:
            infos = await asyncio.gather(*(consumer_info(self.conn, record, lane_consumer(level)) for level in lanes))
            msgs: list[Any] = []
            for level, info in zip(lanes, infos, strict=True):
                if len(msgs) < count and (info.num_pending or info.num_ack_pending):
                    fetch_wait = 1.0 if info.num_pending else 0.1  # a handed-back one may not be due yet
                    msgs += await self._take(record, lane_consumer(level), count - len(msgs), fetch_wait)
            if msgs or time.monotonic() >= deadline or self.conn.closing:
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
        receipt = self.master.seal_handle(json.dumps({"r": msg.reply, "until": hidden_until.timestamp() - LEASE_MARGIN,
                                                     "n": meta.num_delivered}).encode(),
                                          RECEIPT_PURPOSE, record.id)
        headers = dict(msg.headers or {})
        return {
            "receipt": receipt,
            "id": message_id(headers, meta.sequence.stream),
            "sequence": meta.sequence.stream,
            "receive_count": meta.num_delivered,
            "attempts": prior_attempts(headers) + meta.num_delivered,
            "sent_at": meta.timestamp.isoformat() if meta.timestamp else None,
            "visible_again_at": hidden_until.isoformat(),
            "content_type": (msg.headers or {}).get("Content-Type"),
            "headers": sender_headers(headers),
            **body_view(msg.data),
        }

    # -- peek -----------------------------------------------------------------------------------

    async def peek(self, project: str, name: str, limit: int = 10) -> list[dict[str, Any]]:
        """The oldest ``limit`` messages, waiting or in flight, read without receiving them."""
        if not 1 <= limit <= MAX_PEEK:
            raise out_of_range("limit", PEEK_LIMIT_RULE, repr(limit))
        record = await self.lookup.ready(project, name)
        peeked = []
        for letter in await self.letters.read(record, 0, limit):
            view = letter.view()
            peeked.append({"sequence": letter.sequence, "sent_at": letter.stored_at,
                           "content_type": view["content_type"], "headers": sender_headers(letter.headers),
                           "body": view["body"],
                           **({"body_base64": view["body_base64"]} if "body_base64" in view else {})})
        return peeked

    # -- delete and nack by receipt -------------------------------------------------------------

    async def _unseal_receipt(self, record: QueueRecord, receipt: str) -> dict[str, Any]:
        """The receipt's content; SpecError if it is not one of this queue's, Conflict once its
        receive is over: expired, or handed back by a nack (the broker would take its ack or nack
        as the next receive's: it settles by stream sequence)."""
        name, project = record.spec.name, record.spec.project
        try:
            sealed = json.loads(self.master.unseal_handle(receipt, RECEIPT_PURPOSE, record.id))
        except (SealError, ValueError):
            raise field_error("receipt", f"is not a receipt handle of queue '{name}' in project '{project}'") from None
        if time.time() > sealed["until"]:
            expired = datetime.fromtimestamp(sealed["until"], UTC).isoformat(timespec="seconds")
            raise Conflict(f"The receipt expired at {expired} with its visibility timeout; the message may "
                           "have been received again. Receive it again to delete or nack it.")
        receive_count, seq = delivery_counts(sealed["r"])
        ended = None
        with contextlib.suppress(EnclaveError):  # unreadable: as if never handed back (the time holds)
            ended = await self.store.sqs_leases.get(lease_key(record.id, seq))
        if ended is not None and (ended[0].receive_count > receive_count or (
                ended[0].receive_count == receive_count and time.time() > ended[0].until)):
            raise Conflict("The message of this receipt was handed back (nacked), and may have been received "
                           "again. Receive it again to delete or nack it.")
        return sealed

    async def delete_message(self, project: str, name: str, receipt: str) -> None:
        """Delete a received message by its receipt handle (acknowledge it to the broker)."""
        record = await self.lookup.live(project, name)
        sealed = await self._unseal_receipt(record, receipt)
        await settle(self.conn, record, sealed["r"], b"+ACK", "delete")

    async def delete_sequence(self, project: str, name: str, seq: int) -> None:
        """Delete the message stored at ``seq`` (the sequence receive and peek show; for a delayed
        one, the number its send answered while it waits) for good, waiting, in flight or delayed;
        NotFound if the queue holds none there. A worker holding it finds its delete harmless.
        Counted as ``cleared``, as a clear's removals are."""
        record = await self.lookup.ready(project, name)
        stored, _ = await self.letters.batch(record, seq - 1, limit=1)
        if not stored or stored[0].sequence != seq or not await delete_message(
                self.conn.queue_js(record.id), stream_name(record.id), seq):
            raise NotFound(f"Message {seq} is not on queue '{name}' in project '{project}' (deleted already, "
                           "or never stored there).")
        await self.store.count(record.key, "cleared")
        schedules = delay_subjects(subject_for(project, name))[:-1]
        if stored[0].headers.get("Nats-Subject", "").startswith(schedules):  # ``scheduled`` counts those not fired
            await self.store.count(record.key, "scheduled", -1)

    async def nack_message(self, project: str, name: str, receipt: str, delay: float = 0) -> None:
        """Hand a received message back by its receipt: visible again after ``delay`` seconds
        (at once by default). The receive it used still counts toward ``max_receives``."""
        if not 0 <= delay <= MAX_NACK_DELAY:
            raise out_of_range("delay", NACK_DELAY_RULE, repr(delay))
        record = await self.lookup.live(project, name)
        sealed = await self._unseal_receipt(record, receipt)
        receive_count, seq = delivery_counts(sealed["r"])
        last = last_receive(receive_count, record.spec.max_receives)
        if last:  # not delivered again: the mover is told below (messages held DEAD_GRACE: envelope.py)
            delay = max(delay, DEAD_GRACE)
        payload = nak_payload(delay, receive_count, list(record.spec.retry_backoff_seconds or []))
        await settle(self.conn, record, sealed["r"], payload, "nack")
        try:  # the receipt is spent: its ack or nack would be the next receive's
            await self.store.sqs_leases.put(lease_key(record.id, seq), SqsLease(receive_count=receive_count,
                                                                                  until=time.time()))
        except EnclaveError as exc:
            log.warning("the nack of message %s of queue %s was not stored (%s): its receipt holds until it "
                        "expires", seq, record.key, exc)
        if last:
            await tell_mover(self.conn, record, sealed["r"])
