"""Putting one message on a queue: ``put`` and ``send``, over a session, and the rules for sending
a put again across a broker restart (``PutUnderWay``, ``Sending.publish_answer``), which
batching.py's ``put_many`` follows too.

What a put does on the broker is in queue.py's docstring. A delayed put is a JetStream message
schedule stored as the stream's next sequence (``envelope.publish_as_next``), and a put with a
delay or a deadline tells the control plane (``Session.note``).

Every put carries a ``Nats-Msg-Id`` (its dedupe key, or one the SDK makes) and is sent again
when the connection came back before its PubAck, so it is stored once and returns that id; if
none was confirmed in time it raises ``MaybeStored``, whose ``dedupe_key`` puts it again safely.
On a broker that syncs every write, puts made while others are on their way are group-committed
(grouping.py).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

from nats.aio.msg import Msg
from nats.nuid import NUID

from .. import envelope
from ..errors import BrokerUnavailable, MaybeStored, MessageTooLarge, SpecError, out_of_range, publish_refused
from ..spec import SENDER_HEADER_BYTES, check_dedupe_key, header_bytes
from .grouping import GroupCommit
from .session import DEFAULT_TIMEOUT, RESEND_AFTER, Backoff, Session, unavailable
from .settings import Settings

#: a header's name: an HTTP token (RFC 9110), as NATS headers are
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,255}")
HEADERS_RULE = ("a dict of header names (letters, digits or !#$%&'*+.^_`|~-) to text without line breaks, "
                "not beginning or ending with white space (NATS trims it)")


def check_headers(headers: Any) -> dict[str, str]:
    """A put's own headers, once they are HEADERS_RULE (a ``Nats-Msg-Id`` among them is a dedupe
    key: ``put`` checks it as one); SpecError naming ``headers`` otherwise."""
    if headers is None:
        return {}
    if not isinstance(headers, dict):
        raise out_of_range("headers", HEADERS_RULE, f"a {type(headers).__name__}")
    for name, value in headers.items():
        if not (isinstance(name, str) and HEADER_NAME.fullmatch(name)):
            raise out_of_range("headers", HEADERS_RULE, f"the name {name!r}")
        if name.lower().startswith("nats-") and name.lower() != "nats-msg-id":
            # the broker acts on these: Nats-Rollup deletes every message of the queue (a queue that
            # had a delayed message allows roll-ups: nats-server turns them on with schedules)
            raise out_of_range("headers", f"{HEADERS_RULE}, none of the broker's own but Nats-Msg-Id",
                               f"the name {name!r}")
        # what would break the header block, or not come back as it was
        if (not isinstance(value, str) or any(c in value for c in "\r\n\0") or value != value.strip()
                or not utf8(value)):
            raise out_of_range("headers", HEADERS_RULE, f"{value!r} for {name!r}")
    if (size := header_bytes(headers)) > SENDER_HEADER_BYTES:  # the rest of the room is a dead letter's
        raise out_of_range("headers", f"{HEADERS_RULE}, at most {SENDER_HEADER_BYTES} bytes together",
                           f"{size} bytes")
    return headers


def utf8(text: str) -> bool:
    """Whether ``text`` can be sent: UTF-8 has no lone surrogates (``"\\ud800"``)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_timeout(timeout: Any) -> float:
    """Seconds to wait for the broker: a finite number above 0; SpecError naming ``timeout``."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise out_of_range("timeout", "a number of seconds above 0", repr(timeout))
    return float(timeout)


#: a put that no stream took ("no responders" to the end): nothing was stored
NO_STREAM = ("No stream answered for subject '{subject}', so nothing was stored: the queue may not exist any "
              "more, or the broker cannot store it now (JetStream starting, or a cluster without a majority of "
              "its nodes); try again.")

DEDUPE_MARGIN = 0.5  #: seconds before its first copy leaves the dedupe window that a put is no longer sent again


class PutUnderWay:
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

    def unconfirmed(self, what: str = "the message", *, keyed: bool = True, closed: bool = False) -> MaybeStored:
        """The error of a put no copy of which was confirmed in time (``closed``: before the client
        was closed). ``keyed``: the caller can put it again with ``msg_id`` as its dedupe key
        (put_many takes none)."""
        why = ("the client was closed before the broker confirmed it" if closed else
               f"the connection to the broker was lost, and no copy sent again was confirmed within {self.timeout:g} s"
               if self.lost else f"the broker did not confirm it within {self.timeout:g} s")
        if keyed:
            return MaybeStored(f"{what[0].upper()}{what[1:]} may have been stored: {why}. Putting it again with "
                               f"dedupe_key={self.msg_id!r} is safe within the queue's dedupe window.",
                               dedupe_key=self.msg_id)
        return MaybeStored(f"{what[0].upper()}{what[1:]} may have been stored: {why}. Putting it again may "
                           "store it twice.")


class Sending:
    """The putting verbs of one queue."""

    def __init__(self, session: Session, settings: Settings) -> None:
        self._session = session
        self._settings = settings
        self._nuid = NUID()  #: every put's Nats-Msg-Id unless it has a key (one a queue: a queue lives on one loop)
        self._last_seq = 0  #: the last sequence a PubAck named: a delayed put's first guess
        self._group = GroupCommit(session)

    def new_id(self) -> str:
        """A fresh Nats-Msg-Id."""
        return self._nuid.next().decode()

    async def check_size(self, data: bytes) -> None:
        """Raise ``MessageTooLarge`` for a body over the queue's ``max_message_bytes``."""
        limit = await self._settings.max_message_bytes()
        if len(data) > limit:
            raise MessageTooLarge(f"The message is {len(data)} bytes; the queue accepts at most {limit} "
                                  "(max_message_bytes).")

    def seen(self, sequence: int) -> None:
        """A sequence the broker named: the stream's last is at least that."""
        self._last_seq = max(self._last_seq, sequence)

    def _answer(self, reply: Msg) -> dict[str, Any]:
        """The broker's answer to a publish as it is (a PubAck, or its refusal)."""
        if unavailable(reply):
            raise BrokerUnavailable(NO_STREAM.format(subject=self._session.subject))
        return json.loads(reply.data)

    def stored(self, ack: dict[str, Any]) -> tuple[int, bool]:
        """A PubAck's (sequence, duplicate); its refusal raised as the error it means."""
        if ack.get("error"):
            raise publish_refused(ack["error"], f"on '{self._session.subject}'")
        seq = int(ack["seq"])
        self.seen(seq)
        return seq, bool(ack.get("duplicate"))

    def check_ack(self, msg: Msg) -> int:
        """The sequence a reply to a publish names; its refusal raised as the error it means."""
        return self.stored(self._answer(msg))[0]

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
        self._session.check_open()
        delay = envelope.check_delay(delay_s) if delay_s is not None else 0.0
        ttl = envelope.check_ttl(ttl_s, delay) if ttl_s is not None else None
        target = await self._lane(envelope.check_priority(priority))
        headers = check_headers(headers)
        check_timeout(timeout)
        key = dedupe_key if dedupe_key is not None else headers.get("Nats-Msg-Id")
        own_key = check_dedupe_key(key) if key is not None else None  # a key given as a header is one too
        msg_id = own_key or self.new_id()
        data, content = envelope.encode(body)
        await self.check_size(data)
        now = datetime.now(UTC)
        merged = {**(content or {}), **headers, **envelope.put_headers(now, delay_s=delay, ttl_s=ttl)}
        sending = PutUnderWay(msg_id, timeout, (await self._settings.stream()).dedupe_window)
        if delay > 0:
            due = now + timedelta(seconds=delay)
            merged.update(envelope.schedule_headers(target, due))
            seq, duplicate = await self._put_scheduled(data, merged, sending)
        elif ttl is None and _groupable(merged) and await self._settings.synced_writes():
            answer = await self._group.put(target, data, merged, sending,
                                           lambda: self.publish_answer(target, data, merged, sending))
            seq, duplicate = self.stored(answer)
        else:
            seq, duplicate = self.stored(await self.publish_answer(target, data, merged, sending))
        # a duplicate of a copy of our own whose answer was lost is this put's message: its notes are due
        fresh = not duplicate or (own_key is None and sending.unanswered)
        if delay > 0 and fresh:
            await self._session.note({"scheduled": 1})
        if ttl is not None and fresh:
            await self._session.note({"seq": seq, "deadline": merged[envelope.DEADLINE]})
        return seq

    async def _lane(self, priority: int) -> str:
        """The subject a message of ``priority`` is put on; SpecError if the queue has no lanes."""
        if priority == 0:
            return self._session.subject
        if not (await self._settings.stream()).lanes:
            rule = "must be 0 on a queue without priorities (set priorities: true on the queue)"
            raise SpecError(f"priority {rule}; the message was not stored.", errors=[{"field": "priority", "message": rule}])
        return envelope.lane_subject(self._session.subject, priority)

    async def send(self, body: Any, *, dedupe_key: Optional[str] = None, headers: Optional[dict[str, str]] = None,
                   timeout: float = DEFAULT_TIMEOUT) -> int:
        """``put`` without a delay or deadline (the core verb's name)."""
        return await self.put(body, dedupe_key=dedupe_key, headers=headers, timeout=timeout)

    async def publish_answer(self, subject: str, data: bytes, headers: dict[str, str],
                             sending: PutUnderWay) -> dict[str, Any]:
        """Publish one message with ``sending.msg_id`` as its Nats-Msg-Id and return the broker's
        answer as it is (a PubAck, or its refusal). Until ``sending.deadline`` it is sent again when
        the connection came back meanwhile (the answer is lost with the old one), after "no
        responders" (no stream took it: JetStream is starting after a restart, or reloading), and
        after RESEND_AFTER without an answer; never once the first copy may have left the dedupe
        window. Raises ``MaybeStored`` at the deadline if a copy went unanswered, else
        ``BrokerUnavailable`` (no stream took any copy)."""
        loop = asyncio.get_running_loop()
        headers = {**headers, "Nats-Msg-Id": sending.msg_id}
        token, future = self._session.new_waiter()
        backoff = Backoff()
        try:
            while True:
                self._session.check_open()
                now = loop.time()
                reconnect = self._session.reconnect
                if sending.may_resend(now):
                    if sending.first_sent is None:
                        sending.first_sent = now
                    await self._session.publish(subject, data, reply=f"{self._session.mux}.{token}", headers=headers)
                wait = min(sending.deadline - now, RESEND_AFTER)
                await asyncio.wait({future, reconnect}, timeout=max(wait, 0.001), return_when=asyncio.FIRST_COMPLETED)
                pause = 0.0
                if future.done():
                    reply = future.result()  # raises PermissionDenied, Unauthorized, "Client is closed."
                    if not unavailable(reply):
                        return self._answer(reply)
                    if not sending.unanswered:  # nothing sent so far can have been stored
                        sending.first_sent = None
                    pause = backoff.next()
                    token, future = self._session.new_waiter()
                else:
                    sending.unanswered = True
                    sending.lost = sending.lost or reconnect.done()
                if loop.time() + pause >= sending.deadline:
                    if sending.unanswered:
                        raise sending.unconfirmed()
                    raise BrokerUnavailable(NO_STREAM.format(subject=self._session.subject))
                await asyncio.sleep(pause)
        except RuntimeError:  # closed under it: a copy on its way may have been stored
            if self._session.closed and sending.first_sent is not None:
                raise sending.unconfirmed(closed=True) from None
            raise
        finally:
            self._session.waiting.pop(token, None)

    async def _put_scheduled(self, data: bytes, headers: dict[str, str], sending: PutUnderWay) -> tuple[int, bool]:
        """Store a delayed message's schedule as the stream's next sequence (``envelope.publish_as_next``),
        the first guess of the last one being the last sequence a PubAck named. A copy sent again
        whose first was stored meanwhile is refused for the sequence it expects, then answered as
        the first's duplicate: the broker checks the expected sequence before the Nats-Msg-Id."""
        subject = envelope.delay_subject(self._session.subject, NUID().next().decode())
        stream = self._session.credentials.stream
        last = self._last_seq or int((await self._session.info(f"STREAM.INFO.{stream}"))["state"]["last_seq"])

        def publish() -> Any:
            return envelope.publish_as_next(lambda h: self.publish_answer(subject, data, h, sending), headers, last)

        answer = await publish()
        # the queue's first delayed message: the control plane turns its schedules on (a queue
        # with max_messages cannot have them, and its refusal stands)
        if envelope.refused_for_schedules(answer) and await self._session.desk("schedules", {}, resend=True):
            answer = await publish()
        return self.stored(answer)


def _groupable(headers: dict[str, str]) -> bool:
    """Whether a put may join an atomic batch: none of its headers asks the broker for something
    of its own (``Nats-Expected-*``, a TTL, a batch), which a batch would apply to it or refuse."""
    return not any(key.startswith("Nats-") and key != "Nats-Msg-Id" for key in headers)
