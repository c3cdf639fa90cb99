"""A received message: ``Message``, its lease and its verbs (what each does on the broker is in
queue.py), how a delivery becomes one (``received``), and ``PeekedMessage`` (one read by
``Queue.peek``, not leased).

It settles messages through acks.py and asks the control plane through the session; receiving.py
builds messages with ``received`` and settles many at once with ``ack_all`` and ``hand_back``. The
body codec and the retry-delay arithmetic for nacks are in envelope.py, shared with the server.

What ``received`` does before a message is handed over:

- a message past its start deadline (``put(ttl_s=)``) is not handed over: the control plane drops
  it and counts it as expired (``expire``), and its lease is ended;
- a message given back by ``release`` more often than ``max_receives`` allows in total is
  dead-lettered (the broker counts the receives of each copy only);
- messages tried before get their ``last_error`` from the control plane, one request a batch;
- a ``lease_s`` other than the broker's starts the message's lease keeper.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

from nats.aio.msg import Msg

from .. import envelope
from ..errors import BrokerUnavailable, Conflict, EnclaveError, out_of_range
from ..spec import scheduled_delay
from . import acks
from .sending import utf8
from .session import DEFAULT_TIMEOUT, Session
from .settings import Settings

log = logging.getLogger("enclave_queue.client")

#: seconds a hand-back on what was the last receive waits to hear whether it still is (max_receives
#: raised since); unheard by then, the message is taken as dead: the mover checks the word itself
LAST_CHECK_WAIT = 0.5
#: seconds of a lease below which a message waiting its turn in an iteration is taken as run out:
#: a renewal sent then might reach the broker after the lease ended and renew another worker's
RENEW_MARGIN = 0.25


@dataclass(frozen=True)
class PeekedMessage:
    """A message read by ``Queue.peek`` without leasing it: nothing to delete or nack, no receive
    counted. ``id`` is its sequence, the same number ``send`` returned and a receive will show."""

    sequence: int
    data: bytes
    headers: dict[str, str]  #: the sender's headers
    enqueued_at: datetime  #: when the broker stored it (UTC)

    @property
    def id(self) -> int:
        return envelope.message_id(self.headers, self.sequence)

    @property
    def body(self) -> Any:
        """The body decoded as it was sent: JSON value, text, or bytes."""
        return envelope.decode(self.data, self.headers.get("Content-Type"))

    @classmethod
    def from_stored(cls, message: dict[str, Any]) -> PeekedMessage:
        """From a ``STREAM.MSG.GET`` answer's ``message``: its headers and body base64-encoded,
        the headers as the broker stores them (``NATS/1.0`` and a line each)."""
        return cls(
            sequence=int(message["seq"]),
            data=base64.b64decode(message.get("data") or ""),
            headers=_header_block(base64.b64decode(message.get("hdrs") or "")),
            enqueued_at=envelope.parse_time(message["time"]) or datetime.now(UTC),
        )


async def _note(session: Session, message_id: int, error: str) -> None:
    """Store why an attempt failed, if the broker takes it in time: a note not stored does not keep
    the message from being handed back (its next receive shows no last_error)."""
    try:
        await session.note_error(message_id, error)
    except BrokerUnavailable as exc:
        log.warning("the error note of message %s was not stored (%s); it is handed back without it",
                    message_id, exc)


def _check_error(error: Any) -> None:
    """Why an attempt failed: text, or None; SpecError naming ``error`` otherwise."""
    if error is not None and not (isinstance(error, str) and utf8(error)):
        raise out_of_range("error", "text (why the attempt failed) or None", repr(error))


def _header_block(raw: bytes) -> dict[str, str]:
    """``NATS/1.0\\r\\nName: value\\r\\n…`` as a dict (a name given twice: its last value, as
    nats-py reads a delivery's)."""
    headers: dict[str, str] = {}
    for line in raw.decode("utf-8", "replace").split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        if colon and name.strip():
            headers[name.strip()] = value.strip()
    return headers


class Message:
    """A received message, leased until acked, nacked, released or its lease runs out.

    ``id`` stays the same for the message's whole life (a copy made by ``release``, or the copy a
    delayed message's schedule makes, keeps it); ``sequence`` is where this copy is stored.
    ``attempts`` counts receives that spent an attempt, this one included (``release`` gives its
    attempt back). ``lease_expires_at`` is when the lease runs out: the queue's visibility timeout
    (or its retry schedule's entry for this receive) from receipt, or ``lease_s`` when the receive
    or ``extend`` asked for one."""

    __slots__ = ("_session", "_settings", "data", "headers", "_reply", "receive_count", "sequence", "id",
                 "attempts", "last_error", "_lease_end", "_server_lease", "_lease_start", "_keeper", "_settled",
                 "_lease_ran_out", "_window", "_last")

    def __init__(self, session: Session, settings: Settings, msg: Msg, consumer: Optional[dict[str, Any]] = None) -> None:
        """``consumer``: the queue's consumer settings (``Settings.consumer``), which say how long the
        broker leases this receive; without them the lease is taken as over."""
        self._session = session
        self._settings = settings
        self.data: bytes = msg.data
        self.headers: dict[str, str] = msg.headers or {}
        self._reply: str = msg.reply
        #: receives of this copy, this one included; this copy's position in the queue's stream
        self.receive_count, self.sequence = envelope.delivery_counts(msg.reply)
        self.id: int = envelope.message_id(self.headers, self.sequence)
        self.attempts: int = envelope.prior_attempts(self.headers) + self.receive_count
        self.last_error: Optional[str] = None  #: the last error a worker reported for it (nack or reject)
        #: how long the broker holds this receive: the retry schedule's entry for it, else ack_wait
        self._server_lease = 0.0
        #: the last receive the broker allows: handed back, the message is dead at once
        self._last = consumer is not None and envelope.last_receive(self.receive_count, consumer["max_deliver"])
        if consumer is not None:
            backoff = consumer["backoff"]
            self._server_lease = scheduled_delay(self.receive_count, backoff) if backoff else consumer["ack_wait"]
        #: when the broker's lease began: the receive, or the last +WPI that renewed it
        self._lease_start = time.monotonic()
        self._lease_end = self._lease_start + self._server_lease
        self._keeper: Optional[asyncio.Task[None]] = None  #: holds or ends a lease other than the broker's
        self._settled = False
        self._lease_ran_out = False  #: settled by its lease's end (the keeper gave it back), not by a verb
        self._window: Optional[acks.AckWindow] = None  #: the iteration that handed it out confirms its ack

    @property
    def body(self) -> Any:
        """The body decoded as it was sent: JSON value, text, or bytes."""
        return envelope.decode(self.data, self.headers.get("Content-Type"))

    @property
    def sent_at(self) -> datetime:
        """When this copy was stored (for a delayed message: when it became due)."""
        return datetime.fromtimestamp(acks.delivery(self._reply).sent_ns / 1e9, UTC)

    @property
    def enqueued_at(self) -> datetime:
        """When the message was put (a delayed or released message keeps its first put time)."""
        return envelope.parse_time(self.headers.get(envelope.ENQUEUED_AT)) or self.sent_at

    @property
    def deadline(self) -> Optional[datetime]:
        """The start deadline it was put with (``ttl_s``), if any."""
        return envelope.deadline_of(self.headers)

    @property
    def lease_expires_at(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self._lease_end - time.monotonic())

    def __repr__(self) -> str:
        return f"Message(id={self.id}, sequence={self.sequence}, attempts={self.attempts}, bytes={len(self.data)})"

    # -- the lease --------------------------------------------------------------------------------

    def _ack(self, payload: bytes) -> acks.Ack:
        """An acknowledgement of this delivery, not sent again once the lease is about to end."""
        return acks.Ack(self._reply, payload, self.id, self._lease_end)

    async def _confirm(self, payload: bytes, *, leased: bool = True, verb: str = "acked",
                       then: Optional[Callable[[], Awaitable[None]]] = None) -> None:
        ack = self._ack(payload) if leased else acks.Ack(self._reply, payload)
        await acks.confirm(self._session, [ack], verb=verb, then=then)

    def _lease(self, lease_s: float) -> None:
        """Make the lease end ``lease_s`` from now: the broker's own lease is kept alive with
        ``+WPI`` while it is shorter, and the message is given back (``-NAK``) at the end when it
        is longer, so another worker gets it then, as when a lease runs out."""
        self._lease_end = time.monotonic() + lease_s
        if self._keeper is not None:
            self._keeper.cancel()
        self._keeper = self._session.spawn(self._keep(lease_s))

    async def _keep(self, lease_s: float) -> None:
        with contextlib.suppress(EnclaveError, RuntimeError):
            if lease_s > self._server_lease:
                await self._confirm(b"+WPI", leased=False)
            while not self._settled:
                remaining = self._lease_end - time.monotonic()
                if remaining <= 0:
                    break
                server_lease = self._broker_lease()  # a lowered visibility timeout shortens it
                step = server_lease / 2 if server_lease else remaining
                await asyncio.sleep(min(remaining, step))
                if self._lease_end - time.monotonic() > 0 and not self._settled:
                    await self._confirm(b"+WPI", leased=False)
                    self._lease_start = time.monotonic()
            if not self._settled:
                self._settled = self._lease_ran_out = True
                await self._confirm(await self._hand_back_nak(0.0), leased=False, then=self._tell_if_dead)

    def _broker_lease(self) -> float:
        """How long the broker leases this receive as the queue is set now: a visibility timeout
        lowered on a live queue shortens the leases under way (settings are read again every
        CONSUMER_TTL seconds)."""
        consumer = self._settings.cached("consumer")
        if consumer is None:
            return self._server_lease
        backoff = consumer["backoff"]
        return min(self._server_lease, scheduled_delay(self.receive_count, backoff) if backoff else consumer["ack_wait"])

    def _check_lease(self, verb: str) -> None:
        """Conflict if the message cannot be ``verb`` any more: its lease expired (it ran out, or its
        keeper handed the message back at its end, or the broker's lease of it, shortened since,
        did), or a verb settled it already."""
        end = self._lease_end if self._keeper is not None else min(self._lease_end,
                                                                    self._lease_start + self._broker_lease())
        late = time.monotonic() - end
        if self._lease_ran_out or (late > 0 and not self._settled):
            raise Conflict(f"The lease on message {self.id} expired {max(late, 0.0):.1f} s ago (it ran out "
                           f"before the message was {verb}); it may be someone else's now, so it was not {verb}. "
                           "Receive it again.")
        if self._settled:
            raise Conflict(f"Message {self.id} was already acked, nacked or released; it cannot be {verb}.")

    def _settle(self) -> None:
        self._settled = True
        if self._keeper is not None:
            self._keeper.cancel()

    # -- verbs ------------------------------------------------------------------------------------

    async def ack(self, *, confirm: Optional[bool] = None) -> None:
        """The message is done: it leaves the queue for good. Raises ``Conflict`` if the lease ran
        out (the message may be someone else's now).

        By default it returns once the broker confirmed, except for a message from ``iterate``:
        there the iteration confirms the acks of a batch together (one wait for many, as
        ``delete_many``) before it hands out a message of the next batch or ends, and raises the
        first that failed. ``confirm=True`` waits for this ack's own confirmation there too.
        ``confirm=False`` sends it without waiting (as a plain NATS ``ack()`` does): faster, but an
        ack lost on the way means the message comes back after its lease."""
        if confirm is not None and not isinstance(confirm, bool):
            raise out_of_range("confirm", "True, False or None", repr(confirm))
        self._check_lease("acked")
        self._settle()
        if confirm is None and self._window is not None:
            self._window.add(self._ack(b"+ACK"))
        elif confirm is False:
            await acks.ack_unconfirmed(self._session, [self._reply])
        else:
            await self._confirm(b"+ACK")

    delete = ack  #: the core verb's name

    async def nack(self, delay_s: Optional[float] = None, error: Optional[str] = None) -> None:
        """The attempt failed: hand the message back, redelivered after ``delay_s`` seconds
        (default: the queue's retry schedule for this receive, else at once). ``error`` says why;
        the next receive shows it as ``last_error``, and a dead letter carries the last one."""
        if delay_s is not None:
            delay_s = envelope.check_delay(delay_s)
        _check_error(error)
        self._check_lease("nacked")
        if error:
            await _note(self._session, self.id, error)
        payload = await self._hand_back_nak(delay_s)
        self._settle()
        # the mover is told as soon as the nak is on its way: on the last receive the message
        # will not come back whatever the confirmation says (the word needs no answer)
        await self._confirm(payload, verb="nacked", then=self._tell_if_dead)

    async def _hand_back_nak(self, delay_s: Optional[float]) -> bytes:
        """The ``-NAK`` that hands this receive back for ``delay_s`` seconds (None: the queue's retry
        schedule's). On the last receive the message will not come back: it is held DEAD_GRACE
        seconds, so only a lost word to the mover (``_tell_if_dead``) leaves it to the advisory."""
        if self._last:  # held back and told to the mover: only if it still is (max_receives raised since?)
            with contextlib.suppress(EnclaveError, TimeoutError):  # unread soon: as it was at the receive
                consumer = await asyncio.wait_for(self._settings.fresh("consumer"), LAST_CHECK_WAIT)
                self._last = envelope.last_receive(self.receive_count, consumer["max_deliver"])
        if delay_s == 0 and not self._last:
            return b"-NAK"  # at once: no schedule to compensate for
        backoff = await self._settings.backoff()
        if delay_s is None:
            delay_s = scheduled_delay(self.receive_count, backoff)
        if self._last:
            delay_s = max(delay_s, envelope.DEAD_GRACE)
        return envelope.nak_payload(delay_s, self.receive_count, backoff)

    async def _tell_if_dead(self) -> None:
        """Handed back on its last receive, the message will not be delivered again: the
        dead-letter mover is told now, rather than wait for the broker's advisory, which comes
        only once a pull is waiting and then through a stream of its own."""
        if self._last:
            await self._session.tell_dead(self.sequence, self.receive_count)

    async def release(self, delay_s: float = 0.0) -> None:
        """Give the message back without spending an attempt (it was not tried: shutting down,
        not this worker's turn), visible again after ``delay_s`` (0–7 days). Its next receive
        shows the same ``attempts`` and ``last_error``. The control plane replaces it with a copy
        that keeps its id, put time and deadline, at the back of the queue."""
        delay_s = envelope.check_delay(delay_s)
        self._check_lease("released")
        await self._session.desk("release", {"seq": self.sequence, "receive_count": self.receive_count,
                                             "delay_s": delay_s}, resend=True)
        self._settle()
        with contextlib.suppress(EnclaveError):
            await self._confirm(b"+ACK", leased=False)  # end the lease; the original is gone already

    async def reject(self, error: Optional[str] = None) -> str:
        """Dead-letter the message now, with ``error`` as its last error. Returns 'moved' (to the
        dead-letter queue), 'discarded' (the queue has none) or 'gone' (it was deleted meanwhile).
        Raises ``Conflict`` if the lease ran out: the message may be another worker's by now."""
        _check_error(error)
        self._check_lease("dead-lettered")
        outcome = await self._session.reject(self.sequence, self.id, self.receive_count, error)
        self._settle()
        with contextlib.suppress(EnclaveError):
            await self._confirm(b"+ACK", leased=False)  # end the lease; the message is gone already
        return outcome

    async def extend(self, lease_s: Optional[float] = None) -> None:
        """Keep the message for ``lease_s`` seconds from now (1 s to 12 h; default: the queue's
        visibility timeout, or with a retry schedule this receive's entry of it). Raises
        ``Conflict`` if the lease already ran out."""
        if lease_s is not None:
            lease_s = envelope.check_lease(lease_s)
        self._check_lease("extended")
        if lease_s is None or lease_s == self._server_lease:
            if self._keeper is not None:
                self._keeper.cancel()
                self._keeper = None
            await self._confirm(b"+WPI", verb="extended")
            self._lease_start = time.monotonic()
            self._lease_end = self._lease_start + self._broker_lease()
            return
        self._lease(lease_s)
        if lease_s < self._server_lease:
            await self._confirm(b"+WPI", verb="extended")  # ours ends first


# -- many messages at once ------------------------------------------------------------------------

def _sorted(session: Session, settings: Settings, msgs: list[Msg],
            config: dict[str, Any]) -> tuple[list[Message], list[Message], list[Message]]:
    """Deliveries as messages: those to keep, those past their deadline, those over-tried."""
    max_deliver = config["max_deliver"]
    now: Optional[datetime] = None  #: read once, and only if a message has a deadline
    kept: list[Message] = []
    expired: list[Message] = []
    over: list[Message] = []
    for msg in msgs:
        message = Message(session, settings, msg, config)
        if message.headers.get(envelope.DEADLINE):
            now = now or datetime.now(UTC)
            deadline = message.deadline
            if deadline is not None and deadline <= now:
                expired.append(message)
                continue
        if 0 < max_deliver < message.attempts:
            over.append(message)
        else:
            kept.append(message)
    return kept, expired, over


async def received(session: Session, settings: Settings, msgs: list[Msg], lease_s: Optional[float]) -> list[Message]:
    """Deliveries as handed over: expired ones dropped, over-tried ones dead-lettered, last errors
    read, leases set (see the module's docstring)."""
    if not msgs:
        return []
    config = settings.cached("consumer") or await settings.consumer()
    kept, expired, over = _sorted(session, settings, msgs, config)
    if over:  # given up on for good: only if the limit still says so (max_receives raised meanwhile?)
        with contextlib.suppress(EnclaveError):  # unread: as it was read last
            if (fresh := await settings.fresh("consumer")) != config:
                kept, expired, over = _sorted(session, settings, msgs, fresh)
    if expired:
        await session.desk("expire", {"seqs": [m.sequence for m in expired]})
        await acks.ack_unconfirmed(session, [m._reply for m in expired])  # their leases; the messages are gone
    for message in over:
        with contextlib.suppress(EnclaveError):
            await message.reject("received more often than max_receives allows (with releases)")
    tried = [m for m in kept if m.attempts > 1]
    if tried:
        try:
            notes = await session.desk("notes", {"ids": sorted({m.id for m in tried})})
        except BrokerUnavailable as exc:  # the notes are not worth the receive: last_error unknown
            log.warning("the last errors of %d message(s) were not read (%s)", len(tried), exc)
            notes = {}
        for message in tried:
            message.last_error = notes.get(str(message.id))
    if lease_s is not None:
        for message in kept:
            if lease_s != message._server_lease:
                message._lease(lease_s)
    return kept


async def keep_waiting(session: Session, messages: list[Message]) -> tuple[list[Message], float]:
    """The messages an iteration fetched and has not handed out yet, kept leased while they wait
    their turn behind a slow handler: those with less than half of their lease left are renewed
    together (``+WPI``, unconfirmed: one lost lets that lease run out, as before). Those whose lease
    ran out are left out: they may be another worker's now, and come back as any lease that ran
    out does. (They were handed out all the same, to fail their acks, and the receives they spent
    sent messages that no worker had failed to the dead-letter queue.) Returns the messages kept,
    and when (``time.monotonic()``) the first of them will need renewing: nothing to look at before."""
    kept: list[Message] = []
    renewed: list[Message] = []
    now = time.monotonic()
    due = math.inf
    for waiting in messages:
        if waiting._settled:
            continue
        if waiting._keeper is not None:  # a lease of its own (lease_s): its keeper renews it or gives it back
            kept.append(waiting)
            continue
        lease = waiting._broker_lease()
        left = min(waiting._lease_end, waiting._lease_start + lease) - now
        if left <= RENEW_MARGIN:
            continue
        if left < lease / 2:
            renewed.append(waiting)
            left = lease
        kept.append(waiting)
        due = min(due, now + left - lease / 2)
    if renewed:
        await acks.ack_unconfirmed(session, [waiting._reply for waiting in renewed], b"+WPI")
        for waiting in renewed:
            waiting._lease_start = now
            waiting._lease_end = now + waiting._broker_lease()
    return kept, due


async def ack_all(session: Session, messages: Iterable[Message], timeout: float = DEFAULT_TIMEOUT, *,
                  confirm: bool = True) -> None:
    """Ack many messages, waiting once for all the broker's confirmations (``confirm=False``: not at
    all). Raises ``Conflict`` before sending any if one of them cannot be acked."""
    messages = list(messages)
    for message in messages:
        message._check_lease("acked")
    for message in messages:
        message._settle()
    if confirm:
        await acks.confirm(session, [message._ack(b"+ACK") for message in messages], timeout)
    else:
        await acks.ack_unconfirmed(session, [message._reply for message in messages])


async def hand_back(session: Session, messages: list[Message]) -> None:
    """Give messages fetched but never handed over back at once, without spending an attempt
    (an iteration left early). Best effort: one the control plane could not release comes
    back after its lease, as before."""
    def settled() -> None:
        for message in messages:
            message._settle()

    await acks.hand_back(session, [m._reply for m in messages], settled)
