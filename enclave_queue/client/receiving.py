"""Taking messages from a queue: ``receive``, ``get``, ``iterate`` and ``messages``, and settling many
at once (``delete_many``), over a session.

Every way in pulls from the queue's durable consumer with an inbox of its own (pulls.py, which
also says how a wait outlasts a broker restart), then hands what arrived to
``message.received``, which drops expired messages, dead-letters over-released ones, reads last
errors and sets leases before anything is handed over.

On a queue with ``priorities`` every level 1–9 has a consumer of its own (a lane). A receive
asks the lanes in turn, highest first, without waiting, until it has its batch; if none had a
message it long-polls all of them at once (``pulls.pull_any``). So of the messages waiting when
a receive starts, the highest priority ones are taken first. Under concurrency that is per
receive, not global: a worker that asked lane 9 an instant before a priority-9 message arrived
takes a priority-5 one from lane 5 meanwhile; and a batch is filled from lower lanes once the
higher are empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any, Optional

from nats.aio.msg import Msg

from .. import envelope
from ..errors import EnclaveError, SpecError, out_of_range
from . import acks, message
from .message import Message
from .pulls import MIN_SLICE, NO_WAIT_ANSWER, PULL_GRACE, pull, pull_any
from .sending import check_timeout
from .session import DEFAULT_TIMEOUT, Session
from .settings import Settings

MAX_BATCH = 1000  #: messages one pull may ask for
MAX_GET_WAIT = 60.0  #: seconds one get may wait
ITERATE_WAIT = 20.0  #: seconds one long poll of iterate waits before it asks again
PREFETCH_SETTLE = 0.25  #: seconds an iteration left early gives its prefetch to finish taking what was there


def _wait_rule(field: str, value: Any, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
        rule = f"must be a number of seconds from 0 to {high:g} (got {value!r})"
        raise SpecError(f"{field} {rule}.", errors=[{"field": field, "message": rule}])
    return float(value)


def _batch_rule(batch: Any) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        rule = f"must be a whole number from 1 to {MAX_BATCH} (got {batch!r})"
        raise SpecError(f"batch {rule}.", errors=[{"field": "batch", "message": rule}])
    return batch


class Receiving:
    """The receiving verbs of one queue."""

    def __init__(self, session: Session, settings: Settings) -> None:
        self._session = session
        self._settings = settings

    async def receive(self, batch: int = 1, wait: float = 5.0, *, lease_s: Optional[float] = None) -> list[Message]:
        """Up to ``batch`` (1–1000) messages, waiting up to ``wait`` (0–60) seconds for the first one;
        returns as soon as any are available (an empty list if none came). Each is leased
        (hidden) for the queue's visibility timeout, or ``lease_s`` (1 s to 12 h)."""
        _batch_rule(batch)
        wait = _wait_rule("wait", wait, MAX_GET_WAIT)
        if lease_s is not None:
            lease_s = envelope.check_lease(lease_s)
        return await self._receive(batch, wait, lease_s)

    async def _receive(self, batch: int, wait: float, lease_s: Optional[float]) -> list[Message]:
        """``receive`` once its arguments are checked."""
        session = self._session
        levels = await self._settings.levels()
        if self._settings.cached("consumer") is None:
            await self._settings.consumer()  # NotFound if the credentials name no consumer of the queue's
        if levels == (0,) and batch == 1 and wait >= MIN_SLICE:
            # a waiting pull of one returns as soon as one is there: asking without waiting first
            # would only cost a waiting worker (get) a round trip per message
            return await self._arrive(await pull(session, 1, wait=wait), lease_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        answer_by = max(deadline, loop.time() + NO_WAIT_ANSWER)  # a broker down all the while: back by then
        if levels == (0,):
            msgs = await pull(session, batch, answer_by=answer_by)
            if not msgs and deadline - loop.time() >= MIN_SLICE:
                msgs = await pull(session, 1, wait=deadline - loop.time())
                if msgs and batch > 1:
                    msgs += await pull(session, batch - 1)
            return await self._arrive(msgs, lease_s)
        msgs = await self._take_by_priority(levels, batch, answer_by)
        if not msgs and deadline - loop.time() >= MIN_SLICE:
            msgs = await pull_any(session, levels, deadline - loop.time())
            if msgs and batch > len(msgs):
                msgs += await self._take_by_priority(levels, batch - len(msgs), loop.time() + NO_WAIT_ANSWER)
        messages = await self._arrive(msgs, lease_s)
        for extra in messages[batch:]:  # two lanes answered the long poll at once: not spent
            with contextlib.suppress(EnclaveError):
                await extra.release()
        return messages[:batch]

    async def _arrive(self, msgs: list[Msg], lease_s: Optional[float]) -> list[Message]:
        """``message.received``; if the receive is cancelled meanwhile, the messages are given back."""
        if not msgs:
            return []
        try:
            return await message.received(self._session, self._settings, msgs, lease_s)
        except asyncio.CancelledError:
            acks.orphaned(self._session, msgs)
            raise

    async def _take_by_priority(self, levels: tuple[int, ...], batch: int, answer_by: float) -> list[Msg]:
        """Up to ``batch`` messages without waiting, from the highest priority lane down; no lane is
        asked after ``answer_by`` (the broker did not answer meanwhile)."""
        loop = asyncio.get_running_loop()
        msgs: list[Msg] = []
        for level in levels:
            msgs += await pull(self._session, batch - len(msgs), level=level,
                               answer_by=max(answer_by, loop.time() + PULL_GRACE))
            if len(msgs) == batch or loop.time() >= answer_by:
                break
        return msgs

    async def get(self, timeout_s: float = 20.0, *, lease_s: Optional[float] = None) -> Optional[Message]:
        """One message, waiting up to ``timeout_s`` (0–60) seconds for it (a long poll: it returns
        as soon as one arrives); None if none came. ``lease_s`` (1 s to 12 h) is how long it is
        yours instead of the queue's visibility timeout."""
        timeout_s = _wait_rule("timeout_s", timeout_s, MAX_GET_WAIT)
        if lease_s is not None:
            lease_s = envelope.check_lease(lease_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:  # a message dropped on arrival (expired) does not end the wait
            messages = await self._receive(1, max(deadline - loop.time(), 0.0), lease_s)
            if messages or loop.time() >= deadline:
                return messages[0] if messages else None

    async def iterate(self, *, lease_s: Optional[float] = None, stop_when_empty: bool = False,
                      batch: int = 100) -> AsyncIterator[Message]:
        """Every message as it comes, each leased for ``lease_s`` (default: the visibility
        timeout); ack or nack each. The next batch is fetched while one is handled (so up to two
        batches are leased at once). It waits for new messages for ever, or with
        ``stop_when_empty`` ends the first time nothing is waiting: messages leased by others,
        handed back with a delay, or delayed do not keep it going.

        ``await m.ack()`` of a message it handed out does not wait for the broker: the acks of a
        batch are confirmed together (acks.AckWindow) before a message of the next batch is
        handed out, and before the iteration ends; one that failed (``Conflict``,
        ``BrokerUnavailable``) is raised by the iteration then. Left early (``break``), it confirms
        them as it closes, without raising."""
        _batch_rule(batch)
        if lease_s is not None:
            lease_s = envelope.check_lease(lease_s)
        wait = 0.0 if stop_when_empty else ITERATE_WAIT
        window = acks.AckWindow(self._session)
        pending = self._prefetch(batch, wait, lease_s)
        unseen: list[Message] = []  #: fetched and not yielded yet
        settle = True  #: on the way out, wait for its acks' confirmations (not when cancelled)
        try:
            while True:
                unseen = await self._taken(pending)
                await window.settle()
                if not unseen and stop_when_empty:
                    return
                pending = self._prefetch(batch, wait, lease_s)
                due = -math.inf  #: when a message waiting its turn needs its lease renewed (keep_waiting)
                while unseen:
                    if time.monotonic() >= due:  # this batch's and the next's wait behind a slow handler
                        ahead = pending.result() if pending.done() and not pending.cancelled() and \
                            pending.exception() is None else []
                        kept, due = await message.keep_waiting(self._session, [*unseen, *ahead])
                        held = {id(m) for m in kept}
                        unseen = [m for m in unseen if id(m) in held]
                        ahead[:] = [m for m in ahead if id(m) in held]
                        if not unseen:
                            break
                    received = unseen.pop(0)
                    received._window = window
                    yield received
        except asyncio.CancelledError:
            settle = False  # the acks are confirmed in a task of their own all the same
            raise
        finally:
            with self._session.finishing():  # a close waits for this (a break, then close at once)
                if settle:  # left early: its acks still count, but nobody is there to hear a failure
                    with contextlib.suppress(EnclaveError, RuntimeError):
                        await window.settle()
                # a prefetch still taking what is there (no wait) finishes in a moment; one left waiting
                # for new messages is cancelled (its pull hands back what it had received: acks.orphaned)
                await asyncio.wait({pending}, timeout=PREFETCH_SETTLE)
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
                if not pending.cancelled() and pending.exception() is None:
                    unseen += pending.result()
                await message.hand_back(self._session, unseen)

    async def messages(self, batch: int = 100, wait: float = 5.0) -> AsyncIterator[Message]:
        """Every message as it comes, fetching the next batch while the current one is handled
        (so up to two batches are leased at once). Stops when nothing arrives for ``wait`` seconds."""
        _batch_rule(batch)
        _wait_rule("wait", wait, MAX_GET_WAIT)
        pending = self._prefetch(batch, wait, None)
        try:
            while True:
                current = await self._taken(pending)
                if not current:
                    return
                pending = self._prefetch(batch, wait, None)
                for received in current:
                    yield received
        finally:
            pending.cancel()

    async def _taken(self, pending: asyncio.Task[list[Message]]) -> list[Message]:
        """What a prefetch took. ``close()`` cancels it; the iteration then raises what any call
        on a closed client does, not a cancellation nobody asked of its task."""
        try:
            return await pending
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if pending.cancelled() and not (task is not None and task.cancelling()):
                self._session.check_open()
            raise

    def _prefetch(self, batch: int, wait: float, lease_s: Optional[float]) -> asyncio.Task[list[Message]]:
        return self._session.spawn(self._receive(batch, wait, lease_s))  # checked by the caller

    async def delete_many(self, messages: Iterable[Message], timeout: float = DEFAULT_TIMEOUT, *,
                          confirm: bool = True) -> None:
        """Ack many received messages, waiting once for all the broker's confirmations.
        ``confirm=False``: send them without waiting (see ``Message.ack``)."""
        if isinstance(messages, (str, bytes, Message)) or not isinstance(messages, Iterable):
            raise out_of_range("messages", "a list of received messages", f"a {type(messages).__name__}")
        messages = list(messages)
        if not all(isinstance(m, Message) for m in messages):
            raise out_of_range("messages", "a list of received messages", "one holding something else")
        # another client's message (another queue's, say): its acks would be refused as not this
        # user's, after the message was marked done, so its own client could not ack it either
        if foreign := next((m for m in messages if m._session is not self._session), None):
            raise out_of_range("messages", "messages this client received",
                               f"message {foreign.id}, which another client received: ack it with that one")
        check_timeout(timeout)
        if not isinstance(confirm, bool):
            raise out_of_range("confirm", "True or False", repr(confirm))
        await message.ack_all(self._session, messages, timeout, confirm=confirm)
