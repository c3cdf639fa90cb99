"""The control plane's connections into queue accounts, opened on demand and bounded in number.

In operator mode nothing of a queue account is imported into the control account (that cost
grows with every queue), so the control plane reaches a queue's JetStream API, its subject and
its ack subjects as a user of the queue's own account: a JWT minted for the queue's control key
(auth/keys.py), signed by the account's key. ``lease(queue_id)`` hands out the account's
connection, opening it if needed (2–3 ms on the loopback); at most ``size`` stay open, and the
one used least recently, among those nobody holds, is closed first: when one is opened, or when
one held while the pool was over its bound is let go.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Optional

import nats
import nats.errors
from nats.aio.client import Client

from ..auth import jwt
from ..auth.keys import OperatorKeys
from ..errors import BrokerUnavailable
from .claims import control_user
from .tasks import stop_tasks

log = logging.getLogger("enclave.broker")

#: queue accounts whose connections are open at once: the dead-letter mover holds two a failing
#: queue (its own and its DLQ's), and at 64, 100 queues failing at once had the pool close and
#: reopen connections all the time (measured: a move's p50 about 1.0 s against 0.6 s at 256)
POOL_SIZE = 256
#: of those, how many may stay open unused for longer than IDLE_SECONDS: past a burst the pool
#: shrinks back, so a thousand creates leave no more connections open (on both sides) than this
KEEP_IDLE = 64
IDLE_SECONDS = 10.0
CONNECT_TIMEOUT = 2.0  #: seconds
CLOSE_TIMEOUT = 2.0  #: seconds one connection may take to close when the control process stops


@dataclass
class _Open:
    nc: Client
    holders: int = 0
    used: float = field(default_factory=time.monotonic)


class AccountConnections:
    """One connection per queue account, shared by everyone who leases it."""

    def __init__(self, url: str, keys: OperatorKeys, size: int = POOL_SIZE, keep_idle: int = KEEP_IDLE,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        self._url, self.keys, self._size = url, keys, size
        self._keep_idle, self._idle_seconds = min(keep_idle, size), idle_seconds
        self._open: dict[str, _Open] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        #: deleted queues' accounts (``forget``; ids are never reused): a connection opened into
        #: one after its deletion would be closed by the broker and reconnect for ever
        self._gone: set[str] = set()
        self._closed = False
        self._shrink: Optional[asyncio.TimerHandle] = None  #: the trim due once unused ones are stale
        self._trims: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._open)

    async def _connect(self, queue_id: str) -> Client:
        user = self.keys.queue_control_user(queue_id)
        token = jwt.encode(control_user(self.keys.public(user), "control"), self.keys.queue_account(queue_id)).encode()
        async def on_error(exc: Exception) -> None:  # a broker restart; nats-py reconnects by itself
            log.debug("connection to queue account %s: %s", queue_id, exc)

        try:
            return await nats.connect(
                self._url, user_jwt_cb=lambda: token, name=f"enclave-control-{queue_id}", error_cb=on_error,
                signature_cb=lambda nonce: base64.b64encode(user.sign(nonce.encode())),
                connect_timeout=CONNECT_TIMEOUT, max_reconnect_attempts=-1, reconnect_time_wait=0.2,
                allow_reconnect=True, pending_size=64 * 1024 * 1024,
            )
        except Exception as exc:  # nats-py raises several unrelated types here
            raise BrokerUnavailable(f"Cannot reach queue account {queue_id}: {exc}") from exc

    async def _acquire(self, queue_id: str) -> _Open:
        if self._closed:
            raise BrokerUnavailable("The control plane is stopping.")
        if queue_id in self._gone:
            raise BrokerUnavailable(f"Queue account {queue_id} was deleted.")
        entry = self._open.get(queue_id)
        if entry is not None and not entry.nc.is_closed:  # the common case: open, nothing to wait for
            entry.holders += 1
            entry.used = time.monotonic()
            return entry
        lock = self._opening.setdefault(queue_id, asyncio.Lock())
        async with lock:
            entry = self._open.get(queue_id)
            opened = entry is None or entry.nc.is_closed
            if opened:
                nc = await self._connect(queue_id)
                if self._closed or queue_id in self._gone:  # closed or forgotten while this connected
                    await nc.close()
                    raise BrokerUnavailable(f"The control plane is stopping, or queue account {queue_id} was deleted.")
                entry = self._open[queue_id] = _Open(nc)
            assert entry is not None
            entry.holders += 1
            entry.used = time.monotonic()
        if opened:  # only an opening grows the pool: a lease of an open one costs no trim (a sort of
            await self._trim()  # them all: a sixteenth of the mover's time with 200 open)
        return entry

    async def _trim(self) -> None:
        # every connection to close is taken out before the first close is awaited: a trim that
        # ran during that await must not find (or pop again) one this trim chose
        idle = sorted((e.used, qid) for qid, e in self._open.items() if e.holders == 0)
        stale = time.monotonic() - self._idle_seconds
        over = max(0, len(self._open) - self._size)
        # beyond keep_idle, the longest unused go once unused for idle_seconds
        over += sum(1 for used, _ in idle[over:max(over, len(self._open) - self._keep_idle)] if used < stale)
        closing = [self._open.pop(queue_id) for _, queue_id in idle[:over]]
        for entry in closing:
            await entry.nc.close()
        if len(self._open) > self._keep_idle and not self._closed and self._shrink is None:
            self._shrink = asyncio.get_running_loop().call_later(self._idle_seconds, self._shrink_later)

    def _shrink_later(self) -> None:
        self._shrink = None
        task = asyncio.ensure_future(self._trim())
        self._trims.add(task)
        task.add_done_callback(self._trims.discard)

    @contextlib.asynccontextmanager
    async def lease(self, queue_id: str) -> AsyncIterator[Client]:
        """The queue account's connection, held for the block (it is not closed while held)."""
        entry = await self._acquire(queue_id)
        try:
            yield entry.nc
        finally:
            entry.holders -= 1
            entry.used = time.monotonic()
            if entry.holders == 0 and len(self._open) > self._size:  # over the bound while this was held
                await self._trim()

    async def forget(self, queue_id: str) -> None:
        """Close a deleted queue's connection (its account is gone), and open none into it again."""
        self._gone.add(queue_id)
        entry = self._open.pop(queue_id, None)
        self._opening.pop(queue_id, None)
        if entry is not None:
            await entry.nc.close()

    async def close(self) -> None:
        self._closed = True
        if self._shrink is not None:
            self._shrink.cancel()  # a timer, not a task
        await stop_tasks(list(self._trims))
        entries, self._open = list(self._open.values()), {}
        for entry in entries:
            with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
                await asyncio.wait_for(entry.nc.close(), CLOSE_TIMEOUT)  # a stuck one must not hold up the stop
