"""The answers the control plane gave settling requests lately, so that one asked again gets the
same answer. An app sends a release or a reject again when its connection was lost before the
answer came (a broker restart); by then the message the first request released or moved is gone
from the queue, and done a second time the request would answer that it found nothing.

A request asked again while the first is still at work waits for the first's answer. A request
that failed is not kept: asked again, it is done again.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

KEEP = 10_000  #: answers kept at most (the oldest go first)
KEEP_SECONDS = 300.0  #: how long an answer is kept: longer than an app waits for one


class Recent:
    """Answers by request key, kept for KEEP_SECONDS, KEEP at most."""

    def __init__(self, keep: int = KEEP, keep_seconds: float = KEEP_SECONDS) -> None:
        self._keep, self._keep_seconds = keep, keep_seconds
        self._answers: OrderedDict[Hashable, tuple[float, asyncio.Future[Any]]] = OrderedDict()

    def _forget_old(self, now: float) -> None:
        while self._answers:
            key, (at, future) = next(iter(self._answers.items()))
            if len(self._answers) <= self._keep and (now - at < self._keep_seconds or not future.done()):
                return
            del self._answers[key]

    async def once(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        """``work``'s answer, or the one it gave under ``key`` lately."""
        now = time.monotonic()
        self._forget_old(now)
        kept = self._answers.get(key)
        if kept is not None:
            return await asyncio.shield(kept[1])
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._answers[key] = (now, future)
        try:
            result = await work()
        except BaseException as exc:
            self._answers.pop(key, None)
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        future.set_result(result)
        return result
