"""Acknowledgements of received messages (``+ACK``, ``-NAK``, ``+WPI``) confirmed by the broker
across reconnects, sent without waiting, or ended by handing the messages back.

message.py and receiving.py settle messages through it; it knows a delivery only by its reply
subject (``$JS.ACK.…``, parsed by ``delivery``) and, for the lease rule below, by an ``Ack``'s
message id and lease end, so it sits below message.py, on session.py.

An acknowledgement is sent again, the same payload to the same reply subject, when the connection
came back before the broker confirmed it, after "no responders", and after RESEND_AFTER without an
answer, until its timeout: the broker takes a repeat as it took the first. It is not sent again
once its message's lease is less than LEASE_MARGIN from its end (another worker may have it by
then): ``Conflict``. A restarted broker may have forgotten handing a message out
(docs/operations.md, "Failures and what happens"): it ignores an ``+ACK`` of it without an answer,
so an ``+ACK`` still unanswered SILENT_AFTER after the connection came back is checked against its
consumer's delivered sequence, and one of a message the consumer has not delivered since its
restart raises ``Conflict`` (it will be delivered again). The rest raise ``BrokerUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Optional

from nats.aio.msg import Msg

from ..errors import BrokerUnavailable, Conflict, EnclaveError
from .session import DEFAULT_TIMEOUT, RESEND_AFTER, Backoff, Session, unavailable

#: seconds before the end of a message's lease after which an acknowledgement of it is not sent again
LEASE_MARGIN = 0.25
SILENT_AFTER = 0.5  #: seconds an +ACK sent again after a reconnect may go unanswered before its delivery is checked


class Delivery(NamedTuple):
    """What a delivered message's reply subject says about it."""

    stream: str
    consumer: str
    receive_count: int  #: receives of this copy, this one included
    sequence: int  #: this copy's position in the stream
    sent_ns: int  #: when this copy was stored (ns since the epoch)


def delivery(reply: str) -> Delivery:
    """Parse ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>``
    (the v2 form carries a domain and an account hash first)."""
    tokens = reply.split(".")
    if len(tokens) > 9:
        tokens = tokens[:2] + tokens[4:]
    return Delivery(tokens[2], tokens[3], int(tokens[4]), int(tokens[5]), int(tokens[7]))


class Ack(NamedTuple):
    """One acknowledgement to confirm: ``payload`` to a message's ``reply`` subject."""

    reply: str
    payload: bytes
    message_id: Optional[int] = None  #: the message errors name ("message 7"), if known
    lease_end: float = math.inf  #: when (``time.monotonic()``) its lease ends: not sent again near it


async def confirm(session: Session, acks: list[Ack], timeout: float = DEFAULT_TIMEOUT, *, verb: str = "acked",
                  then: Optional[Callable[[], Awaitable[None]]] = None) -> None:
    """Send the acknowledgements and wait once for all the broker's confirmations, sending each
    again by the module's rules. ``verb`` names what they do in errors ("acked", "nacked", …).
    ``then``: sent once the acknowledgements are on their way, before their confirmations are
    awaited (the same connection carries it after them).
    Raises ``Conflict`` for one whose lease ran out first or whose delivery the broker forgot,
    ``BrokerUnavailable`` for one unconfirmed at ``timeout``; ``PermissionDenied``,
    ``Unauthorized`` or ``RuntimeError`` when the session fails meanwhile."""
    session.check_open()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending: dict[int, Ack] = dict(enumerate(acks))  #: not confirmed yet
    again: set[int] = set(pending)  #: to send (again) now
    sent_at: dict[int, float] = {}
    failures: list[BaseException] = []  #: PermissionDenied, Unauthorized, RuntimeError
    refused: dict[int, str] = {}  #: ``lease`` (ran out before a copy could be sent again) or ``forgotten``
    waiters: list[tuple[str, asyncio.Future[Msg]]] = []
    wake: asyncio.Future[None] = loop.create_future()  #: something to do: a failure, a 503, all confirmed
    back_at: Optional[float] = None  #: when the connection came back with acknowledgements unanswered
    backoff = Backoff()

    def answered(index: int, future: asyncio.Future[Msg]) -> None:
        if future.cancelled() or index not in pending:
            return
        if future.exception() is not None:
            failures.append(future.exception())  # type: ignore[arg-type]
        elif unavailable(future.result()):
            again.add(index)
        else:
            del pending[index]
        if not wake.done() and (failures or again or not pending):
            wake.set_result(None)

    try:
        while True:
            reconnect = session.reconnect
            batch, now = sorted(again), time.monotonic()
            again.clear()
            for index in batch:
                if index not in pending:
                    continue
                if index in sent_at and pending[index].lease_end - now < LEASE_MARGIN:
                    del pending[index]
                    refused[index] = "lease"
                    continue
                token, future = session.new_waiter()
                waiters.append((token, future))
                future.add_done_callback(functools.partial(answered, index))
                sent_at[index] = loop.time()
                await session.publish(pending[index].reply, pending[index].payload, reply=f"{session.mux}.{token}")
            if then is not None:
                await then()
                then = None
            if failures:
                raise failures[0]
            now = loop.time()
            if not pending or now >= deadline:
                break
            due = min(sent_at[index] for index in pending) + RESEND_AFTER
            if back_at is not None:
                due = min(due, back_at + SILENT_AFTER)
            await asyncio.wait({wake, reconnect}, timeout=max(min(due, deadline) - now, 0.001),
                               return_when=asyncio.FIRST_COMPLETED)
            if failures:
                raise failures[0]
            if wake.done():
                wake = loop.create_future()
                if again and pending:
                    await asyncio.sleep(backoff.next())
            now = loop.time()
            if reconnect.done():
                again.update(pending)
                back_at = now
                continue
            if back_at is not None and now >= back_at + SILENT_AFTER:
                back_at = None
                silent = {index: ack.reply for index, ack in pending.items() if ack.payload == b"+ACK"}
                for index in await _forgotten(session, silent, deadline):
                    if pending.pop(index, None) is not None:
                        refused[index] = "forgotten"
            again.update(index for index in pending if now - sent_at[index] >= RESEND_AFTER)
    finally:
        for token, future in waiters:
            session.waiting.pop(token, None)
            future.cancel()
    if not pending and not refused:
        return
    raise _unsettled(acks, pending, refused, verb, timeout)


class AckWindow:
    """The ``+ACK``s of one iteration (``Queue.iterate``), confirmed together: while one group of
    them is being confirmed, the acks made meanwhile queue up, and go as the next group, one flush
    and one wait for them all (``confirm``'s rules, sending again included). An ack waits for
    nothing; the iteration calls ``settle`` before it hands out the next batch and before it ends,
    which waits for every confirmation and raises the first failure."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._queued: list[Ack] = []
        self._confirming: Optional[asyncio.Task[None]] = None
        self._failure: Optional[BaseException] = None  #: the first ack of the window that failed

    def add(self, ack: Ack) -> None:
        """Confirm ``ack`` with the next group; sent as soon as the loop is free."""
        self._queued.append(ack)
        if self._confirming is None or self._confirming.done():
            self._confirming = self._session.spawn(self._confirm_groups(), finish=True)  # close waits for it

    async def _confirm_groups(self) -> None:
        while self._queued:
            group, self._queued = self._queued, []
            try:
                await confirm(self._session, group)
            except (EnclaveError, RuntimeError) as exc:
                self._failure = self._failure or exc

    async def settle(self) -> None:
        """Wait until every ack added so far is confirmed; raise the first that was not (once)."""
        if self._confirming is not None:
            await asyncio.shield(self._confirming)
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure


async def _forgotten(session: Session, replies: dict[int, str], deadline: float) -> set[int]:
    """Of these acknowledgements (by index: the reply subject of each message), those of messages
    their consumer has not handed out since the broker restarted: its delivered stream sequence
    is below theirs (the broker forgot delivering them: it writes a consumer's state within
    about 100 ms). Empty when the broker does not answer."""
    by_consumer: dict[tuple[str, str], dict[int, int]] = {}
    for index, reply in replies.items():
        found_in = delivery(reply)
        by_consumer.setdefault((found_in.stream, found_in.consumer), {})[index] = found_in.sequence
    found: set[int] = set()
    for (stream, consumer), sequences in by_consumer.items():
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            break
        try:
            reply = await session.request(f"$JS.API.CONSUMER.INFO.{stream}.{consumer}", b"", timeout=remaining)
            delivered = int(json.loads(reply.data)["delivered"]["stream_seq"])
        except (EnclaveError, ValueError, KeyError, TypeError):
            continue
        found.update(index for index, sequence in sequences.items() if sequence > delivered)
    return found


def _unsettled(acks: list[Ack], pending: dict[int, Ack], refused: dict[int, str], verb: str,
               timeout: float) -> EnclaveError:
    """The error of acknowledgements not confirmed: ``Conflict`` for one whose lease ran out
    before it could be sent again or whose delivery the broker forgot, else ``BrokerUnavailable``."""
    def name(index: int) -> str:
        message_id = acks[index].message_id
        return f"message {message_id}" if message_id is not None else "the message"

    if refused:
        index, why = min(refused.items())
        if why == "lease":
            text = (f"The lease on {name(index)} ran out before the broker confirmed it was {verb} (the "
                    f"connection to the broker was lost meanwhile); it may have been {verb}, or be someone "
                    "else's now. Receive it again.")
        else:
            text = (f"The broker restarted and forgot it had handed out {name(index)} (it writes deliveries "
                    f"to disk within about 100 ms; this one was lost in the crash), so it was not {verb}. "
                    "It will be delivered again.")
        if len(acks) > 1:
            text = f"{len(refused) + len(pending)} of {len(acks)} messages were not {verb}; the first: {text}"
        return Conflict(text)
    return BrokerUnavailable(f"The broker did not confirm {len(pending)} acknowledgement(s) within {timeout:g} s.")


async def ack_unconfirmed(session: Session, replies: list[str], payload: bytes = b"+ACK") -> None:
    """``payload`` (``+ACK``) to each reply subject without waiting for the broker (a plain NATS
    ``ack()``)."""
    session.check_open()
    for reply in replies:
        await session.publish(reply, payload)


async def hand_back(session: Session, replies: list[str], settled: Optional[Callable[[], None]] = None) -> None:
    """Give messages received but never handed over back at once, without spending an attempt
    (the control plane's ``release_many``), then end their leases; ``settled`` is called in
    between. Best effort: one the control plane could not release comes back after its lease."""
    if not replies or session.closed:
        return
    with contextlib.suppress(EnclaveError, RuntimeError):
        deliveries = [delivery(reply) for reply in replies]
        await session.desk("release_many", {"messages": [
            {"seq": d.sequence, "receive_count": d.receive_count} for d in deliveries]}, resend=True)
        if settled is not None:
            settled()
        await ack_unconfirmed(session, replies)


def orphaned(session: Session, msgs: list[Msg]) -> None:
    """Messages a cancelled receive had taken (a prefetch of an iteration left early): given back
    at once in a task of their own, so they do not wait out their lease."""
    if msgs and not session.closed:
        session.spawn(hand_back(session, [msg.reply for msg in msgs]))
