"""The queue's settings the SDK needs, read from its consumer and stream over a session and cached
for CONSUMER_TTL and SCHEDULE_TTL seconds: the lease, retry schedule and receives allowed; the largest body, the
priority lanes and the dedupe window; and, from the control plane, whether the broker syncs
every write to disk before it acknowledges it (which makes group commits worth their cost).

A stale value is used while a fresh one is read in the background, so no receive or put waits
for it; ``start`` reads both ahead at connect, so the first receive or put need not wait either.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, NamedTuple

from .. import envelope
from ..errors import BrokerUnavailable, EnclaveError, NotFound
from ..names import LANES
from ..spec import HEADER_ROOM
from .session import Session

SCHEDULE_TTL = 30.0  #: seconds the queue's size limit, lanes, dedupe window and the broker's sync are cached
#: seconds its lease, retry schedule and receives allowed are: a visibility timeout lowered on a live
#: queue shortens the leases under way, and workers must know it soon
CONSUMER_TTL = 5.0
PRIORITY_LEVELS = (*reversed(LANES), 0)  #: a queue with ``priorities``: its levels, highest first
BROKER_TIMEOUT = 2.0  #: seconds the control plane is given to say how the broker syncs
CONSUMER_NOT_FOUND = 10014  #: the JetStream API's err_code for a consumer that does not exist
BROKER_WAIT = 0.25  #: seconds a first batch waits for that answer before it assumes every write is synced


class StreamSettings(NamedTuple):
    """What the SDK needs of the queue's stream configuration."""

    max_body: int  #: the largest body the queue accepts (bytes; its max_message_bytes)
    lanes: bool  #: whether it has priority lanes
    dedupe_window: float  #: seconds it remembers a Nats-Msg-Id (its duplicate_window)


class Settings:
    """The queue's settings as last read through ``session``."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._values: dict[str, tuple[float, Any]] = {}  #: "consumer", "stream", "broker": (valid until, value)
        self._fetching: dict[str, asyncio.Task[Any]] = {}  #: their reads under way

    def start(self) -> None:
        """Read them all ahead: a first receive or put need not wait for them."""
        for key in ("consumer", "stream", "broker"):
            self._refresh(key)

    def clear(self) -> None:
        """Forget what was read: the next use reads again."""
        self._values.clear()

    def _refresh(self, key: str) -> asyncio.Task[Any]:
        """Read setting ``key`` from the broker in a task of its own (one at a time), which stores it
        for SCHEDULE_TTL seconds."""
        task = self._fetching.get(key)
        if task is None or task.done():
            task = self._session.spawn(self._fetch(key))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no warning
            self._fetching[key] = task
        return task

    async def _fetch(self, key: str) -> Any:
        read = {"consumer": self._read_consumer, "stream": self._read_stream, "broker": self._read_broker}[key]
        value = await read()
        self._values[key] = (time.monotonic() + (CONSUMER_TTL if key == "consumer" else SCHEDULE_TTL), value)
        return value

    async def fresh(self, key: str) -> Any:
        """Setting ``key`` read now, or by the read under way (what a decision that cannot be undone
        rests on)."""
        return await self._read(key)

    async def _read(self, key: str) -> Any:
        """The read of ``key`` under way (or a new one), awaited: ``close`` cancels it, which its
        waiters hear as "Client is closed.", not as a cancel of their own (a TaskGroup, a
        supervisor would take that for one)."""
        task = self._refresh(key)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and current is not None and not current.cancelling():
                raise RuntimeError("Client is closed.") from None
            raise

    def cached(self, key: str) -> Any:
        """Setting ``key`` as last read, without awaiting anything (None if never read; a stale one
        is refreshed in the background): what a receive reads once a message, at no cost of a
        coroutine."""
        found = self._values.get(key)
        if found is None:
            return None
        if time.monotonic() > found[0]:
            self._refresh(key)
        return found[1]

    async def _setting(self, key: str) -> Any:
        """A setting as last read: read now if never read; once stale, the stale value is used while
        a fresh one is read in the background."""
        if key in self._values:
            return self.cached(key)
        try:
            return await self._read(key)
        except BrokerUnavailable:  # the read ahead at connect met a moment the broker did not answer
            return await self._read(key)

    async def _read_consumer(self) -> dict[str, Any]:
        credentials = self._session.credentials
        info = await self._session.info(f"CONSUMER.INFO.{credentials.stream}.{credentials.consumer}",
                                        missing=CONSUMER_NOT_FOUND)
        if info is None:  # a pull from it would wait on nothing, for ever: say so
            raise NotFound(f"The queue has no consumer {credentials.consumer!r}: the credentials' consumer must "
                           "be the one 'enclave queue credentials' prints (worker).")
        config = info.get("config", {})
        return {"ack_wait": int(config.get("ack_wait", 30 * 10**9)) / 1e9,
                "backoff": [step / 1e9 for step in (config.get("backoff") or [])],
                "max_deliver": int(config.get("max_deliver", -1))}

    async def _read_stream(self) -> StreamSettings:
        config = (await self._session.info(f"STREAM.INFO.{self._session.credentials.stream}"))["config"]
        lanes = envelope.lane_subject(self._session.subject, LANES[0]) in config.get("subjects", [])
        return StreamSettings(int(config["max_msg_size"]) - HEADER_ROOM, lanes,
                              int(config.get("duplicate_window", 0)) / 1e9)

    async def _read_broker(self) -> bool:
        """Whether the broker fsyncs every write before acknowledging it (``ENCLAVE_SYNC=always``),
        as the control plane says; assumed when it cannot say (not running, an older one)."""
        try:
            answer = await self._session.desk("broker", {}, timeout=BROKER_TIMEOUT)
        except EnclaveError:
            return True
        return answer.get("sync", "always") == "always" if isinstance(answer, dict) else True

    async def consumer(self) -> dict[str, Any]:
        """The queue's consumer settings the SDK needs (lease, retry schedule, receives allowed):
        ``{"ack_wait": s, "backoff": [s, …], "max_deliver": n}``."""
        return await self._setting("consumer")

    async def backoff(self) -> list[float]:
        """The queue's retry schedule in seconds (the consumer's backoff)."""
        return (await self.consumer())["backoff"]

    async def stream(self) -> StreamSettings:
        return await self._setting("stream")

    async def synced_writes(self) -> bool:
        """Whether the broker syncs every write to disk before it acknowledges it: then a write
        costs an fsync, and putting many as one atomic batch costs one for them all. Asked at
        connect; until the control plane has answered (waited for BROKER_WAIT at most) it is yes."""
        found = self._values.get("broker")
        if found is None or time.monotonic() > found[0]:
            task = self._refresh("broker")
            if found is None:
                with contextlib.suppress(TimeoutError):
                    return bool(await asyncio.wait_for(asyncio.shield(task), BROKER_WAIT))
        return True if found is None else bool(found[1])

    async def max_message_bytes(self) -> int:
        """The largest body the queue accepts (its ``max_message_bytes``)."""
        return (await self.stream()).max_body

    async def levels(self) -> tuple[int, ...]:
        """The queue's priority levels, highest first: 9 to 0 on a queue with ``priorities``, else 0."""
        stream = self.cached("stream") or await self.stream()
        return PRIORITY_LEVELS if stream.lanes else (0,)
