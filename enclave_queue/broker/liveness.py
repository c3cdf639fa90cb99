"""Whether the broker answers: a request to a subject nobody listens on, on the control plane's
connection every PING_SECONDS, which the broker itself answers ("no responders").

A broker that is stopped (SIGSTOP), or hung, keeps its TCP connections open: the client library
sees it connected, and every request to it waits for its timeout. ``/healthz`` and ``/metrics``
ask ``Liveness.answering`` instead, which is False once no answer came for SILENT_SECONDS: the
health says ``unavailable`` at once, and a scrape answers without waiting on the broker.

Not nats-py's ``flush`` (a PING): when one times out it cancels its future, and the PONG that
comes once the broker runs again is set on the cancelled future, which fails the connection's
reading task.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Optional

import nats.errors
from nats.aio.client import Client

from .tasks import keep_running, stop_tasks

PING_SECONDS = 1.0  #: between two requests
PONG_TIMEOUT = 2.0  #: seconds a request waits for the broker's answer
SILENT_SECONDS = 3.0  #: seconds without an answer after which the broker counts as not answering


class Liveness:
    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.subject = f"{nc.new_inbox()}.liveness"  #: nobody subscribes to it
        self.answered_at = time.monotonic()  #: when the broker last answered (or the watch started)
        self._task: Optional[asyncio.Task[None]] = None

    @property
    def answering(self) -> bool:
        return time.monotonic() - self.answered_at < SILENT_SECONDS

    @property
    def silent_for(self) -> float:
        """Seconds since the broker last answered."""
        return time.monotonic() - self.answered_at

    async def start(self) -> None:
        self.answered_at = time.monotonic()
        self._task = keep_running(self._watch, "broker-liveness")

    async def stop(self) -> None:
        await stop_tasks([self._task])

    async def _watch(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError, nats.errors.Error, OSError):
                with contextlib.suppress(nats.errors.NoRespondersError):  # the broker's own answer
                    await self.nc.request(self.subject, b"", timeout=PONG_TIMEOUT)
                self.answered_at = time.monotonic()
            await asyncio.sleep(PING_SECONDS)
