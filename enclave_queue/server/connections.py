"""The HTTP server's connections, bounded: a connection must finish its request's head within
HEAD_TIMEOUT seconds of connecting (or of its last response), and at most MAX_CONNECTIONS are
open at once.

uvicorn (0.55) closes a keep-alive connection idle after a response, but never one that has sent
nothing yet, nor one whose head never ends. Measured before these bounds: 20,000 idle sockets
used up the process's file descriptors (the API, the console and the control plane's own broker
connections all failed, and every refused accept logged a traceback), and 100 heads that never
ended pinned 100 MiB (a head may be 1 MiB: api/guard.py's HEAD_READ_LIMIT) for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from typing import Any, Optional

from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT = 10.0  #: seconds a connection has to send a whole request head
MAX_CONNECTIONS = 1024  #: open at once; one more is closed as soon as it is accepted


class BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the bounds above."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= MAX_CONNECTIONS:
            transport.abort()  # nothing read, nothing answered: its descriptor is back at once
            return
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self.transport is None:  # refused in connection_made: nothing of it was set up
            return
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._stop_head_timer()  # a request is being answered: its head is in
        else:
            self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn's keep-alive timer runs until the next request's first bytes; this one until its
        # head is whole
        self._await_head()

    def _await_head(self) -> None:
        if self._head_timer is None and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._head_late)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()


def raise_file_limit() -> None:
    """Let this process open as many files as the system allows it (the soft limit up to the
    hard one): connections beyond MAX_CONNECTIONS are refused before the limit is near."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
