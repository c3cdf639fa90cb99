"""The ``Queue`` facade and ``connect``: one queue's verbs, each carried out by the module that owns
it, and what each verb does on the broker.

``connect`` opens a session (connecting.py, session.py) and builds a ``Queue`` over it from sending.py and
batching.py (putting), receiving.py (taking), inspecting.py (looking, and the operator's verbs)
and settings.py (the queue's settings, cached); message.py holds a received message's verbs.

What each verb does on the broker (JetStream):

- ``send`` publishes to the queue's subject and returns once the stream has stored the message
  (its PubAck), so a sent message is durable. ``send_batch`` sends many (32 or more) as one atomic batch
  on a broker that fsyncs every write (a group commit), else pipelined; concurrent puts are
  group-committed the same way (batching.py, grouping.py).
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
  after the last one the message is dead-lettered: the SDK tells the control plane's mover at
  once (a publish to the reject subject, not waited for) rather than wait for the broker's
  advisory. ``error`` is kept (a note the broker stores for the control plane) and travels with
  the dead letter as its last error.
- ``Message.reject(error=)`` dead-letters the message now: the control plane copies it to the
  dead-letter queue, then deletes it (a ``+TERM`` would delete it first and lose it).
- ``Message.extend()`` resets the lease's clock (``+WPI``, "work in progress").

Across a broker restart (the connection comes back by itself): every put carries a
``Nats-Msg-Id`` (its dedupe key, or one the SDK makes) and is sent again when the connection came
back before its PubAck, so it is stored once and returns that id; if none was confirmed in time it
raises ``MaybeStored``, whose ``dedupe_key`` puts it again safely. ``put_many`` sends its batch
again the same way, and so does a group-committed ``send_batch``; a pipelined one (no keys: the
broker keeps each key in memory for the dedupe window) says how many may have been stored. Pull requests, which a restarted broker forgets, are
sent again too (pulls.py), and so are acknowledgements not confirmed yet (acks.py),
until their timeout, while their message's lease lasts; an ``+ACK`` of a delivery the restarted
broker forgot raises ``Conflict``.

Errors: a refused operation (a permissions violation) raises ``PermissionDenied`` at once, not
after a timeout; wrong credentials raise ``Unauthorized``; an oversize message
``MessageTooLarge``; a full queue ``QueueFull``; a bad dedupe key ``SpecError``. A closed queue
raises ``RuntimeError("Client is closed.")``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Optional, TypeVar

from ..errors import out_of_range
from ..spec import scheduled_delay
from .batching import SEND_WINDOW, Batching
from .connecting import open_session
from .credentials import Credentials
from .inspecting import DeadLetter, Inspecting
from .message import Message, PeekedMessage
from .receiving import Receiving
from .sending import Sending
from .session import DEFAULT_TIMEOUT, Session
from .settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


def _doc(source: Callable[..., Any]) -> Callable[[F], F]:
    """Give a verb the docstring of the method that carries it out."""
    def apply(method: F) -> F:
        method.__doc__ = source.__doc__
        return method
    return apply


class Queue:
    """One queue, over one connection authenticated as the queue's own user."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.credentials: Credentials = session.credentials
        self.subject: str = session.subject
        self._nc = session.nc  #: the NATS connection (tests and benchmarks reach for it)
        self._settings = Settings(session)
        self._sending = Sending(session, self._settings)
        self._batching = Batching(session, self._settings, self._sending)
        self._receiving = Receiving(session, self._settings)
        self._inspecting = Inspecting(session, self._settings)

    # -- sending ----------------------------------------------------------------------------------

    @_doc(Sending.put)
    async def put(self, body: Any, *, delay_s: Optional[float] = None, dedupe_key: Optional[str] = None,
                  ttl_s: Optional[float] = None, priority: int = 0, headers: Optional[dict[str, str]] = None,
                  timeout: float = DEFAULT_TIMEOUT) -> int:
        return await self._sending.put(body, delay_s=delay_s, dedupe_key=dedupe_key, ttl_s=ttl_s, priority=priority,
                                       headers=headers, timeout=timeout)

    @_doc(Sending.send)
    async def send(self, body: Any, *, dedupe_key: Optional[str] = None, headers: Optional[dict[str, str]] = None,
                   timeout: float = DEFAULT_TIMEOUT) -> int:
        return await self._sending.send(body, dedupe_key=dedupe_key, headers=headers, timeout=timeout)

    @_doc(Batching.send_batch)
    async def send_batch(self, bodies: Iterable[Any], *, window: int = SEND_WINDOW,
                         timeout: float = DEFAULT_TIMEOUT) -> int:
        return await self._batching.send_batch(bodies, window=window, timeout=timeout)

    @_doc(Batching.put_many)
    async def put_many(self, bodies: Iterable[Any], *, timeout: float = DEFAULT_TIMEOUT) -> list[int]:
        return await self._batching.put_many(bodies, timeout=timeout)

    async def max_message_bytes(self) -> int:
        """The largest body the queue accepts (its ``max_message_bytes``), cached for a while."""
        return await self._settings.max_message_bytes()

    async def retry_delay(self, receive_count: int) -> float:
        """Seconds before a nack()ed message comes back after its ``receive_count``-th receive: the
        queue's ``retry_backoff_seconds`` entry for it (the last repeats), or 0 without one."""
        if isinstance(receive_count, bool) or not isinstance(receive_count, int) or receive_count < 1:
            raise out_of_range("receive_count", "an integer from 1 (the first receive)", repr(receive_count))
        return scheduled_delay(receive_count, await self._settings.backoff())

    # -- receiving --------------------------------------------------------------------------------

    @_doc(Receiving.receive)
    async def receive(self, batch: int = 1, wait: float = 5.0, *, lease_s: Optional[float] = None) -> list[Message]:
        return await self._receiving.receive(batch, wait, lease_s=lease_s)

    @_doc(Receiving.get)
    async def get(self, timeout_s: float = 20.0, *, lease_s: Optional[float] = None) -> Optional[Message]:
        return await self._receiving.get(timeout_s, lease_s=lease_s)

    @_doc(Receiving.iterate)
    def iterate(self, *, lease_s: Optional[float] = None, stop_when_empty: bool = False,
                batch: int = 100) -> AsyncIterator[Message]:
        return self._receiving.iterate(lease_s=lease_s, stop_when_empty=stop_when_empty, batch=batch)

    @_doc(Receiving.messages)
    def messages(self, batch: int = 100, wait: float = 5.0) -> AsyncIterator[Message]:
        return self._receiving.messages(batch, wait)

    @_doc(Receiving.delete_many)
    async def delete_many(self, messages: Iterable[Message], timeout: float = DEFAULT_TIMEOUT, *,
                          confirm: bool = True) -> None:
        await self._receiving.delete_many(messages, timeout, confirm=confirm)

    ack_many = delete_many

    # -- looking, and the operator's verbs --------------------------------------------------------

    @_doc(Inspecting.len)
    async def len(self) -> int:
        return await self._inspecting.len()

    @_doc(Inspecting.peek)
    async def peek(self, limit: int = 10, *, timeout: float = 5.0) -> list[PeekedMessage]:
        return await self._inspecting.peek(limit, timeout=timeout)

    @_doc(Inspecting.depth_history)
    async def depth_history(self, hours: int = 24) -> list[dict[str, Any]]:
        return await self._inspecting.depth_history(hours)

    @_doc(Inspecting.dead_letters)
    async def dead_letters(self, limit: int = 10) -> list[DeadLetter]:
        return await self._inspecting.dead_letters(limit)

    @_doc(Inspecting.export)
    async def export(self, path: str | Path) -> dict[str, int]:
        return await self._inspecting.export(path)

    @_doc(Inspecting.clear)
    async def clear(self) -> dict[str, int]:
        return await self._inspecting.clear()

    @_doc(Inspecting.metrics)
    async def metrics(self) -> dict[str, int]:
        return await self._inspecting.metrics()

    # -- lifecycle --------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connection; messages still leased come back after their visibility timeout."""
        await self._session.close()

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
    elif isinstance(credentials, Mapping):
        creds = Credentials.from_dict(credentials)
    else:
        raise out_of_range("credentials", "a Credentials, the dict 'enclave queue credentials --json' prints, or None "
                           "(the ENCLAVE_QUEUE_* environment)", f"a {type(credentials).__name__}")
    if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)) or \
            not 0 < connect_timeout < math.inf:
        raise out_of_range("connect_timeout", "a number of seconds above 0", repr(connect_timeout))
    if not isinstance(name, str) or not name or not name.isprintable():
        raise out_of_range("name", "the connection's name: printable text", repr(name))
    queue = Queue(await open_session(creds, name=name, connect_timeout=float(connect_timeout)))
    queue._settings.start()  # read ahead: a first receive or put need not wait for them
    return queue
