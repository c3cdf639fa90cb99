"""A received message and how bodies travel: ``Message`` (its verbs are explained in
queue.py), ``PeekedMessage`` (one read by ``Queue.peek``, not leased), the body codec, and the
retry-delay arithmetic for nacks."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Optional

from nats.aio.msg import Msg

from ..errors import EnclaveError
from ..spec import scheduled_delay

if TYPE_CHECKING:
    from .queue import Queue

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def encode(body: Any) -> tuple[bytes, Optional[dict[str, str]]]:
    """A body as bytes and headers: bytes as they are, str as UTF-8 text, anything else as JSON."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body), None
    if isinstance(body, str):
        return body.encode(), {"Content-Type": TEXT}
    return json.dumps(body, separators=(",", ":")).encode(), {"Content-Type": JSON}


def nak_delay(wanted: float, receive_count: int, backoff: list[float]) -> float:
    """The delay to put in a ``-NAK`` so the message comes back ``wanted`` seconds later.

    With a consumer backoff, nats-server 2.15 brings a nak'd message back at nak time + delay -
    backoff[0] + backoff[its redeliveries so far] (consumer.go, processNak and checkPending), not
    after the delay alone; this undoes that. Without a backoff the delay is taken as it is."""
    if not backoff:
        return wanted
    redeliveries = min(max(receive_count - 1, 0), len(backoff) - 1)
    return wanted + backoff[0] - backoff[redeliveries]


#: the smallest delay a -NAK carries (seconds): a compensated delay at or below 0 cannot be sent,
#: so such a message comes back as soon as the server's own schedule allows
MIN_NAK_DELAY = 0.001


def nak_payload(delay: float, receive_count: int, backoff: list[float]) -> bytes:
    """The ``-NAK`` that hands a message back for ``delay`` seconds (0: at once), compensated for
    the consumer's backoff (``nak_delay``). The SDK and the API's nack by hand both send this."""
    if delay <= 0:
        return b"-NAK"
    sent = max(nak_delay(delay, receive_count, backoff), MIN_NAK_DELAY)
    return b"-NAK " + json.dumps({"delay": int(sent * 1e9)}).encode()


def decode(data: bytes, content_type: Optional[str]) -> Any:
    """The inverse of ``encode``, by the message's Content-Type."""
    if content_type == JSON:
        return json.loads(data)
    if content_type and content_type.startswith("text/"):
        return data.decode()
    return data


#: headers a direct get adds to a stored message (not the sender's)
DIRECT_GET_HEADERS = frozenset({"Nats-Stream", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Subject",
                                "Nats-Num-Pending", "Nats-Last-Sequence"})


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
        return self.sequence

    @property
    def body(self) -> Any:
        """The body decoded as it was sent: JSON value, text, or bytes."""
        return decode(self.data, self.headers.get("Content-Type"))

    @classmethod
    def from_direct_get(cls, msg: Msg) -> PeekedMessage:
        headers = dict(msg.headers or {})
        return cls(
            sequence=int(headers["Nats-Sequence"]),
            data=msg.data or b"",
            headers={k: v for k, v in headers.items() if k not in DIRECT_GET_HEADERS},
            enqueued_at=datetime.fromisoformat(headers["Nats-Time-Stamp"]).astimezone(UTC),
        )


class Message:
    """A received message, leased until deleted, nacked or its visibility timeout passes."""

    __slots__ = ("_queue", "data", "headers", "_reply", "receive_count", "sequence", "_sent_ns")

    def __init__(self, queue: Queue, msg: Msg) -> None:
        self._queue = queue
        self.data: bytes = msg.data
        self.headers: dict[str, str] = msg.headers or {}
        self._reply: str = msg.reply
        # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>
        tokens = msg.reply.split(".")
        if len(tokens) > 9:  # the v2 form carries a domain and an account hash first
            tokens = tokens[:2] + tokens[4:]
        self.receive_count = int(tokens[4])  #: this receive included
        self.sequence = int(tokens[5])  #: the message's position in the queue's stream
        self._sent_ns = int(tokens[7])

    @property
    def body(self) -> Any:
        """The body decoded as it was sent: JSON value, text, or bytes."""
        return decode(self.data, self.headers.get("Content-Type"))

    @property
    def sent_at(self) -> datetime:
        return datetime.fromtimestamp(self._sent_ns / 1e9, UTC)

    def __repr__(self) -> str:
        return f"Message(sequence={self.sequence}, receive_count={self.receive_count}, bytes={len(self.data)})"

    async def delete(self, *, confirm: bool = True) -> None:
        """Remove the message from the queue for good; returns once the broker confirmed.
        ``confirm=False`` sends the delete without waiting (as a plain NATS ``ack()`` does): faster,
        but a delete lost on the way means the message comes back after its lease."""
        if confirm:
            await self._queue._confirm(self._reply, b"+ACK")
        else:
            await self._queue._send_unconfirmed([self._reply])

    async def nack(self, delay: Optional[float] = None, error: Optional[str] = None) -> None:
        """Hand the message back: redelivered after ``delay`` seconds (default: the queue's retry
        schedule for this receive, else at once). ``error`` says why; a dead letter carries the last."""
        if error:
            await self._queue._note_error(self.sequence, error)
        backoff = await self._queue._backoff()
        if delay is None:
            delay = scheduled_delay(self.receive_count, backoff)
        await self._queue._confirm(self._reply, nak_payload(delay, self.receive_count, backoff))

    async def reject(self, error: Optional[str] = None) -> str:
        """Dead-letter the message now, with ``error`` as its last error. Returns 'moved' (to the
        dead-letter queue), 'discarded' (the queue has none) or 'gone' (it was deleted meanwhile)."""
        outcome = await self._queue._reject(self.sequence, self.receive_count, error)
        with contextlib.suppress(EnclaveError):
            await self._queue._confirm(self._reply, b"+ACK")  # end the lease; the message is gone already
        return outcome

    async def extend(self) -> None:
        """Keep the message hidden for another lease from now (work in progress): the visibility
        timeout, or with a retry schedule this receive's entry of it."""
        await self._queue._confirm(self._reply, b"+WPI")
