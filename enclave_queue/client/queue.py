"""The data-plane SDK: send, receive, delete, nack, reject and extend on one queue, over the broker.

What each verb does on the broker (JetStream):

- ``send`` publishes to the queue's subject and returns once the stream has stored the message
  (its PubAck), so a sent message is durable. ``send_batch`` pipelines many publishes.
  ``send(body, dedupe_key=…)`` sets ``Nats-Msg-Id``: within the queue's ``dedupe_window_seconds``
  the broker stores a repeated key once and answers with the first message's sequence. A queue
  holding ``max_messages`` refuses new messages (``discard: new``): ``QueueFull``, not retried.
- ``put_many`` stores 1–100 messages all or none: one JetStream atomic batch (``Nats-Batch-Id``,
  ``Nats-Batch-Sequence``, ``Nats-Batch-Commit: 1`` on the last; stream ``allow_atomic``). The
  broker stores nothing until the commit, and nothing at all if it refused any message of it.
- ``len`` and ``peek`` only read: ``STREAM.INFO`` / ``CONSUMER.INFO`` and ``DIRECT.GET`` of the
  queue's own stream. Nothing is leased and no receive is counted.
- ``receive`` pulls from the queue's durable consumer. A received message is *leased*: hidden
  from other receivers for the visibility timeout (``ack_wait``). If it is not deleted in time
  it comes back, with ``receive_count`` one higher.
- ``Message.delete`` acknowledges (``+ACK``); the message leaves the queue for good. It returns
  once the broker has confirmed. ``Queue.delete_many`` does the same for many in one round trip.
  With ``confirm=False`` neither waits (a plain NATS ``ack()``): the fastest way to consume, at
  the price that a delete lost on the way brings its message back after the lease.
- ``Message.nack(delay=, error=)`` hands the message back now or after ``delay`` seconds
  (``-NAK``); without a delay, the queue's ``retry_backoff_seconds`` schedule decides (JetStream
  applies its backoff only to timeouts, so the SDK applies it to nacks). It counts as a receive;
  after the last one the message is dead-lettered. ``error`` is kept (a note the broker stores
  for the control plane) and travels with the dead letter as its last error.
- ``Message.reject(error=)`` dead-letters the message now: the control plane copies it to the
  dead-letter queue, then deletes it (a ``+TERM`` would delete it first and lose it).
- ``Message.extend()`` resets the lease's clock (``+WPI``, "work in progress").

Across a broker restart (the connection comes back by itself): every put carries a
``Nats-Msg-Id`` (its dedupe key, or one the SDK makes) and is sent again when the connection came
back before its PubAck, so it is stored once and returns that id; if none was confirmed in time it
raises ``MaybeStored``, whose ``dedupe_key`` puts it again safely. ``put_many`` sends its batch
again the same way; ``send_batch`` (no keys: the broker keeps each key in memory for the dedupe
window) says how many may have been stored. Pull requests, which a restarted broker forgets, are
sent again too (receiving.py), and so are acknowledgements not confirmed yet (``_confirm_many``),
until their timeout, while their message's lease lasts; an ``+ACK`` of a delivery the restarted
broker forgot raises ``Conflict``.

Errors: a refused operation (a permissions violation) raises ``PermissionDenied`` at once, not
after a timeout; wrong credentials raise ``Unauthorized``; an oversize message
``MessageTooLarge``; a full queue ``QueueFull``; a bad dedupe key ``SpecError``. A closed queue
raises ``RuntimeError("Client is closed.")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.nuid import NUID

from .. import envelope
from ..errors import (
    ACCOUNT_FULL,
    QUEUE_FULL,
    BrokerUnavailable,
    Conflict,
    EnclaveError,
    MaybeStored,
    MessageTooLarge,
    PermissionDenied,
    QueueFull,
    SpecError,
    Unauthorized,
    from_problem,
    publish_refused,
)
from ..names import DESK_SUBJECT, ERRORS_SUBJECT, LANES, NOTES_SUBJECT, REJECT_SUBJECT
from ..spec import HEADER_ROOM, check_dedupe_key, scheduled_delay
from .credentials import Credentials
from .inspecting import Inspecting
from .message import Message
from .receiving import Receiving, _Pull

DEFAULT_TIMEOUT = 5.0  #: seconds to wait for the broker to confirm an operation
SEND_WINDOW = 5000  #: unconfirmed publishes ``send_batch`` keeps in flight
MAX_PUT_MANY = 100  #: messages one put_many stores all or none
MAX_SEND_BATCH = 1000  #: messages one send_batch sends
RETRY_WINDOW = 3.0  #: seconds to keep asking a request nobody answered (a reload)
SCHEDULE_TTL = 30.0  #: seconds the queue's retry schedule and size limit are cached
RESEND_AFTER = 2.0  #: seconds without a PubAck before a put is sent again (with the same Nats-Msg-Id)
DEDUPE_MARGIN = 0.5  #: seconds before its first copy leaves the dedupe window that a put is no longer sent again
#: seconds before the end of a message's lease after which an acknowledgement of it is not sent again
LEASE_MARGIN = 0.25
SILENT_AFTER = 0.5  #: seconds an +ACK sent again after a reconnect may go unanswered before its delivery is checked
LOST_QUIET = 0.5  #: seconds send_batch waits for more PubAcks once the connection was lost (the rest are lost with it)

_STATUS = "Status"
ATOMIC_DISABLED = 10174  #: err_code of a batch message to a stream without allow_atomic
BATCH_INCOMPLETE = 10176  #: err_code of a batch's commit after the broker refused one of its messages
BATCH_DUPLICATE = 10201  #: err_code of an atomic batch carrying a Nats-Msg-Id the stream stored already


class _Sending:
    """One put under way: the Nats-Msg-Id every copy of it carries, when it must be settled, and
    what became of the copies sent so far."""

    __slots__ = ("msg_id", "deadline", "timeout", "window", "first_sent", "unanswered", "lost")

    def __init__(self, msg_id: str, timeout: float, window: float) -> None:
        self.msg_id = msg_id
        self.timeout = timeout
        self.deadline = asyncio.get_running_loop().time() + timeout
        self.window = window  #: seconds the stream remembers a Nats-Msg-Id (its duplicate_window)
        self.first_sent: Optional[float] = None  #: when the oldest copy that may be stored was sent
        self.unanswered = False  #: a copy went unanswered: it may be stored
        self.lost = False  #: the connection was lost while a copy was unanswered

    def may_resend(self, now: float) -> bool:
        """Whether a copy sent now would still be recognised as the first one's duplicate."""
        return self.first_sent is None or now - self.first_sent < self.window - DEDUPE_MARGIN

    def unconfirmed(self, what: str = "the message", *, keyed: bool = True) -> MaybeStored:
        """The error of a put no copy of which was confirmed in time. ``keyed``: the caller can put
        it again with ``msg_id`` as its dedupe key (put_many takes none)."""
        why = (f"the connection to the broker was lost, and no copy sent again was confirmed within {self.timeout:g} s"
               if self.lost else f"the broker did not confirm it within {self.timeout:g} s")
        if keyed:
            return MaybeStored(f"{what[0].upper()}{what[1:]} may have been stored: {why}. Putting it again with "
                               f"dedupe_key={self.msg_id!r} is safe within the queue's dedupe window.",
                               dedupe_key=self.msg_id)
        return MaybeStored(f"{what[0].upper()}{what[1:]} may have been stored: {why}. Putting it again may "
                           "store it twice.")


class Queue(Receiving, Inspecting):
    """One queue, over one connection authenticated as the queue's own user."""

    def __init__(self, nc: Client, credentials: Credentials) -> None:
        self._nc = nc
        self.credentials = credentials
        self.subject = credentials.subject
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{credentials.stream}.{credentials.consumer}"
        self._mux = f"{credentials.inbox_prefix}.{NUID().next().decode()}"
        self._nuid = NUID()  #: every put's Nats-Msg-Id unless it has a key (one a queue: a queue lives on one loop)
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Msg] | _Pull] = {}
        self._sub: Any = None
        self._closed = False
        self._broken: Optional[EnclaveError] = None  #: why the broker cut us off for good
        self._closing: Optional[asyncio.Task[None]] = None
        self._prefetches: set[asyncio.Task[list[Message]]] = set()  #: receives ``messages()`` started early
        self._settings: dict[str, tuple[float, Any]] = {}  #: "consumer" and "stream": (valid until, value)
        self._fetching: dict[str, asyncio.Task[Any]] = {}  #: their reads under way
        self._keepers: set[asyncio.Task[None]] = set()  #: lease keepers of messages with a lease of their own
        self._last_seq = 0  #: the last sequence a PubAck named: a delayed put's first guess
        #: resolved at the next reconnect: answers to requests sent before it are lost with the old connection
        self._reconnect: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def _start(self) -> None:
        self._sub = await self._nc.subscribe(f"{self._mux}.*", cb=self._on_reply)
        for key in ("consumer", "stream"):  # read ahead: a first receive or put need not wait for them
            self._refresh(key)

    # -- replies and failures ---------------------------------------------------------------------

    async def _on_reply(self, msg: Msg) -> None:
        waiter = self._waiting.pop(msg.subject[len(self._mux) + 1:], None)
        if isinstance(waiter, asyncio.Future) and not waiter.done():
            waiter.set_result(msg)

    def _reconnected(self) -> None:
        """The connection is back (nats-py resubscribed and flushed what was buffered): wake whatever
        waits for an answer to something sent before, which the broker may never have seen (a
        restarted broker forgets pull requests too), so it is sent again."""
        current, self._reconnect = self._reconnect, asyncio.get_running_loop().create_future()
        if not current.done():
            current.set_result(None)

    def _fail_all(self, exc: Exception) -> None:
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            future = waiter.done if isinstance(waiter, _Pull) else waiter
            if not future.done():
                future.set_exception(exc)

    def _denied(self, text: str) -> None:
        self._fail_all(PermissionDenied(f"The broker refused this queue's user: {text}."))

    def _revoked(self) -> None:
        """The broker no longer accepts these credentials (queue deleted, password changed):
        stop reconnecting and fail everything with Unauthorized."""
        self._broken = Unauthorized(f"The broker refused user '{self.credentials.username}'; "
                                    "the queue was deleted or its credentials changed.")
        self._fail_all(self._broken)
        if self._closing is None and not self._nc.is_closed:
            self._closing = asyncio.get_running_loop().create_task(self._nc.close())

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Client is closed.")
        if self._broken is not None:
            raise self._broken

    def _new_waiter(self) -> tuple[str, asyncio.Future[Msg]]:
        token = str(next(self._ids))
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        return token, future

    async def _await(self, token: str, future: asyncio.Future[Any], timeout: float, what: str) -> Any:
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            self._waiting.pop(token, None)
            raise BrokerUnavailable(f"The broker did not confirm {what} within {timeout:g} s.") from None

    async def _confirm(self, reply: str, payload: bytes, timeout: float = DEFAULT_TIMEOUT, *,
                       message: Optional[Message] = None, verb: str = "acked") -> None:
        await self._confirm_many([(reply, payload)], timeout, leased=None if message is None else [message], verb=verb)

    async def _confirm_many(self, acks: list[tuple[str, bytes]], timeout: float = DEFAULT_TIMEOUT, *,
                            leased: Optional[list[Message]] = None, verb: str = "acked") -> None:
        """Send acknowledgements (``+ACK``, ``-NAK``, ``+WPI``) and wait until the broker confirmed
        every one, for up to ``timeout`` seconds. The broker takes a repeat as it took the first (a
        second ``+ACK``, ``-NAK`` or ``+WPI`` of a message is answered and changes nothing more;
        a ``-NAK`` with a delay starts its delay again), so one is sent again, the same payload to
        the same reply subject: when the broker did not take it ("no responders", a configuration
        reload), when the connection came back before its answer (an answer to the old connection
        is lost with it, and a kill -9 loses what it had not read), and after RESEND_AFTER without
        an answer.

        ``leased``: the message of each, whose lease gates sending it again: a copy is not sent
        again once its lease is less than LEASE_MARGIN from its end (the message may be someone
        else's by then): ``Conflict``. A restarted broker may have forgotten handing a message out
        (docs/operations.md, "Failures and what happens"): it ignores an ``+ACK`` of it without an
        answer, so an ``+ACK`` still unanswered SILENT_AFTER after the connection came back is
        checked against its consumer's delivered sequence, and one of a message the consumer has
        not delivered since its restart raises ``Conflict`` (it will be delivered again). The rest
        raise ``BrokerUnavailable`` at ``timeout``."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending: dict[int, tuple[str, bytes]] = dict(enumerate(acks))  #: not confirmed yet
        again: set[int] = set(pending)  #: to send (again) now
        sent_at: dict[int, float] = {}
        failures: list[BaseException] = []  #: PermissionDenied, Unauthorized, RuntimeError
        refused: dict[int, str] = {}  #: ``lease`` (ran out before a copy could be sent again) or ``forgotten``
        waiters: list[tuple[str, asyncio.Future[Msg]]] = []
        wake: asyncio.Future[None] = loop.create_future()  #: something to do: a failure, a 503, all confirmed
        back_at: Optional[float] = None  #: when the connection came back with acknowledgements unanswered
        delay = 0.01

        def answered(index: int, future: asyncio.Future[Msg]) -> None:
            if future.cancelled() or index not in pending:
                return
            if future.exception() is not None:
                failures.append(future.exception())  # type: ignore[arg-type]
            elif future.result().headers and future.result().headers.get(_STATUS) == "503":
                again.add(index)
            else:
                del pending[index]
            if not wake.done() and (failures or again or not pending):
                wake.set_result(None)

        try:
            while True:
                reconnect = self._reconnect
                batch, now = sorted(again), time.monotonic()
                again.clear()
                for index in batch:
                    if index not in pending:
                        continue
                    if index in sent_at and leased is not None and leased[index]._lease_end - now < LEASE_MARGIN:
                        del pending[index]
                        refused[index] = "lease"
                        continue
                    reply, payload = pending[index]
                    token, future = self._new_waiter()
                    waiters.append((token, future))
                    future.add_done_callback(functools.partial(answered, index))
                    sent_at[index] = loop.time()
                    await self._nc.publish(reply, payload, reply=f"{self._mux}.{token}")
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
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 0.25)
                now = loop.time()
                if reconnect.done():
                    again.update(pending)
                    back_at = now
                    continue
                if back_at is not None and now >= back_at + SILENT_AFTER:
                    back_at = None
                    silent = {index: reply for index, (reply, payload) in pending.items() if payload == b"+ACK"}
                    for index in await self._forgotten(silent, deadline):
                        if pending.pop(index, None) is not None:
                            refused[index] = "forgotten"
                again.update(index for index in pending if now - sent_at[index] >= RESEND_AFTER)
        finally:
            for token, future in waiters:
                self._waiting.pop(token, None)
                future.cancel()
        if not pending and not refused:
            return
        raise self._unsettled(len(acks), pending, refused, leased, verb, timeout)

    async def _forgotten(self, replies: dict[int, str], deadline: float) -> set[int]:
        """Of these acknowledgements (by index: the reply subject of each message), those of messages
        their consumer has not handed out since the broker restarted: its delivered stream sequence
        is below theirs (the broker forgot delivering them: it writes a consumer's state within
        about 100 ms). Empty when the broker does not answer."""
        by_consumer: dict[tuple[str, str], dict[int, int]] = {}
        for index, reply in replies.items():
            tokens = reply.split(".")
            if len(tokens) > 9:  # the v2 form carries a domain and an account hash first
                tokens = tokens[:2] + tokens[4:]
            by_consumer.setdefault((tokens[2], tokens[3]), {})[index] = int(tokens[5])
        found: set[int] = set()
        for (stream, consumer), sequences in by_consumer.items():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                reply = await self._request(f"$JS.API.CONSUMER.INFO.{stream}.{consumer}", b"", timeout=remaining)
                delivered = int(json.loads(reply.data)["delivered"]["stream_seq"])
            except (EnclaveError, ValueError, KeyError, TypeError):
                continue
            found.update(index for index, sequence in sequences.items() if sequence > delivered)
        return found

    @staticmethod
    def _unsettled(count: int, pending: dict[int, tuple[str, bytes]], refused: dict[int, str],
                   leased: Optional[list[Message]], verb: str, timeout: float) -> EnclaveError:
        """The error of acknowledgements not confirmed: ``Conflict`` for one whose lease ran out
        before it could be sent again or whose delivery the broker forgot, else ``BrokerUnavailable``."""
        def name(index: int) -> str:
            return f"message {leased[index].id}" if leased is not None else "the message"

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
            if count > 1:
                text = f"{len(refused) + len(pending)} of {count} messages were not {verb}; the first: {text}"
            return Conflict(text)
        return BrokerUnavailable(f"The broker did not confirm {len(pending)} acknowledgement(s) within {timeout:g} s.")

    async def _request(self, subject: str, payload: bytes, timeout: float = DEFAULT_TIMEOUT, *,
                       resend: bool = False) -> Msg:
        """A request through the reply multiplexer (so a permission denial fails it at once).
        "No responders" is asked again for up to RETRY_WINDOW seconds: the broker answers so for
        a moment during a configuration reload. The last answer is returned as it is. ``resend``
        (for a request that may be taken twice): also asked again when the connection came back
        before its answer, within ``timeout`` in all."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETRY_WINDOW
        until = loop.time() + timeout
        delay = 0.01
        while True:
            self._check_open()
            token, future = self._new_waiter()
            reconnect = self._reconnect
            await self._nc.publish(subject, payload, reply=f"{self._mux}.{token}")
            if resend:
                await asyncio.wait({future, reconnect}, timeout=max(until - loop.time(), 0.001),
                                   return_when=asyncio.FIRST_COMPLETED)
                if not future.done():
                    self._waiting.pop(token, None)
                    future.cancel()
                    if reconnect.done() and loop.time() < until:
                        continue
                    raise BrokerUnavailable(f"The broker did not confirm the request to {subject} within "
                                            f"{timeout:g} s.")
                reply = future.result()
            else:
                reply = await self._await(token, future, timeout, f"the request to {subject}")
            unanswered = bool(reply.headers) and reply.headers.get(_STATUS) == "503"
            if not unanswered or loop.time() + delay > deadline:
                return reply
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def _note_error(self, message_id: int, error: str) -> None:
        reply = await self._request(f"{ERRORS_SUBJECT}.{message_id}", envelope.one_line(error).encode(),
                                    resend=True)  # a note stored twice reads as once
        if reply.headers and reply.headers.get(_STATUS) == "503":
            raise BrokerUnavailable("The broker did not store the error note (no stream for it yet).")

    async def _reject(self, sequence: int, message_id: int, receive_count: int, error: Optional[str]) -> str:
        body = {"seq": sequence, "id": message_id, "receive_count": receive_count, "error": error,
                "subject": self.subject}
        reply = await self._request(REJECT_SUBJECT, json.dumps(body).encode(), timeout=10)
        if reply.headers and reply.headers.get(_STATUS) == "503":
            raise BrokerUnavailable("The control plane is not running; the message was not rejected.")
        answer = json.loads(reply.data)
        if "error" in answer:
            raise EnclaveError(f"The message was not rejected: {answer['error']}")
        return str(answer["result"])

    async def _desk(self, verb: str, body: dict[str, Any], timeout: float = 10.0) -> Any:
        """Ask the control plane's desk about this queue (controller/desk.py); its result, or the
        error it answered as the same exception class the HTTP API would raise."""
        reply = await self._request(f"{DESK_SUBJECT}.{verb}", json.dumps(body).encode(), timeout=timeout)
        if reply.headers and reply.headers.get(_STATUS) == "503":
            raise BrokerUnavailable(f"The control plane is not running; '{verb}' was not done.")
        answer = json.loads(reply.data)
        if "error" in answer:
            problem = answer["error"]
            raise from_problem(int(problem.get("status", 500)), problem)
        return answer["result"]

    async def _note(self, note: dict[str, Any]) -> None:
        """Tell the control plane about a put it must act on (stored durably: controller/desk.py).
        A note the broker could not store is given up after RETRY_WINDOW: the message itself is
        stored already, and a worker's SDK still drops it on receipt after its deadline."""
        with contextlib.suppress(EnclaveError):
            await self._request(NOTES_SUBJECT, json.dumps(note).encode())

    # -- the queue's settings, cached ----------------------------------------------------------

    def _refresh(self, key: str) -> asyncio.Task[Any]:
        """Read setting ``key`` ("consumer" or "stream") from the broker in a task of its own (one
        at a time), which stores it for SCHEDULE_TTL seconds."""
        task = self._fetching.get(key)
        if task is None or task.done():
            task = asyncio.ensure_future(self._fetch(key))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning
            self._fetching[key] = task
        return task

    async def _fetch(self, key: str) -> Any:
        read = self._read_consumer if key == "consumer" else self._read_stream
        value = await read()
        self._settings[key] = (time.monotonic() + SCHEDULE_TTL, value)
        return value

    async def _setting(self, key: str) -> Any:
        """A setting as last read: read now if never read; once stale, the stale value is used while
        a fresh one is read in the background, so no receive or put waits for it. ``connect``
        starts both reads, so the first receive after it does not wait either."""
        found = self._settings.get(key)
        if found is None:
            try:
                return await asyncio.shield(self._refresh(key))
            except BrokerUnavailable:  # the read ahead at connect met a moment the broker did not answer
                return await asyncio.shield(self._refresh(key))
        if time.monotonic() > found[0]:
            self._refresh(key)
        return found[1]

    async def _read_consumer(self) -> dict[str, Any]:
        info = await self._info(f"CONSUMER.INFO.{self.credentials.stream}.{self.credentials.consumer}")
        config = info.get("config", {})
        return {"ack_wait": int(config.get("ack_wait", 30 * 10**9)) / 1e9,
                "backoff": [step / 1e9 for step in (config.get("backoff") or [])],
                "max_deliver": int(config.get("max_deliver", -1))}

    async def _read_stream(self) -> tuple[int, bool, float]:
        config = (await self._info(f"STREAM.INFO.{self.credentials.stream}"))["config"]
        lanes = envelope.lane_subject(self.subject, LANES[0]) in config.get("subjects", [])
        return int(config["max_msg_size"]) - HEADER_ROOM, lanes, int(config.get("duplicate_window", 0)) / 1e9

    async def _consumer(self) -> dict[str, Any]:
        """The queue's consumer settings the SDK needs (lease, retry schedule, receives allowed):
        ``{"ack_wait": s, "backoff": [s, …], "max_deliver": n}``."""
        return await self._setting("consumer")

    async def _backoff(self) -> list[float]:
        """The queue's retry schedule in seconds (the consumer's backoff)."""
        return (await self._consumer())["backoff"]

    async def _stream_settings(self) -> tuple[int, bool, float]:
        """The largest body the queue accepts, whether it has priority lanes, and how long it
        remembers a Nats-Msg-Id (its stream's configuration)."""
        return await self._setting("stream")

    async def max_message_bytes(self) -> int:
        """The largest body the queue accepts (its ``max_message_bytes``), cached for a while."""
        return (await self._stream_settings())[0]

    async def _levels(self) -> tuple[int, ...]:
        """The queue's priority levels, highest first: 9 to 0 on a queue with ``priorities``, else 0."""
        return (*reversed(LANES), 0) if (await self._stream_settings())[1] else (0,)

    async def _check_size(self, data: bytes) -> None:
        limit = await self.max_message_bytes()
        if len(data) > limit:
            raise MessageTooLarge(f"The message is {len(data)} bytes; the queue accepts at most {limit} "
                                  "(max_message_bytes).")

    async def retry_delay(self, receive_count: int) -> float:
        """Seconds before a nack()ed message comes back after its ``receive_count``-th receive: the
        queue's ``retry_backoff_seconds`` entry for it (the last repeats), or 0 without one."""
        return scheduled_delay(receive_count, await self._backoff())

    # -- sending ----------------------------------------------------------------------------------

    def _answer(self, reply: Msg) -> dict[str, Any]:
        """The broker's answer to a publish as it is (a PubAck, or its refusal)."""
        if reply.headers and reply.headers.get(_STATUS) == "503":
            raise BrokerUnavailable(f"No stream stores subject '{self.subject}'; the queue may not exist any more.")
        return json.loads(reply.data)

    def _stored(self, ack: dict[str, Any]) -> tuple[int, bool]:
        """A PubAck's (sequence, duplicate); its refusal raised as the error it means."""
        if ack.get("error"):
            raise publish_refused(ack["error"], f"on '{self.subject}'")
        seq = int(ack["seq"])
        self._last_seq = max(self._last_seq, seq)
        return seq, bool(ack.get("duplicate"))

    def _check_ack(self, msg: Msg) -> int:
        return self._stored(self._answer(msg))[0]

    async def put(self, body: Any, *, delay_s: Optional[float] = None, dedupe_key: Optional[str] = None,
                  ttl_s: Optional[float] = None, priority: int = 0, headers: Optional[dict[str, str]] = None,
                  timeout: float = DEFAULT_TIMEOUT) -> int:
        """Put one message; returns its id once the broker has stored it.

        - ``delay_s`` (0–7 days): hidden until then, counted as delayed (a JetStream message
          schedule; envelope.py). The id returned is the one the message has when it is due.
        - ``dedupe_key`` (1–128 printable characters): a key already put within the queue's
          dedupe window stores nothing and returns the first message's id.
        - ``ttl_s`` (1 s–14 days, more than ``delay_s``): a start deadline from now; a message not
          taken by then is dropped unrun and counted as expired.
        - ``priority`` (0–9, on a queue with ``priorities``): of the messages waiting, those of the
          highest priority are taken first.

        Every put is sent with a ``Nats-Msg-Id`` (the dedupe key, else one the SDK makes), so a copy
        sent again is stored once: it is sent again when the connection comes back before the
        broker confirmed (a broker restart), when no stream answered yet (JetStream starting), and
        after RESEND_AFTER without an answer, until ``timeout`` seconds are used up.

        Raises ``QueueFull`` when the queue holds ``max_messages``, ``MessageTooLarge``, ``SpecError``
        naming the option for a bad one, and ``MaybeStored`` (a ``BrokerUnavailable``) when no copy
        was confirmed in time though one may have been stored: its ``dedupe_key`` puts it again safely."""
        self._check_open()
        delay = envelope.check_delay(delay_s) if delay_s is not None else 0.0
        ttl = envelope.check_ttl(ttl_s, delay) if ttl_s is not None else None
        target = await self._lane(envelope.check_priority(priority))
        own_key = check_dedupe_key(dedupe_key) if dedupe_key is not None else (headers or {}).get("Nats-Msg-Id") or None
        msg_id = own_key or self._nuid.next().decode()
        data, content = envelope.encode(body)
        await self._check_size(data)
        now = datetime.now(UTC)
        merged = {**(content or {}), **(headers or {}), **envelope.put_headers(now, delay_s=delay, ttl_s=ttl)}
        sending = _Sending(msg_id, timeout, (await self._stream_settings())[2])
        if delay > 0:
            due = now + timedelta(seconds=delay)
            merged.update(envelope.schedule_headers(target, due))
            seq, duplicate = await self._put_scheduled(data, merged, sending)
        else:
            seq, duplicate = self._stored(await self._publish_answer(target, data, merged, sending))
        # a duplicate of a copy of our own whose answer was lost is this put's message: its notes are due
        fresh = not duplicate or (own_key is None and sending.unanswered)
        if delay > 0 and fresh:
            await self._note({"scheduled": 1})
        if ttl is not None and fresh:
            await self._note({"seq": seq, "deadline": merged[envelope.DEADLINE]})
        return seq

    async def _lane(self, priority: int) -> str:
        """The subject a message of ``priority`` is put on; SpecError if the queue has no lanes."""
        if priority == 0:
            return self.subject
        if not (await self._stream_settings())[1]:
            rule = "must be 0 on a queue without priorities (set priorities: true on the queue)"
            raise SpecError(f"priority {rule}; the message was not stored.", errors=[{"field": "priority", "message": rule}])
        return envelope.lane_subject(self.subject, priority)

    async def send(self, body: Any, *, dedupe_key: Optional[str] = None, headers: Optional[dict[str, str]] = None,
                   timeout: float = DEFAULT_TIMEOUT) -> int:
        """``put`` without a delay or deadline (the core verb's name)."""
        return await self.put(body, dedupe_key=dedupe_key, headers=headers, timeout=timeout)

    async def _publish_answer(self, subject: str, data: bytes, headers: dict[str, str],
                              sending: _Sending) -> dict[str, Any]:
        """Publish one message with ``sending.msg_id`` as its Nats-Msg-Id and return the broker's
        answer as it is (a PubAck, or its refusal). Until ``sending.deadline`` it is sent again when
        the connection came back meanwhile (the answer is lost with the old one), after "no
        responders" (no stream took it: JetStream is starting after a restart, or reloading), and
        after RESEND_AFTER without an answer; never once the first copy may have left the dedupe
        window. Raises ``MaybeStored`` at the deadline if a copy went unanswered, else
        ``BrokerUnavailable`` (no stream took any copy)."""
        loop = asyncio.get_running_loop()
        headers = {**headers, "Nats-Msg-Id": sending.msg_id}
        token, future = self._new_waiter()
        delay = 0.01
        try:
            while True:
                self._check_open()
                now = loop.time()
                reconnect = self._reconnect
                if sending.may_resend(now):
                    if sending.first_sent is None:
                        sending.first_sent = now
                    await self._nc.publish(subject, data, reply=f"{self._mux}.{token}", headers=headers)
                wait = min(sending.deadline - now, RESEND_AFTER)
                await asyncio.wait({future, reconnect}, timeout=max(wait, 0.001), return_when=asyncio.FIRST_COMPLETED)
                pause = 0.0
                if future.done():
                    reply = future.result()  # raises PermissionDenied, Unauthorized, "Client is closed."
                    if not (reply.headers and reply.headers.get(_STATUS) == "503"):
                        return self._answer(reply)
                    if not sending.unanswered:  # nothing sent so far can have been stored
                        sending.first_sent = None
                    pause, delay = delay, min(delay * 2, 0.25)
                    token, future = self._new_waiter()
                else:
                    sending.unanswered = True
                    sending.lost = sending.lost or reconnect.done()
                if loop.time() + pause >= sending.deadline:
                    if sending.unanswered:
                        raise sending.unconfirmed()
                    raise BrokerUnavailable(f"No stream stores subject '{self.subject}'; "
                                            "the queue may not exist any more.")
                await asyncio.sleep(pause)
        finally:
            self._waiting.pop(token, None)

    async def _put_scheduled(self, data: bytes, headers: dict[str, str], sending: _Sending) -> tuple[int, bool]:
        """Store a delayed message's schedule as the stream's next sequence (``envelope.publish_as_next``),
        the first guess of the last one being the last sequence a PubAck named. A copy sent again
        whose first was stored meanwhile is refused for the sequence it expects, then answered as
        the first's duplicate: the broker checks the expected sequence before the Nats-Msg-Id."""
        subject = envelope.delay_subject(self.subject, NUID().next().decode())
        last = self._last_seq or int((await self._info(f"STREAM.INFO.{self.credentials.stream}"))["state"]["last_seq"])
        return self._stored(await envelope.publish_as_next(
            lambda h: self._publish_answer(subject, data, h, sending), headers, last))

    async def send_batch(self, bodies: Iterable[Any], *, window: int = SEND_WINDOW,
                         timeout: float = DEFAULT_TIMEOUT) -> int:
        """Send many messages, pipelined (up to ``window`` unconfirmed); returns how many the
        broker stored. If any fails, raises once the rest have settled, saying how many went (the
        first failure's class: ``QueueFull`` when the queue filled up, each later message refused too).
        Raises ``MaybeStored`` when some were never confirmed (no answer within ``timeout``, or the
        connection was lost: their PubAcks are lost with it, so it waits only LOST_QUIET seconds for
        more after a reconnect): they carry no Nats-Msg-Id, so sending them again may store some twice.

        The PubAcks of a batch all come to one inbox of its own and are counted as they arrive
        (no future per message), which keeps up with a raw pipelined publisher."""
        self._check_open()
        bodies = list(bodies)
        if not 1 <= len(bodies) <= MAX_SEND_BATCH:
            message = f"must hold 1 to {MAX_SEND_BATCH} bodies (got {len(bodies)})"
            raise SpecError(f"send_batch: bodies {message}.", errors=[{"field": "bodies", "message": message}])
        loop = asyncio.get_running_loop()
        token = f"b{next(self._ids)}"
        inbox = f"{self._mux}.batch.{token}"  # two tokens: outside the reply wildcard's reach
        broken: asyncio.Future[Msg] = loop.create_future()  # failed by a permission denial or close
        self._waiting[token] = broken
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
                    self._check_ack(msg)
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
            reconnect = self._reconnect
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
                    lost, reconnect = True, self._reconnect
                elif not done:
                    why = ("the connection to the broker was lost before it confirmed them" if lost
                           else f"the broker did not confirm them within {timeout:g} s")
                    refused = f"; {len(errors)} were refused, the first: {str(errors[0]).rstrip('.')}" if errors else ""
                    unsent = len(bodies) - sent - skipped
                    later = f"; the last {unsent} were not sent" if unsent else ""
                    raise MaybeStored(f"{stored} of {len(bodies)} messages were stored and {sent - acked} may have "
                                      f"been: {why}{refused}{later}. Sending those again may store some twice.")

        limit = await self.max_message_bytes()
        sub = await self._nc.subscribe(inbox, cb=on_ack)
        try:
            for body in bodies:
                data, content = envelope.encode(body)
                if len(data) > limit:
                    errors.append(MessageTooLarge(
                        f"a message of {len(data)} bytes is over the queue's max_message_bytes ({limit})"))
                    skipped += 1
                    continue
                sent += 1
                await self._nc.publish(self.subject, data, reply=inbox, headers=content)
                if sent - acked >= window:
                    await settle(window - 1)
            await settle(0)
        finally:
            self._stop_waiting(token, broken)
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
        self._check_open()
        encoded = [envelope.encode(body) for body in bodies]
        if not 1 <= len(encoded) <= MAX_PUT_MANY:
            message = f"must hold 1 to {MAX_PUT_MANY} bodies (got {len(encoded)})"
            raise SpecError(f"put_many: bodies {message}.", errors=[{"field": "bodies", "message": message}])
        limit = await self.max_message_bytes()
        for index, (data, _) in enumerate(encoded):
            if len(data) > limit:
                raise MessageTooLarge(f"bodies[{index}] is {len(data)} bytes; the queue accepts at most {limit} "
                                      "(max_message_bytes). Nothing was put.")
        sending = _Sending(self._nuid.next().decode(), timeout, (await self._stream_settings())[2])
        loop = asyncio.get_running_loop()
        token = f"a{next(self._ids)}"
        inbox = f"{self._mux}.atomic.{token}"  # .<attempt>.<n> per message: outside the reply wildcard's reach
        broken: asyncio.Future[Msg] = loop.create_future()  # failed by a permission denial or close
        self._waiting[token] = broken
        committed: asyncio.Future[int] = loop.create_future()  #: the attempt whose commit was answered
        replies: dict[int, dict[int, Msg]] = {}  #: each attempt's non-empty answers by batch position (1-based)
        last = len(encoded)

        async def on_reply(msg: Msg) -> None:
            attempt, position = (int(part) for part in msg.subject.rsplit(".", 2)[1:])
            if msg.data or msg.headers:  # an empty answer: the message joined the batch
                replies.setdefault(attempt, {})[position] = msg
            if position == last and not committed.done():
                committed.set_result(attempt)

        sub = await self._nc.subscribe(f"{inbox}.*.*", cb=on_reply)
        attempt = 0
        delay = 0.01
        try:
            while True:  # the whole batch again, a new batch id, the same Nats-Msg-Id (_publish_answer's rules)
                now = loop.time()
                reconnect = self._reconnect
                if sending.may_resend(now):
                    attempt += 1
                    if sending.first_sent is None:
                        sending.first_sent = now
                    await self._publish_batch(encoded, f"{inbox}.{attempt}", sending.msg_id)
                done, _ = await asyncio.wait({committed, broken, reconnect}, timeout=max(min(
                    sending.deadline - now, RESEND_AFTER), 0.001), return_when=asyncio.FIRST_COMPLETED)
                if broken in done:
                    broken.result()  # raises PermissionDenied, Unauthorized or "Client is closed."
                pause = 0.0
                if committed.done():
                    answers = replies.get(committed.result(), {})
                    if not any(m.headers and m.headers.get(_STATUS) == "503" for m in answers.values()):
                        break
                    if not sending.unanswered:  # no stream took part of it: nothing sent so far was stored
                        sending.first_sent = None
                    pause, delay = delay, min(delay * 2, 0.25)
                    committed = loop.create_future()
                else:
                    sending.unanswered = True
                    sending.lost = sending.lost or reconnect.done()
                if loop.time() + pause >= sending.deadline:
                    if sending.unanswered:
                        raise sending.unconfirmed(f"the batch of {last} (all of it or none)", keyed=False)
                    raise BrokerUnavailable(f"No stream stores subject '{self.subject}'; the queue may not exist "
                                            "any more. Nothing was put.")
                await asyncio.sleep(pause)
        finally:
            self._stop_waiting(token, broken)
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        answers = replies[committed.result()]
        if _err_code(answers[last]) == BATCH_DUPLICATE:  # an earlier attempt was stored; its answer was lost
            return await self._stored_batch(sending, last)
        return self._batch_outcome(answers, last)

    async def _publish_batch(self, encoded: list[tuple[bytes, Optional[dict[str, str]]]], reply: str,
                             msg_id: str) -> None:
        """Publish one atomic batch; message n is answered on ``<reply>.<n>``. Its commit carries
        ``msg_id``: the stream refuses a batch holding a Nats-Msg-Id it stored already, whole
        (err_code 10201), so a batch sent again after its first was stored stores nothing. A new
        batch id each time: a half-sent batch is abandoned by the broker, never completed by another."""
        batch_id = NUID().next().decode()
        for position, (data, content) in enumerate(encoded, 1):
            headers = {**(content or {}), "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(position)}
            if position == len(encoded):
                headers.update({"Nats-Batch-Commit": "1", "Nats-Msg-Id": msg_id})
            await self._nc.publish(self.subject, data, reply=f"{reply}.{position}", headers=headers)

    async def _stored_batch(self, sending: _Sending, last: int) -> list[int]:
        """The ids of a batch stored by an earlier attempt whose answer was lost: its commit's
        sequence, asked by publishing an empty message with the commit's Nats-Msg-Id and a
        Nats-Expected-Last-Msg-Id no message has. The broker checks the id first and answers a known
        one as a duplicate with its sequence; an unknown one would be refused (err_code 10070), so
        nothing is stored either way (measured on nats-server 2.15.1)."""
        try:
            answer = await self._publish_answer(self.subject, b"", {"Nats-Expected-Last-Msg-Id": NUID().next().decode()},
                                                sending)
        except BrokerUnavailable:
            answer = {}
        if not answer.get("duplicate"):
            raise BrokerUnavailable(f"The batch of {last} was stored, but the broker did not say at which sequences "
                                    "in time; do not put it again.")
        self._last_seq = max(self._last_seq, int(answer["seq"]))
        return list(range(int(answer["seq"]) - last + 1, int(answer["seq"]) + 1))

    def _batch_outcome(self, replies: dict[int, Msg], last: int) -> list[int]:
        """The sequences of a committed batch, or the error of its first refused message."""
        for position in sorted(replies):
            try:
                sequence = self._check_ack(replies[position])
            except EnclaveError as exc:
                code = _err_code(replies[position])
                if code == ATOMIC_DISABLED:
                    raise EnclaveError(f"The queue on '{self.subject}' does not take atomic batches yet "
                                       "(its stream lacks allow_atomic until the controller updates it); "
                                       "nothing was put.") from None
                if code == BATCH_INCOMPLETE:
                    raise EnclaveError(f"The broker refused the batch of {last}: {exc} Nothing was put.") from None
                if code in (QUEUE_FULL, ACCOUNT_FULL):
                    limit = "max_messages" if code == QUEUE_FULL else "max_bytes"
                    raise QueueFull(f"The queue on '{self.subject}' has no room for {last} more messages "
                                    f"({limit}); none was put.") from None
                where = f"bodies[{position - 1}] was refused: " if position < last else ""
                raise type(exc)(f"{where}{exc.message.rstrip('.')}; none of the {last} messages was put.") from None
            if position == last:
                count = int(json.loads(replies[position].data).get("count", 0))
                if count != last:
                    raise EnclaveError(f"The broker stored a batch of {count}, not {last}.")
                return list(range(sequence - count + 1, sequence + 1))
        raise EnclaveError(f"The broker sent no acknowledgement for the batch of {last}.")

    # -- lifecycle --------------------------------------------------------------------------------

    def _stop_waiting(self, token: Any, broken: asyncio.Future[Any]) -> None:
        """A pipelined send is over: stop telling it about a lost connection."""
        self._waiting.pop(token, None)
        if broken.done():
            broken.exception()  # retrieved, so asyncio does not warn about it
        else:
            broken.cancel()

    async def close(self) -> None:
        """Close the connection; messages still leased come back after their visibility timeout."""
        if self._closed:
            return
        self._closed = True
        prefetches = [*self._prefetches, *self._keepers, *self._fetching.values()]
        for task in prefetches:  # an iteration left early: its next batch is not wanted; leases lapse
            task.cancel()
        await asyncio.gather(*prefetches, return_exceptions=True)
        self._fail_all(RuntimeError("Client is closed."))
        if self._closing is not None:
            await self._closing
        if self._nc.is_connected:
            try:
                await asyncio.wait_for(self._nc.drain(), DEFAULT_TIMEOUT)
                return
            except (TimeoutError, OSError, nats.errors.Error):
                pass
        if not self._nc.is_closed:
            with contextlib.suppress(OSError):
                await self._nc.close()
        if self._nc._subs:  # nats-py gave up half-way: the broker reset the connection under it
            _finish_close(self._nc)

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Connect:
    """What ``connect`` returns: await it for a Queue, or use it in ``async with``."""

    def __init__(self, credentials: Any, options: dict[str, Any]) -> None:
        self._args = (credentials, options)
        self._queue: Optional[Queue] = None

    def __await__(self) -> Any:
        return _connect(self._args[0], **self._args[1]).__await__()

    async def __aenter__(self) -> Queue:
        self._queue = await _connect(self._args[0], **self._args[1])
        return self._queue

    async def __aexit__(self, *exc: object) -> None:
        if self._queue is not None:
            await self._queue.close()


def connect(credentials: Credentials | dict[str, Any] | None = None, *, name: str = "enclave-sdk",
            connect_timeout: float = 5.0) -> _Connect:
    """Connect to a queue with its credentials (a ``Credentials``, the dict ``enclave queue
    credentials --json`` prints, or None to read ``ENCLAVE_QUEUE_*`` from the environment).
    ``queue = await connect(...)`` or ``async with connect(...) as queue``.
    Raises ``Unauthorized`` if the broker refuses the username or password."""
    return _Connect(credentials, {"name": name, "connect_timeout": connect_timeout})


async def _connect(credentials: Credentials | dict[str, Any] | None, *, name: str, connect_timeout: float) -> Queue:
    if credentials is None:
        creds = Credentials.from_env()
    elif isinstance(credentials, Credentials):
        creds = credentials
    else:
        creds = Credentials.from_dict(credentials)
    queue: Optional[Queue] = None
    refused: list[str] = []

    async def on_error(exc: Exception) -> None:
        text = str(exc)
        lowered = text.lower()
        if "authorization violation" in lowered or "authentication" in lowered:
            refused.append(text)
            if queue is not None:
                queue._revoked()
        elif "permissions violation" in lowered and queue is not None:
            queue._denied(text.removeprefix("nats: ").strip())

    async def on_reconnect() -> None:
        if queue is not None:
            queue._reconnected()

    try:
        nc = await nats.connect(
            creds.broker_url, user=creds.username, password=creds.password, inbox_prefix=creds.inbox_prefix,
            name=name, connect_timeout=connect_timeout, error_cb=on_error, reconnected_cb=on_reconnect, allow_reconnect=True,
            max_reconnect_attempts=1, reconnect_time_wait=0.25, pending_size=64 * 1024 * 1024,
        )
        nc.options["max_reconnect_attempts"] = -1  # one try to connect, then reconnect for ever
    except Exception as exc:  # nats-py raises several unrelated types here
        if refused or "authorization" in str(exc).lower():
            raise Unauthorized(f"The broker refused user '{creds.username}': wrong username or password.") from exc
        raise BrokerUnavailable(f"Cannot connect to the broker at {creds.broker_url}: {exc!r}") from exc
    queue = Queue(nc, creds)
    await queue._start()
    return queue


def _err_code(msg: Msg) -> Optional[int]:
    with contextlib.suppress(ValueError, AttributeError):
        return json.loads(msg.data).get("error", {}).get("err_code")
    return None


def _finish_close(nc: Any) -> None:
    """What nats-py 2.16's close leaves undone when the broker resets the connection while it
    flushes (it raises ConnectionResetError half-way, after marking itself closed): stop the
    subscriptions' delivery tasks and drop the transport."""
    for sub in list(nc._subs.values()):
        task = sub._wait_for_msgs_task
        if task is not None and not task.done():
            task.cancel()
    nc._subs.clear()
    if nc._transport is not None:
        nc._transport.close()
