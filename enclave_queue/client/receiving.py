"""Taking messages: ``receive``, ``get``, ``iterate`` and ``messages`` (a mixin of ``Queue``).

Every way in pulls from the queue's durable consumer (``CONSUMER.MSG.NEXT``) with an inbox of its
own, then looks at what arrived before handing it over (``_arrived``):

- a message past its start deadline (``put(ttl_s=)``) is not handed over: the control plane drops
  it and counts it as expired (``expire``), and its lease is ended;
- a message given back by ``release`` more often than ``max_receives`` allows in total is
  dead-lettered (the broker counts the receives of each copy only);
- messages tried before get their ``last_error`` from the control plane, one request a batch;
- a ``lease_s`` other than the broker's starts the message's lease keeper (message.py).

On a queue with ``priorities`` every level 1–9 has a consumer of its own (a lane). A receive
asks the lanes in turn, highest first, without waiting, until it has its batch; if none had a
message it long-polls all of them at once (``_pull_any``). So of the messages waiting when a
receive starts, the highest priority ones are taken first. Under concurrency that is per
receive, not global: a worker that asked lane 9 an instant before a priority-9 message arrived
takes a priority-5 one from lane 5 meanwhile; and a batch is filled from lower lanes once the
higher are empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Optional

import nats.errors
from nats.aio.msg import Msg

from .. import envelope
from ..auth.users import lane_consumer
from ..errors import EnclaveError, SpecError
from .message import Message

if TYPE_CHECKING:
    from .queue import Queue

MAX_BATCH = 1000  #: messages one pull may ask for
MAX_GET_WAIT = 60.0  #: seconds one get may wait
ITERATE_WAIT = 20.0  #: seconds one long poll of iterate waits before it asks again
PREFETCH_SETTLE = 0.25  #: seconds an iteration left early gives its prefetch to finish taking what was there
_STATUS = "Status"


class _Pull:
    __slots__ = ("want", "messages", "done", "unanswered")

    def __init__(self, want: int, done: asyncio.Future[None]) -> None:
        self.want = want
        self.messages: list[Msg] = []
        self.done = done
        self.unanswered = False  #: the broker said "no responders" (a configuration reload)


def _wait_rule(field: str, value: Any, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
        message = f"must be a number of seconds from 0 to {high:g} (got {value!r})"
        raise SpecError(f"{field} {message}.", errors=[{"field": field, "message": message}])
    return float(value)


class Receiving:
    async def _pull(self: Queue, batch: int, *, expires: float = 0.0, level: int = 0) -> list[Msg]:
        """One pull request: up to ``batch`` messages; waits up to ``expires`` seconds (0 = none).
        Each pull has its own inbox: delivered messages keep their original subject, so only
        the subscription tells whose they are. A request the broker did not take ("no
        responders" during a configuration reload) is sent again."""
        self._check_open()
        loop = asyncio.get_running_loop()
        token = f"p{next(self._ids)}"
        pull = _Pull(batch, loop.create_future())
        self._waiting[token] = pull

        async def collect(msg: Msg) -> None:
            status = msg.headers.get(_STATUS) if msg.headers else None
            if status is None:
                pull.messages.append(msg)
                if len(pull.messages) < batch:
                    return
            elif status == "100":  # idle heartbeat
                return
            elif status == "503":
                pull.unanswered = True
            if not pull.done.done():
                pull.done.set_result(None)

        inbox = f"{self._mux}.pull.{token}"  # two tokens: outside the reply wildcard's reach
        sub = await self._nc.subscribe(inbox, cb=collect)
        request: dict[str, Any] = {"batch": batch}
        if expires > 0:
            request["expires"] = int(expires * 1e9)
        else:
            request["no_wait"] = True
        deadline = loop.time() + expires + 5.0
        delay = 0.01
        next_subject = self._next_subject if level == 0 else self._lane_next(level)
        try:
            while True:
                await self._nc.publish(next_subject, json.dumps(request).encode(), reply=inbox)
                await asyncio.wait_for(asyncio.shield(pull.done), max(deadline - loop.time(), 0.001))
                if not pull.unanswered or pull.messages or loop.time() + delay > deadline:
                    break
                pull.unanswered, pull.done = False, loop.create_future()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            self._orphaned(pull.messages)
            raise
        finally:
            self._waiting.pop(token, None)
            with contextlib.suppress(nats.errors.Error):  # the connection may be closing
                await sub.unsubscribe()
        return pull.messages

    def _orphaned(self: Queue, msgs: list[Msg]) -> None:
        """Messages a cancelled pull had received (a prefetch of an iteration left early): given
        back at once in a task of their own, so they do not wait out their lease."""
        if msgs and not self._closed:
            task = asyncio.ensure_future(self._hand_back([Message(self, m) for m in msgs]))
            self._keepers.add(task)
            task.add_done_callback(self._keepers.discard)

    def _lane_next(self: Queue, level: int) -> str:
        return f"$JS.API.CONSUMER.MSG.NEXT.{self.credentials.stream}.{lane_consumer(level)}"

    async def _pull_any(self: Queue, levels: tuple[int, ...], wait: float) -> list[Msg]:
        """A long poll of every priority lane at once (one message each), ended by the first message
        to arrive. The other lanes' pull requests end with the inbox: the broker delivers nothing
        to a pull request whose reply subject nobody listens to any more (measured). A message a
        lane sent just before that is kept too; the highest priority comes first."""
        self._check_open()
        loop = asyncio.get_running_loop()
        token = f"p{next(self._ids)}"
        pull = _Pull(1, loop.create_future())  # failed by a permission denial or close
        self._waiting[token] = pull

        async def collect(msg: Msg) -> None:
            if msg.headers and msg.headers.get(_STATUS):  # heartbeats, the end of a lane's request
                return
            pull.messages.append(msg)
            if not pull.done.done():
                pull.done.set_result(None)

        sub = await self._nc.subscribe(f"{self._mux}.pull.{token}.*", cb=collect)
        request = json.dumps({"batch": 1, "expires": int(wait * 1e9)}).encode()
        try:
            for level in levels:
                await self._nc.publish(self._lane_next(level), request, reply=f"{self._mux}.pull.{token}.{level}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pull.done), wait + 1.0)
        except asyncio.CancelledError:
            self._orphaned(pull.messages)
            raise
        finally:
            self._waiting.pop(token, None)
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        return sorted(pull.messages, key=lambda m: -envelope.priority_of(m.subject))

    async def _arrived(self: Queue, msgs: list[Msg], lease_s: Optional[float]) -> list[Message]:
        """Messages as handed over: expired ones dropped, over-tried ones dead-lettered, last errors
        read, leases set (see the module's docstring)."""
        if not msgs:
            return []
        config = await self._consumer()
        messages = [Message(self, msg, config) for msg in msgs]
        max_deliver = config["max_deliver"]
        now = datetime.now(UTC)
        expired = [m for m in messages if m.deadline is not None and m.deadline <= now]
        over = [m for m in messages if max_deliver > 0 and m.attempts > max_deliver and m not in expired]
        if expired:
            await self._desk("expire", {"seqs": [m.sequence for m in expired]})
            await self._send_unconfirmed([m._reply for m in expired])  # their leases; the messages are gone
        for message in over:
            with contextlib.suppress(EnclaveError):
                await message.reject("received more often than max_receives allows (with releases)")
        kept = [m for m in messages if m not in expired and m not in over]
        tried = [m for m in kept if m.attempts > 1]
        if tried:
            notes = await self._desk("notes", {"ids": sorted({m.id for m in tried})})
            for message in tried:
                message.last_error = notes.get(str(message.id))
        if lease_s is not None:
            for message in kept:
                if lease_s != message._server_lease:
                    message._lease(lease_s)
        return kept

    async def receive(self: Queue, batch: int = 1, wait: float = 5.0, *,
                      lease_s: Optional[float] = None) -> list[Message]:
        """Up to ``batch`` (1–1000) messages, waiting up to ``wait`` seconds for the first one;
        returns as soon as any are available (an empty list if none came). Each is leased
        (hidden) for the queue's visibility timeout, or ``lease_s`` (1 s to 12 h)."""
        if not 1 <= batch <= MAX_BATCH:
            message = f"must be from 1 to {MAX_BATCH} (got {batch})"
            raise SpecError(f"batch {message}.", errors=[{"field": "batch", "message": message}])
        if lease_s is not None:
            lease_s = envelope.check_lease(lease_s)
        levels = await self._levels()
        if levels == (0,):
            msgs = await self._pull(batch)
            if not msgs and wait > 0:
                msgs = await self._pull(1, expires=wait)
                if msgs and batch > 1:
                    msgs += await self._pull(batch - 1)
            return await self._arrive(msgs, lease_s)
        msgs = await self._take_by_priority(levels, batch)
        if not msgs and wait > 0:
            msgs = await self._pull_any(levels, wait)
            if msgs and batch > len(msgs):
                msgs += await self._take_by_priority(levels, batch - len(msgs))
        messages = await self._arrive(msgs, lease_s)
        for extra in messages[batch:]:  # two lanes answered the long poll at once: not spent
            with contextlib.suppress(EnclaveError):
                await extra.release()
        return messages[:batch]

    async def _arrive(self: Queue, msgs: list[Msg], lease_s: Optional[float]) -> list[Message]:
        """``_arrived``; if the receive is cancelled meanwhile, the messages are given back."""
        try:
            return await self._arrived(msgs, lease_s)
        except asyncio.CancelledError:
            self._orphaned(msgs)
            raise

    async def _take_by_priority(self: Queue, levels: tuple[int, ...], batch: int) -> list[Msg]:
        """Up to ``batch`` messages without waiting, from the highest priority lane down."""
        msgs: list[Msg] = []
        for level in levels:
            msgs += await self._pull(batch - len(msgs), level=level)
            if len(msgs) == batch:
                break
        return msgs

    async def get(self: Queue, timeout_s: float = 20.0, *, lease_s: Optional[float] = None) -> Optional[Message]:
        """One message, waiting up to ``timeout_s`` (0–60) seconds for it (a long poll: it returns
        as soon as one arrives); None if none came. ``lease_s`` (1 s to 12 h) is how long it is
        yours instead of the queue's visibility timeout."""
        timeout_s = _wait_rule("timeout_s", timeout_s, MAX_GET_WAIT)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:  # a message dropped on arrival (expired) does not end the wait
            messages = await self.receive(1, max(deadline - loop.time(), 0.0), lease_s=lease_s)
            if messages or loop.time() >= deadline:
                return messages[0] if messages else None

    async def iterate(self: Queue, *, lease_s: Optional[float] = None, stop_when_empty: bool = False,
                      batch: int = 100) -> AsyncIterator[Message]:
        """Every message as it comes, each leased for ``lease_s`` (default: the visibility
        timeout); ack or nack each. The next batch is fetched while one is handled (so up to two
        batches are leased at once). It waits for new messages for ever, or with
        ``stop_when_empty`` ends the first time nothing is waiting: messages leased by others,
        handed back with a delay, or delayed do not keep it going."""
        if lease_s is not None:
            lease_s = envelope.check_lease(lease_s)
        wait = 0.0 if stop_when_empty else ITERATE_WAIT
        pending = self._prefetch(batch, wait, lease_s)
        unseen: list[Message] = []  #: fetched and not yielded yet
        try:
            while True:
                unseen = await pending
                if not unseen and stop_when_empty:
                    return
                pending = self._prefetch(batch, wait, lease_s)
                while unseen:
                    yield unseen.pop(0)
        finally:
            # a prefetch still taking what is there (no wait) finishes in a moment; one left waiting
            # for new messages is cancelled (its pull hands back what it had received: _orphaned)
            await asyncio.wait({pending}, timeout=PREFETCH_SETTLE)
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
            if not pending.cancelled() and pending.exception() is None:
                unseen += pending.result()
            await self._hand_back(unseen)

    async def _hand_back(self: Queue, messages: list[Message]) -> None:
        """Give messages fetched but never handed over back at once, without spending an attempt
        (an iteration left early). Best effort: one the control plane could not release comes
        back after its lease, as before."""
        if not messages or self._closed:
            return
        with contextlib.suppress(EnclaveError, RuntimeError):
            await self._desk("release_many", {"messages": [
                {"seq": m.sequence, "receive_count": m.receive_count} for m in messages]})
            for message in messages:
                message._settle()
            await self._send_unconfirmed([m._reply for m in messages])

    async def messages(self: Queue, batch: int = 100, wait: float = 5.0) -> AsyncIterator[Message]:
        """Every message as it comes, fetching the next batch while the current one is handled
        (so up to two batches are leased at once). Stops when nothing arrives for ``wait`` seconds."""
        pending = self._prefetch(batch, wait, None)
        try:
            while True:
                current = await pending
                if not current:
                    return
                pending = self._prefetch(batch, wait, None)
                for message in current:
                    yield message
        finally:
            pending.cancel()

    def _prefetch(self: Queue, batch: int, wait: float, lease_s: Optional[float]) -> asyncio.Task[list[Message]]:
        task = asyncio.ensure_future(self.receive(batch, wait, lease_s=lease_s))
        self._prefetches.add(task)
        task.add_done_callback(self._prefetches.discard)
        return task

    async def delete_many(self: Queue, messages: Iterable[Message], timeout: float = 5.0, *,
                          confirm: bool = True) -> None:
        """Ack many received messages, waiting once for all the broker's confirmations.
        ``confirm=False``: send them without waiting (see ``Message.ack``)."""
        messages = list(messages)
        for message in messages:
            message._check_lease("acked")
        for message in messages:
            message._settle()
        if confirm:
            await self._confirm_many([(message._reply, b"+ACK") for message in messages], timeout)
        else:
            await self._send_unconfirmed([message._reply for message in messages])

    ack_many = delete_many

    async def _send_unconfirmed(self: Queue, replies: list[str]) -> None:
        self._check_open()
        for reply in replies:
            await self._nc.publish(reply, b"+ACK")
