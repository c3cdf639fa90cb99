"""Putting many messages on a queue at once, over a session: ``send_batch`` (as many stored as
can be) and ``put_many`` (one JetStream atomic batch: all or none).

What each does on the broker is in queue.py's docstring. ``put_many`` is sent again as a put is
(sending.py), whole, with a new batch id and the same Nats-Msg-Id on its commit.

``send_batch`` is a group commit where that pays: on a broker that fsyncs every write before
acknowledging it (``ENCLAVE_SYNC=always``, the default) a batch of MIN_GROUP or more goes as one
atomic batch, one fsync for all its messages (measured on nats-server 2.15.1: 26–29k msg/s against
4k for the same messages pipelined one by one), sent again whole as ``put_many`` is. A smaller one
is pipelined: the broker stages an atomic batch in a store of its own before it commits it, about
2 ms of its CPU a batch, more than the fsyncs of a few messages (bench.atomic, one stream: 8
pipelined cost it 0.15 ms a message, as one batch 0.27 ms, and went 1.4x as fast; at 16 the two
are even; at 32 the batch costs 0.08 ms against 0.13 and goes 2.2x as fast). If the broker refuses it
whole (the queue has no room for all of them, say), nothing was stored, and the messages are sent
again one by one so each gets its own outcome. Where the broker syncs on an interval, staging an
atomic batch costs the broker more than the fsyncs it saves, so the messages are pipelined: one
inbox counts their PubAcks; they carry no Nats-Msg-Id, so nothing is sent again. There the client's
CPU sets the pace, so the pipelined messages are written into the connection's buffer a chunk at a
time, bypassing ``nc.publish`` (pipe.py), and the broker starts on a chunk while the next is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from typing import Any, Optional

import nats.errors
from nats.aio.msg import Msg
from nats.nuid import NUID

from .. import envelope
from ..errors import (
    ACCOUNT_FULL,
    QUEUE_FULL,
    BrokerUnavailable,
    EnclaveError,
    MaybeStored,
    MessageTooLarge,
    QueueFull,
    SpecError,
)
from .grouping import MIN_GROUP
from .pipe import Pipe
from .sending import NO_STREAM, PutUnderWay, Sending, check_timeout
from .session import DEFAULT_TIMEOUT, RESEND_AFTER, Backoff, Session, unavailable
from .settings import Settings

SEND_WINDOW = 5000  #: unconfirmed publishes ``send_batch`` keeps in flight
MAX_PUT_MANY = 100  #: messages one put_many stores all or none
MAX_SEND_BATCH = 1000  #: messages one send_batch sends (the broker's most in one atomic batch)
LOST_QUIET = 0.5  #: seconds send_batch waits for more PubAcks once the connection was lost (the rest are lost with it)
ATOMIC_DISABLED = 10174  #: err_code of a batch message to a stream without allow_atomic
BATCH_INCOMPLETE = 10176  #: err_code of a batch's commit after the broker refused one of its messages
BATCH_DUPLICATE = 10201  #: err_code of an atomic batch carrying a Nats-Msg-Id the stream stored already


class _Refused(Exception):
    """The broker refused an atomic batch whole, so nothing of it was stored; ``error`` says why."""

    def __init__(self, error: EnclaveError) -> None:
        super().__init__(str(error))
        self.error = error


def _encoded(bodies: Iterable[Any], verb: str, most: int) -> list[tuple[bytes, Optional[dict[str, str]]]]:
    """Every body encoded (``SpecError`` naming the first that cannot be) before anything is sent,
    1 to ``most`` of them. A str, bytes or dict is one body, not a list of them: refused."""
    if isinstance(bodies, (str, bytes, bytearray, memoryview, dict)) or not isinstance(bodies, Iterable):
        message = f"must be a list of message bodies (got {type(bodies).__name__})"
        raise SpecError(f"{verb}: bodies {message}.", errors=[{"field": "bodies", "message": message}])
    bodies = list(bodies)
    if not 1 <= len(bodies) <= most:
        message = f"must hold 1 to {most} bodies (got {len(bodies)})"
        raise SpecError(f"{verb}: bodies {message}.", errors=[{"field": "bodies", "message": message}])
    encoded = []
    for index, body in enumerate(bodies):
        try:
            encoded.append(envelope.encode(body))
        except SpecError as exc:
            message = str(exc).removeprefix("body ").rstrip(".")
            raise SpecError(f"{verb}: bodies[{index}] {message}.",
                            errors=[{"field": f"bodies[{index}]", "message": message}]) from None
    return encoded


class Batching:
    """The batch putting verbs of one queue; single puts' rules come from ``sending``."""

    def __init__(self, session: Session, settings: Settings, sending: Sending) -> None:
        self._session = session
        self._settings = settings
        self._sending = sending

    async def send_batch(self, bodies: Iterable[Any], *, window: int = SEND_WINDOW,
                         timeout: float = DEFAULT_TIMEOUT) -> int:
        """Send 1 to 1000 messages; returns how many the broker stored. If any fails, raises once
        the rest have settled, saying how many went (the first failure's class: ``MessageTooLarge``
        for a body over the queue's limit, which is not sent; ``QueueFull`` when the queue filled
        up, each later message refused too). Raises ``MaybeStored`` when some were never confirmed
        (no answer within ``timeout``, or the connection was lost and nothing sent again was
        confirmed): sending those again may store some twice.

        A group commit on a broker that syncs every write (the module's docstring); elsewhere
        pipelined, up to ``window`` unconfirmed."""
        self._session.check_open()
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            message = f"must be a whole number of messages, at least 1 (got {window!r})"
            raise SpecError(f"send_batch: window {message}.", errors=[{"field": "window", "message": message}])
        check_timeout(timeout)
        encoded = _encoded(bodies, "send_batch", MAX_SEND_BATCH)
        if len(encoded) >= MIN_GROUP and await self._settings.synced_writes():
            limit = await self._settings.max_message_bytes()
            fits = [item for item in encoded if len(item[0]) <= limit]
            if len(fits) == len(encoded):  # an oversize one is reported by the pipelined path, as one by one
                try:
                    return len(await self._commit(encoded, timeout, answer_each=False))
                except _Refused:
                    pass  # nothing was stored: one by one, each message's own outcome
        return await self._pipelined(encoded, window, timeout)

    async def _pipelined(self, bodies: list[tuple[bytes, Optional[dict[str, str]]]], window: int,
                         timeout: float) -> int:
        """``send_batch`` one message after another, up to ``window`` unconfirmed. The PubAcks all
        come to one inbox of its own and are counted as they arrive (no future per message). The
        messages go out a chunk at a time (pipe.py), letting the loop run between chunks: the
        broker works on one while the next is built and the PubAcks so far are read, where a whole
        batch written at once left the broker idle while it was built and the client idle while
        the broker caught up. The connection lost, their PubAcks are lost with it, so it waits only
        LOST_QUIET seconds for more after a reconnect."""
        token, broken = self._session.broken_waiter("b")  # broken: failed by a permission denial or close
        inbox = f"{self._session.mux}.batch.{token}"  # two tokens: outside the reply wildcard's reach
        sent = acked = stored = skipped = 0
        errors: list[BaseException] = []
        progress = asyncio.Event()
        target = 0  #: wake the sender once no more than this many are unconfirmed
        lost = False  #: the connection was lost with PubAcks outstanding: wake on every one that still comes

        async def on_ack(msg: Msg) -> None:
            nonlocal acked, stored
            acked += 1
            if msg.headers or b'"error"' in msg.data:
                try:
                    self._sending.check_ack(msg)
                    stored += 1
                except EnclaveError as exc:
                    errors.append(exc)
            else:
                stored += 1
            if sent - acked <= target or lost:
                progress.set()

        async def settle(most: int) -> None:
            """Wait until at most ``most`` messages are unconfirmed."""
            nonlocal target, lost
            target = most
            reconnect = self._session.reconnect
            while sent - acked > most:
                progress.clear()
                waiter = asyncio.ensure_future(progress.wait())
                try:
                    done, _ = await asyncio.wait({waiter, broken, reconnect}, timeout=LOST_QUIET if lost else timeout,
                                                 return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if broken in done:
                    broken.result()  # raises PermissionDenied, Unauthorized or "Client is closed."
                if reconnect in done:
                    lost, reconnect = True, self._session.reconnect
                elif not done:
                    why = ("the connection to the broker was lost before it confirmed them" if lost
                           else f"the broker did not confirm them within {timeout:g} s")
                    refused = f"; {len(errors)} were refused, the first: {str(errors[0]).rstrip('.')}" if errors else ""
                    unsent = len(bodies) - sent - skipped
                    later = f"; the last {unsent} were not sent" if unsent else ""
                    raise MaybeStored(f"{stored} of {len(bodies)} messages were stored and {sent - acked} may have "
                                      f"been: {why}{refused}{later}. Sending those again may store some twice.")

        limit = await self._settings.max_message_bytes()
        sub = await self._session.nc.subscribe(inbox, cb=on_ack)
        try:
            pipe = Pipe(self._session.nc, self._session.subject, inbox)
            for data, content in bodies:
                if len(data) > limit:
                    errors.append(MessageTooLarge(
                        f"a message of {len(data)} bytes is over the queue's max_message_bytes ({limit})"))
                    skipped += 1
                    continue
                sent += 1
                pipe.add(data, content)
                if sent - acked >= window:
                    await pipe.flush()
                    await settle(window - 1)
                elif pipe.full:
                    await pipe.flush()
                    await asyncio.sleep(0)  # the writer sends the chunk, and PubAcks are read, while the next is built
            await pipe.flush()
            await settle(0)
        finally:
            self._session.stop_waiting(token, broken)
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        if errors:
            first = errors[0]
            raise type(first)(f"{stored} of {stored + len(errors)} messages were sent; "
                              f"the first failure: {first}")
        return stored

    async def put_many(self, bodies: Iterable[Any], *, timeout: float = DEFAULT_TIMEOUT) -> list[int]:
        """Store 1 to 100 messages all or none, as one atomic batch; returns their sequences (ids)
        in order once the broker has stored every one. Each body is encoded as ``send`` does and
        must fit the queue's ``max_message_bytes``: an oversize one is refused before anything is
        published (``MessageTooLarge`` naming it), and whatever the broker refuses fails the whole
        batch. Raises ``SpecError`` for no bodies or more than 100, ``QueueFull`` when the batch
        does not fit under ``max_messages`` (nothing stored then either)."""
        self._session.check_open()
        check_timeout(timeout)
        encoded = _encoded(bodies, "put_many", MAX_PUT_MANY)
        limit = await self._settings.max_message_bytes()
        for index, (data, _) in enumerate(encoded):
            if len(data) > limit:
                raise MessageTooLarge(f"bodies[{index}] is {len(data)} bytes; the queue accepts at most {limit} "
                                      "(max_message_bytes). Nothing was put.")
        try:
            return await self._commit(encoded, timeout, answer_each=True)
        except _Refused as refused:
            raise refused.error from None

    async def _commit(self, encoded: list[tuple[bytes, Optional[dict[str, str]]]], timeout: float, *,
                      answer_each: bool) -> list[int]:
        """Store ``encoded`` as one atomic batch, sent again whole by put's rules; their sequences.
        ``answer_each``: every message is answered (so a refusal names the one refused), else
        only the commit. Raises ``_Refused`` when the broker refused the batch (nothing stored)."""
        sending = PutUnderWay(self._sending.new_id(), timeout, (await self._settings.stream()).dedupe_window)
        loop = asyncio.get_running_loop()
        token, broken = self._session.broken_waiter("a")  # broken: failed by a permission denial or close
        inbox = f"{self._session.mux}.atomic.{token}"  # .<attempt>.<n> per message: outside the reply wildcard's reach
        committed: asyncio.Future[int] = loop.create_future()  #: the attempt whose commit was answered
        replies: dict[int, dict[int, Msg]] = {}  #: each attempt's non-empty answers by batch position (1-based)
        last = len(encoded)

        async def on_reply(msg: Msg) -> None:
            attempt, position = (int(part) for part in msg.subject.rsplit(".", 2)[1:])
            if msg.data or msg.headers:  # an empty answer: the message joined the batch
                replies.setdefault(attempt, {})[position] = msg
            if position == last and not committed.done():
                committed.set_result(attempt)

        sub = await self._session.nc.subscribe(f"{inbox}.*.*", cb=on_reply)
        attempt = 0
        backoff = Backoff()
        try:
            while True:  # the whole batch again, a new batch id, the same Nats-Msg-Id (publish_answer's rules)
                now = loop.time()
                reconnect = self._session.reconnect
                if sending.may_resend(now):
                    attempt += 1
                    if sending.first_sent is None:
                        sending.first_sent = now
                    await self._publish_batch(encoded, f"{inbox}.{attempt}", sending.msg_id, answer_each)
                done, _ = await asyncio.wait({committed, broken, reconnect}, timeout=max(min(
                    sending.deadline - now, RESEND_AFTER), 0.001), return_when=asyncio.FIRST_COMPLETED)
                if broken in done:
                    broken.result()  # raises PermissionDenied, Unauthorized or "Client is closed."
                pause = 0.0
                if committed.done():
                    answers = replies.get(committed.result(), {})
                    if not any(unavailable(m) for m in answers.values()):
                        break
                    if not sending.unanswered:  # no stream took part of it: nothing sent so far was stored
                        sending.first_sent = None
                    pause = backoff.next()
                    committed = loop.create_future()
                else:
                    sending.unanswered = True
                    sending.lost = sending.lost or reconnect.done()
                if loop.time() + pause >= sending.deadline:
                    if sending.unanswered:
                        raise sending.unconfirmed(f"the batch of {last} (all of it or none)", keyed=False)
                    raise BrokerUnavailable(NO_STREAM.format(subject=self._session.subject))
                await asyncio.sleep(pause)
        finally:
            self._session.stop_waiting(token, broken)
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        answers = replies[committed.result()]
        if _err_code(answers[last]) == BATCH_DUPLICATE:  # an earlier attempt was stored; its answer was lost
            return await self._stored_batch(sending, last)
        try:
            return self._batch_outcome(answers, last)
        except EnclaveError as exc:
            raise _Refused(exc) from None

    async def _publish_batch(self, encoded: list[tuple[bytes, Optional[dict[str, str]]]], reply: str,
                             msg_id: str, answer_each: bool) -> None:
        """Publish one atomic batch; message n is answered on ``<reply>.<n>`` (with ``answer_each``;
        else only the commit is, and a refused message fails the commit). Its commit carries
        ``msg_id``: the stream refuses a batch holding a Nats-Msg-Id it stored already, whole
        (err_code 10201), so a batch sent again after its first was stored stores nothing. A new
        batch id each time: a half-sent batch is abandoned by the broker, never completed by another."""
        batch_id = NUID().next().decode()
        for position, (data, content) in enumerate(encoded, 1):
            headers = {**(content or {}), "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(position)}
            if position == len(encoded):
                headers.update({"Nats-Batch-Commit": "1", "Nats-Msg-Id": msg_id})
            answer = f"{reply}.{position}" if answer_each or position == len(encoded) else ""
            await self._session.nc.publish(self._session.subject, data, reply=answer, headers=headers)

    async def _stored_batch(self, sending: PutUnderWay, last: int) -> list[int]:
        """The ids of a batch stored by an earlier attempt whose answer was lost: its commit's
        sequence, asked by publishing an empty message with the commit's Nats-Msg-Id and a
        Nats-Expected-Last-Msg-Id no message has. The broker checks the id first and answers a known
        one as a duplicate with its sequence; an unknown one would be refused (err_code 10070), so
        nothing is stored either way (measured on nats-server 2.15.1)."""
        try:
            answer = await self._sending.publish_answer(self._session.subject, b"", {"Nats-Expected-Last-Msg-Id": NUID().next().decode()},
                                                sending)
        except BrokerUnavailable:
            answer = {}
        if not answer.get("duplicate"):
            raise BrokerUnavailable(f"The batch of {last} was stored, but the broker did not say at which sequences "
                                    "in time; do not put it again.")
        self._sending.seen(int(answer["seq"]))
        return list(range(int(answer["seq"]) - last + 1, int(answer["seq"]) + 1))

    def _batch_outcome(self, replies: dict[int, Msg], last: int) -> list[int]:
        """The sequences of a committed batch, or the error of its first refused message."""
        for position in sorted(replies):
            try:
                sequence = self._sending.check_ack(replies[position])
            except EnclaveError as exc:
                code = _err_code(replies[position])
                if code == ATOMIC_DISABLED:
                    raise EnclaveError(f"The queue on '{self._session.subject}' does not take atomic batches yet "
                                       "(its stream lacks allow_atomic until the controller updates it); "
                                       "nothing was put.") from None
                if code == BATCH_INCOMPLETE:
                    raise EnclaveError(f"The broker refused the batch of {last}: {exc} Nothing was put.") from None
                if code in (QUEUE_FULL, ACCOUNT_FULL):
                    limit = "max_messages" if code == QUEUE_FULL else "max_bytes"
                    raise QueueFull(f"The queue on '{self._session.subject}' has no room for {last} more messages "
                                    f"({limit}); none was put.") from None
                where = f"bodies[{position - 1}] was refused: " if position < last else ""
                raise type(exc)(f"{where}{exc.message.rstrip('.')}; none of the {last} messages was put.") from None
            if position == last:
                count = int(json.loads(replies[position].data).get("count", 0))
                if count != last:
                    raise EnclaveError(f"The broker stored a batch of {count}, not {last}.")
                return list(range(sequence - count + 1, sequence + 1))
        raise EnclaveError(f"The broker sent no acknowledgement for the batch of {last}.")


def _err_code(msg: Msg) -> Optional[int]:
    with contextlib.suppress(ValueError, AttributeError):
        return json.loads(msg.data).get("error", {}).get("err_code")
    return None
