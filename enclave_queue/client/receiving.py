"""Taking messages: ``receive``, ``get``, ``iterate`` and ``messages`` (a mixin of ``Queue``).

Every way in pulls from the queue's durable consumer (``CONSUMER.MSG.NEXT``) with an inbox of its
own, then looks at what arrived before handing it over (``_arrived``):

- a message past its start deadline (``put(ttl_s=)``) is not handed over: the control plane drops
  it and counts it as expired (``expire``), and its lease is ended;
- a message given back by ``release`` more often than ``max_receives`` allows in total is
  dead-lettered (the broker counts the receives of each copy only);
- messages tried before get their ``last_error`` from the control plane, one request a batch;
- a ``lease_s`` other than the broker's starts the message's lease keeper (message.py).

A restarted broker forgets the pull requests it holds, and nothing tells the client. So a wait is
asked in requests of at most PULL_SLICE seconds, each sent when the last ended, and a request
still unanswered is sent again as soon as the connection is back (``Queue._reconnected``). Every
way in returns by its deadline, PULL_GRACE later if the broker does not answer at all.

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
from ..errors import EnclaveError, SpecError
from ..names import lane_consumer
from .message import Message

if TYPE_CHECKING:
    from .queue import Queue

MAX_BATCH = 1000  #: messages one pull may ask for
MAX_GET_WAIT = 60.0  #: seconds one get may wait
ITERATE_WAIT = 20.0  #: seconds one long poll of iterate waits before it asks again
#: seconds one pull request waits at most: a longer wait is asked in pieces, each sent when the last
#: ended, so a pull request the broker forgot (it restarted) costs at most this much of a wait
PULL_SLICE = 5.0
PULL_GRACE = 0.25  #: seconds past its expiry an unanswered pull request is waited for (the broker is down)
NO_WAIT_ANSWER = 1.0  #: seconds a pull that does not wait for messages waits for the broker's answer, at least
MIN_SLICE = 0.01  #: seconds: a wait shorter than this is asked without waiting
PREFETCH_SETTLE = 0.25  #: seconds an iteration left early gives its prefetch to finish taking what was there
_STATUS = "Status"


class _Pull:
    __slots__ = ("want", "messages", "done", "unanswered", "status", "ended")

    def __init__(self, want: int, done: asyncio.Future[None]) -> None:
        self.want = want
        self.messages: list[Msg] = []
        self.done = done
        self.unanswered = False  #: the broker said "no responders" (a configuration reload)
        self.status: Optional[str] = None  #: how the current request ended ("408": expired, "404": nothing, …)
        self.ended = 0  #: requests of the current round that ended (one a lane: ``_pull_any``)

    def again(self) -> None:
        """Before the next request: a new future for it to end (``_fail_all`` fails the current one)."""
        if self.done.done():
            self.done = asyncio.get_running_loop().create_future()
        self.unanswered, self.status, self.ended = False, None, 0


def _wait_rule(field: str, value: Any, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high:
        message = f"must be a number of seconds from 0 to {high:g} (got {value!r})"
        raise SpecError(f"{field} {message}.", errors=[{"field": field, "message": message}])
    return float(value)


class Receiving:
    async def _pull(self: Queue, batch: int, *, wait: float = 0.0, level: int = 0,
                    answer_by: Optional[float] = None) -> list[Msg]:
        """Up to ``batch`` messages, waiting up to ``wait`` seconds for the first (0 = not at all),
        from the consumer of ``level``. Each pull has its own inbox: delivered messages keep their
        original subject, so only the subscription tells whose they are.

        A restarted broker forgets pull requests, so a long wait is asked in requests of at most
        PULL_SLICE seconds, and a request is sent again when the connection comes back, when the
        broker did not take it ("no responders": JetStream starting, or a configuration reload), and
        when it went unanswered. It returns by the end of ``wait`` (PULL_GRACE later if the broker
        does not answer); a pull that does not wait, by ``answer_by`` (default: NO_WAIT_ANSWER from
        now). Messages beyond ``batch`` (two requests both answered) are given back at once."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        if answer_by is None:
            answer_by = deadline + PULL_GRACE if wait > 0 else loop.time() + NO_WAIT_ANSWER
        token = f"p{next(self._ids)}"
        pull = _Pull(batch, loop.create_future())
        self._waiting[token] = pull
        inbox = f"{self._mux}.pull.{token}"  # .<request>: outside the reply wildcard's reach
        current = 0  #: the request whose end counts (a message from any of them does)

        async def collect(msg: Msg) -> None:
            status = msg.headers.get(_STATUS) if msg.headers else None
            if status is None:
                pull.messages.append(msg)
                if len(pull.messages) < batch:
                    return
            elif status == "100" or msg.subject.rsplit(".", 1)[1] != str(current):  # a heartbeat; an older request
                return
            else:
                pull.status = status
                pull.unanswered = status == "503"
            if not pull.done.done():
                pull.done.set_result(None)

        sub = await self._nc.subscribe(f"{inbox}.*", cb=collect)
        subject = self._next_subject if level == 0 else self._lane_next(level)
        delay = 0.01
        send, waits, buffered, answer_at = True, False, False, 0.0
        reconnect = self._reconnect
        try:
            while True:
                if send:
                    self._check_open()
                    self._waiting[token] = pull  # again: a failure meanwhile took it out and ended only the last
                    current += 1
                    piece = min(deadline - loop.time(), PULL_SLICE)
                    waits = piece >= MIN_SLICE
                    request: dict[str, Any] = {"batch": batch - len(pull.messages)}
                    if waits:
                        request["expires"] = int(piece * 1e9)
                    else:
                        request["no_wait"] = True
                    buffered = not self._nc.is_connected  # nats-py sends it when the connection is back
                    reconnect = self._reconnect
                    await self._nc.publish(subject, json.dumps(request).encode(), reply=f"{inbox}.{current}")
                    answer_at = loop.time() + (piece + PULL_GRACE if waits else NO_WAIT_ANSWER)
                until = answer_by if buffered and loop.time() >= answer_at else min(answer_at, answer_by)
                await asyncio.wait({pull.done, reconnect}, timeout=max(until - loop.time(), 0.001),
                                   return_when=asyncio.FIRST_COMPLETED)
                ended = pull.done.done()
                if ended:
                    pull.done.result()  # raises PermissionDenied, Unauthorized or "Client is closed."
                if len(pull.messages) >= batch or (ended and pull.messages):
                    break
                now = loop.time()
                if now >= (deadline if waits else answer_by) or (ended and not waits and not pull.unanswered):
                    break  # the wait is over, or the broker answered that nothing is there
                lost = reconnect.done()
                if lost:
                    reconnect = self._reconnect
                # a request that ended, or went unanswered, is sent again; after a reconnect so is one sent
                # before it, and a waiting one in any case (one nats-py buffered went out late: its expiry too)
                send = ended or (now >= answer_at and not buffered) or (lost and (waits or not buffered))
                buffered = buffered and not lost
                if ended and pull.status != "408":  # not "expired": no responders, or an odd end; not at once
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.25)
                pull.again()
        except asyncio.CancelledError:
            self._orphaned(pull.messages)
            raise
        finally:
            self._waiting.pop(token, None)
            with contextlib.suppress(nats.errors.Error):  # the connection may be closing
                await sub.unsubscribe()
        if len(pull.messages) > batch:
            self._orphaned(pull.messages[batch:])
            del pull.messages[batch:]
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
        lane sent just before that is kept too; the highest priority comes first. As ``_pull``, it
        asks in rounds of at most PULL_SLICE seconds, and asks again at once when every lane's
        request ended or the connection came back; it returns by the end of ``wait`` (PULL_GRACE
        later if the broker does not answer)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        token = f"p{next(self._ids)}"
        pull = _Pull(1, loop.create_future())  # failed by a permission denial or close
        self._waiting[token] = pull
        inbox = f"{self._mux}.pull.{token}"  # .<round>.<lane>
        current = 0  #: the round whose requests' ends count

        async def collect(msg: Msg) -> None:
            status = msg.headers.get(_STATUS) if msg.headers else None
            if status is None:
                pull.messages.append(msg)
            elif status == "100" or msg.subject.rsplit(".", 2)[1] != str(current):  # a heartbeat; an older round
                return
            else:  # a lane's request ended
                pull.ended += 1
                pull.status = status if pull.status in (None, "408") else pull.status
                if pull.ended < len(levels):
                    return
            if not pull.done.done():
                pull.done.set_result(None)

        sub = await self._nc.subscribe(f"{inbox}.*.*", cb=collect)
        delay = 0.01
        try:
            while True:
                piece = min(deadline - loop.time(), PULL_SLICE)
                if piece < MIN_SLICE:
                    break
                self._check_open()
                self._waiting[token] = pull  # again: a failure meanwhile took it out and ended only the last
                current += 1
                request = json.dumps({"batch": 1, "expires": int(piece * 1e9)}).encode()
                reconnect = self._reconnect
                for level in levels:
                    await self._nc.publish(self._lane_next(level), request, reply=f"{inbox}.{current}.{level}")
                await asyncio.wait({pull.done, reconnect}, timeout=piece + PULL_GRACE, return_when=asyncio.FIRST_COMPLETED)
                if pull.done.done():
                    pull.done.result()  # raises PermissionDenied, Unauthorized or "Client is closed."
                if pull.messages or loop.time() >= deadline:
                    break
                if pull.done.done() and pull.status != "408":  # no responders, or an odd end: not at once
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.25)
                pull.again()
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        answer_by = max(deadline, loop.time() + NO_WAIT_ANSWER)  # a broker down all the while: back by then
        if levels == (0,):
            msgs = await self._pull(batch, answer_by=answer_by)
            if not msgs and deadline - loop.time() >= MIN_SLICE:
                msgs = await self._pull(1, wait=deadline - loop.time())
                if msgs and batch > 1:
                    msgs += await self._pull(batch - 1)
            return await self._arrive(msgs, lease_s)
        msgs = await self._take_by_priority(levels, batch, answer_by)
        if not msgs and deadline - loop.time() >= MIN_SLICE:
            msgs = await self._pull_any(levels, deadline - loop.time())
            if msgs and batch > len(msgs):
                msgs += await self._take_by_priority(levels, batch - len(msgs), loop.time() + NO_WAIT_ANSWER)
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

    async def _take_by_priority(self: Queue, levels: tuple[int, ...], batch: int, answer_by: float) -> list[Msg]:
        """Up to ``batch`` messages without waiting, from the highest priority lane down; no lane is
        asked after ``answer_by`` (the broker did not answer meanwhile)."""
        loop = asyncio.get_running_loop()
        msgs: list[Msg] = []
        for level in levels:
            msgs += await self._pull(batch - len(msgs), level=level, answer_by=max(answer_by, loop.time() + PULL_GRACE))
            if len(msgs) == batch or loop.time() >= answer_by:
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
            await self._confirm_many([(message._reply, b"+ACK") for message in messages], timeout, leased=messages)
        else:
            await self._send_unconfirmed([message._reply for message in messages])

    ack_many = delete_many

    async def _send_unconfirmed(self: Queue, replies: list[str]) -> None:
        self._check_open()
        for reply in replies:
            await self._nc.publish(reply, b"+ACK")
