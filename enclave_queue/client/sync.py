"""A blocking wrapper of the async SDK, for scripts and threads: ``connect_sync(creds)``.

It runs the async client on an event loop in a background thread; each call blocks until done.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, Optional, TypeVar

from .credentials import Credentials
from .message import PeekedMessage
from .queue import Message, Queue, connect

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="enclave-sdk", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class SyncMessage:
    """A received message; the same verbs as ``Message``, blocking."""

    def __init__(self, message: Message, loop: _Loop) -> None:
        self.message = message
        self._loop = loop

    body = property(lambda self: self.message.body)
    data = property(lambda self: self.message.data)
    headers = property(lambda self: self.message.headers)
    receive_count = property(lambda self: self.message.receive_count)
    sequence = property(lambda self: self.message.sequence)
    sent_at = property(lambda self: self.message.sent_at)

    def delete(self) -> None:
        self._loop.run(self.message.delete())

    def nack(self, delay: Optional[float] = None, error: Optional[str] = None) -> None:
        self._loop.run(self.message.nack(delay, error))

    def reject(self, error: Optional[str] = None) -> str:
        return self._loop.run(self.message.reject(error))

    def extend(self) -> None:
        self._loop.run(self.message.extend())


class SyncQueue:
    def __init__(self, queue: Queue, loop: _Loop) -> None:
        self.queue = queue
        self._loop = loop

    def send(self, body: Any, **kwargs: Any) -> int:
        return self._loop.run(self.queue.send(body, **kwargs))

    def send_batch(self, bodies: Iterable[Any], **kwargs: Any) -> int:
        return self._loop.run(self.queue.send_batch(list(bodies), **kwargs))

    def put_many(self, bodies: Iterable[Any], **kwargs: Any) -> list[int]:
        return self._loop.run(self.queue.put_many(list(bodies), **kwargs))

    def len(self) -> int:
        return self._loop.run(self.queue.len())

    def peek(self, limit: int = 10) -> list[PeekedMessage]:
        return self._loop.run(self.queue.peek(limit))

    def receive(self, batch: int = 1, wait: float = 5.0) -> list[SyncMessage]:
        return [SyncMessage(m, self._loop) for m in self._loop.run(self.queue.receive(batch, wait))]

    def close(self) -> None:
        try:
            self._loop.run(self.queue.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> SyncQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_sync(credentials: Credentials | dict[str, Any] | None = None, **options: Any) -> SyncQueue:
    """The blocking twin of ``connect``: ``with connect_sync(creds) as queue: queue.send(...)``."""
    loop = _Loop()
    try:
        return SyncQueue(loop.run(_open(credentials, options)), loop)
    except BaseException:
        loop.stop()
        raise


async def _open(credentials: Any, options: dict[str, Any]) -> Queue:
    return await connect(credentials, **options)
