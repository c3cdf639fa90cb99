"""A blocking wrapper of the async SDK, for scripts and threads: ``connect_sync(creds)``.

It runs the async client on an event loop in a background thread; each call blocks until done.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, Optional, TypeVar

from .credentials import Credentials
from .inspecting import DeadLetter
from .message import Message, PeekedMessage
from .queue import Queue, connect

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="enclave-sdk", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.loop.is_closed():  # after close(): as the async client says it
            coro.close()
            raise RuntimeError("Client is closed.")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:  # Ctrl-C in the caller's thread: the call stops too (a get left
            future.cancel()    # running took the next message, leased to nobody)
            raise

    def stop(self) -> None:
        """End the loop's thread; a second call does nothing."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class SyncMessage:
    """A received message; the same fields and verbs as ``Message``, blocking."""

    def __init__(self, message: Message, loop: _Loop) -> None:
        self.message = message
        self._loop = loop

    def __getattr__(self, name: str) -> Any:  # body, id, attempts, enqueued_at, lease_expires_at, …
        return getattr(self.message, name)

    def __repr__(self) -> str:
        return f"Sync{self.message!r}"

    def ack(self, *, confirm: bool = True) -> None:
        self._loop.run(self.message.ack(confirm=confirm))

    delete = ack

    def nack(self, delay_s: Optional[float] = None, error: Optional[str] = None) -> None:
        self._loop.run(self.message.nack(delay_s, error))

    def release(self, delay_s: float = 0.0) -> None:
        self._loop.run(self.message.release(delay_s))

    def reject(self, error: Optional[str] = None) -> str:
        return self._loop.run(self.message.reject(error))

    def extend(self, lease_s: Optional[float] = None) -> None:
        self._loop.run(self.message.extend(lease_s))


class SyncDeadLetter:
    """One of the queue's dead letters; ``retry()`` and ``discard()`` block."""

    def __init__(self, letter: DeadLetter, loop: _Loop) -> None:
        self.letter = letter
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return getattr(self.letter, name)

    def retry(self) -> int:
        return self._loop.run(self.letter.retry())

    def discard(self) -> None:
        self._loop.run(self.letter.discard())


class SyncQueue:
    def __init__(self, queue: Queue, loop: _Loop) -> None:
        self.queue = queue
        self._loop = loop

    def put(self, body: Any, **kwargs: Any) -> int:
        return self._loop.run(self.queue.put(body, **kwargs))

    def send(self, body: Any, **kwargs: Any) -> int:
        return self._loop.run(self.queue.send(body, **kwargs))

    def send_batch(self, bodies: Iterable[Any], **kwargs: Any) -> int:
        return self._loop.run(self.queue.send_batch(bodies, **kwargs))  # checked there: a str is no list

    def put_many(self, bodies: Iterable[Any], **kwargs: Any) -> list[int]:
        return self._loop.run(self.queue.put_many(bodies, **kwargs))

    def len(self) -> int:
        return self._loop.run(self.queue.len())

    def peek(self, limit: int = 10) -> list[PeekedMessage]:
        return self._loop.run(self.queue.peek(limit))

    def receive(self, batch: int = 1, wait: float = 5.0, **kwargs: Any) -> list[SyncMessage]:
        return [SyncMessage(m, self._loop) for m in self._loop.run(self.queue.receive(batch, wait, **kwargs))]

    def get(self, timeout_s: float = 20.0, **kwargs: Any) -> Optional[SyncMessage]:
        message = self._loop.run(self.queue.get(timeout_s, **kwargs))
        return SyncMessage(message, self._loop) if message is not None else None

    def iterate(self, **kwargs: Any) -> Iterator[SyncMessage]:
        """The blocking twin of ``Queue.iterate``: a plain generator."""
        messages = self.queue.iterate(**kwargs)
        try:
            while True:
                try:
                    message = self._loop.run(messages.__anext__())
                except StopAsyncIteration:
                    return
                yield SyncMessage(message, self._loop)
        finally:
            self._loop.run(messages.aclose())

    def depth_history(self, hours: int = 24) -> list[dict[str, Any]]:
        return self._loop.run(self.queue.depth_history(hours))

    def dead_letters(self, limit: int = 10) -> list[SyncDeadLetter]:
        return [SyncDeadLetter(letter, self._loop) for letter in self._loop.run(self.queue.dead_letters(limit))]

    def export(self, path: str | Path) -> dict[str, int]:
        return self._loop.run(self.queue.export(path))

    def clear(self) -> dict[str, int]:
        return self._loop.run(self.queue.clear())

    def metrics(self) -> dict[str, int]:
        return self._loop.run(self.queue.metrics())

    def close(self) -> None:
        """Close the connection; a second call (an explicit close inside ``with``) does nothing."""
        if self._loop.loop.is_closed():
            return
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
