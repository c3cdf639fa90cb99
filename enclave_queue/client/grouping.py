"""Group commit of concurrent puts on a broker that syncs every write (``ENCLAVE_SYNC=always``):
puts made while another is on its way go together as one JetStream atomic batch, so the broker
fsyncs once for all of them instead of once each.

A put goes straight out while fewer than PIPELINE of this queue are on their way, so a lone put
waits for nobody, and a steady sender's puts stream into the broker rather than each waiting for
the last one's PubAck. Past that, later puts queue up; once one on its way is answered, everything
queued (up to the broker's 1000 a batch) goes as one batch, each message with its own headers and Nats-Msg-Id. The
commit's answer names the batch's last sequence, so each put learns its own. A batch refused or
not answered in time (or across a reconnect) hands each put back to be sent alone by put's rules
(sending.py): the batch was stored whole or not at all, and a copy of a stored message is
answered as the duplicate of its Nats-Msg-Id, with its sequence. A repeated dedupe key makes the
broker refuse the whole batch the same way; alone, that put is answered as the duplicate it is.
Fewer than MIN_GROUP queued puts go alone instead, each as put's own publish: the broker stages
and checks an atomic batch before it commits it, and small batches cost it more than the fsyncs
they save (measured: at an open-loop 1,000 puts a second on the default stack, where most groups
are of a few, a waiting get fell seconds behind with every group batched, and kept up with none).
Under real concurrency the puts that queue behind one on its way are many, and go together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, Optional

import nats.errors
from nats.nuid import NUID

from .session import RESEND_AFTER, Session, unavailable

MAX_GROUP = 1000  #: messages one atomic batch holds (the broker's max_msgs for a batch)
MIN_GROUP = 32  #: fewer queued puts than this go alone (see the module's docstring)
#: puts of a queue on their way alone before the next waits to go in a batch: a few in flight keep
#: a steady sender's puts streaming into the broker instead of each waiting for the last's PubAck
PIPELINE = 4
Answer = dict[str, Any]  #: the broker's answer to a publish (a PubAck), as ``publish_answer`` returns it


class _Waiting:
    """One put queued for the next batch; ``answer`` resolves to its PubAck, or None: send it alone."""

    __slots__ = ("subject", "data", "headers", "sending", "answer")

    def __init__(self, subject: str, data: bytes, headers: dict[str, str], sending: Any) -> None:
        self.subject = subject
        self.data = data
        self.headers = headers
        self.sending = sending  #: its PutUnderWay (sending.py): the Nats-Msg-Id, the deadline, the copies sent
        self.answer: asyncio.Future[Optional[Answer]] = asyncio.get_running_loop().create_future()


class GroupCommit:
    """The puts of one queue on their way, and those waiting to go together."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._on_way = 0  #: puts sent alone and batches, not answered yet
        self._queued: list[_Waiting] = []
        self._nuid = NUID()

    async def put(self, subject: str, data: bytes, headers: dict[str, str], sending: Any,
                  alone: Callable[[], Awaitable[Answer]]) -> Answer:
        """The broker's answer to one put (a PubAck or its refusal), as ``alone()`` gives it."""
        if not self._queued and self._on_way < PIPELINE:
            return await self._alone(alone)
        waiting = _Waiting(subject, data, headers, sending)
        self._queued.append(waiting)
        token = self._session.token("group")
        self._session.waiting[token] = waiting.answer  # failed by close ("Client is closed."): never sent
        try:
            answer = await waiting.answer
        finally:
            self._session.waiting.pop(token, None)
            with contextlib.suppress(ValueError):
                self._queued.remove(waiting)  # cancelled before its batch went
        return answer if answer is not None else await self._alone(alone)

    async def _alone(self, alone: Callable[[], Awaitable[Answer]]) -> Answer:
        self._on_way += 1
        try:
            return await alone()
        finally:
            self._on_way -= 1
            self._next()

    def _next(self) -> None:
        """A put or a batch was answered: send what queued up meanwhile, as one batch."""
        if self._queued and not self._session.closed:
            if len(self._queued) < MIN_GROUP:
                few, self._queued = self._queued, []
                for waiting in few:  # each sent alone by put (an answer of None)
                    if not waiting.answer.done():
                        waiting.answer.set_result(None)
                return
            group, self._queued = self._queued[:MAX_GROUP], self._queued[MAX_GROUP:]
            self._on_way += 1
            self._session.spawn(self._commit(group))

    async def _commit(self, group: list[_Waiting]) -> None:
        """Publish ``group`` as one atomic batch and give each put its answer (None: send it alone)."""
        answers: list[Optional[Answer]] = [None] * len(group)
        token, future = self._session.new_waiter()
        try:
            loop = asyncio.get_running_loop()
            reconnect = self._session.reconnect
            batch_id, now = self._nuid.next().decode(), loop.time()
            for position, waiting in enumerate(group, 1):
                headers = {**waiting.headers, "Nats-Msg-Id": waiting.sending.msg_id,
                           "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(position)}
                reply = ""
                if position == len(group):
                    headers["Nats-Batch-Commit"] = "1"
                    reply = f"{self._session.mux}.{token}"
                if waiting.sending.first_sent is None:
                    waiting.sending.first_sent = now
                await self._session.nc.publish(waiting.subject, waiting.data, reply=reply, headers=headers)
            wait = min(RESEND_AFTER, min(w.sending.deadline for w in group) - now)
            await asyncio.wait({future, reconnect}, timeout=max(wait, 0.001), return_when=asyncio.FIRST_COMPLETED)
            if future.done() and not future.cancelled() and future.exception() is None \
                    and not unavailable(future.result()):
                commit = json.loads(future.result().data)
                if not commit.get("error") and int(commit.get("count", 0)) == len(group):
                    first = int(commit["seq"]) - len(group) + 1
                    answers = [{"stream": commit.get("stream"), "seq": first + n} for n in range(len(group))]
            elif not future.done():
                for waiting in group:  # may be stored: a copy sent alone is answered as its duplicate
                    waiting.sending.unanswered = True
                    waiting.sending.lost = waiting.sending.lost or reconnect.done()
        except (nats.errors.Error, ValueError, KeyError, TypeError):
            pass  # each is sent alone, which meets the same trouble and says what it is
        finally:
            self._session.waiting.pop(token, None)
            future.cancel()
            for waiting, answer in zip(group, answers, strict=True):
                if not waiting.answer.done():
                    waiting.answer.set_result(answer)
            self._on_way -= 1
            self._next()
