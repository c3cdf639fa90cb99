"""The control-plane lease: which node of a cluster does the work that must happen once.

Every node answers the API, the console, the desk and the auth callout; the reconciler, the
dead-letter mover and its sweep, the nak counter, the depth sampler, the desk's expiry of start
deadlines and the end of password graces run on one node at a time: the holder of this lease.

The lease is one key of a JetStream KV bucket, replicated like the rest of the control state,
whose entries live ``TTL`` seconds (the bucket's ``max_age``, counted by the broker). The holder
writes its node's name every ``RENEW`` seconds with compare-and-set on the revision it last wrote;
another node takes the key with ``create`` only once it has lapsed. A holder that cannot renew
for ``GIVE_UP`` seconds (its broker lost, or cut off in a minority that cannot write) stops its
work before the key can lapse for the others, so two nodes never hold it at once. A node that
restarts finds its own name there (one control process per data dir and node name) and goes on
holding it, without waiting for it to lapse.

Why a KV key and not the JetStream meta leader: the meta leader is a broker's role, chosen for the
broker's reasons; it stays put when the control process beside it dies, and moves when nothing is
wrong with the control plane. The lease is held by the control process itself, lapses when it
stops renewing, and needs nothing but the replicated state it already writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Optional

import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from ..broker.tasks import stop_tasks
from ..names import LEASE_BUCKET
from ..retry import retry_unavailable

log = logging.getLogger("enclave.controller")

KEY = "control-plane"
TTL = 6.0  #: seconds a lease lasts unless renewed
RENEW = 1.0  #: seconds between renewals (and between tries of a node without it)
GIVE_UP = 3.5  #: seconds without a renewal after which the holder stops its work (well before TTL)
#: what a write of the lease may meet that only means "not now"
NOT_NOW = (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError)


class Lease:
    """``start()``: take part in the election; ``acquired`` / ``lost`` are awaited as the lease
    comes and goes (one at a time, in order). ``held``: whether this node does the work now."""

    def __init__(self, js: JetStreamContext, node: str, replicas: int,
                 acquired: Callable[[], Awaitable[None]], lost: Callable[[], Awaitable[None]]) -> None:
        self.js, self.node, self.replicas = js, node, replicas
        self._acquired, self._lost = acquired, lost
        self.held = False
        self._kv: Optional[KeyValue] = None
        self._revision = 0
        self._renewed = 0.0
        self._task: Optional[asyncio.Task[None]] = None
        self._starting: Optional[asyncio.Task[None]] = None  #: the holder's work being started

    async def start(self) -> None:
        try:
            self._kv = await retry_unavailable(lambda: self.js.key_value(LEASE_BUCKET))
        except nats.js.errors.BucketNotFoundError:
            self._kv = await retry_unavailable(lambda: self.js.create_key_value(api.KeyValueConfig(
                bucket=LEASE_BUCKET, history=1, ttl=TTL, storage=api.StorageType.FILE, replicas=self.replicas)))
        await self._round()  # a node alone, or back on its own lease, has it before start() returns
        self._task = asyncio.create_task(self._loop(), name="control-lease")
        if self._starting is not None:  # its work started too (renewed meanwhile: the loop runs)
            await asyncio.wait({self._starting})

    async def stop(self) -> None:
        """Stop taking part; if held, the work stops and the key is deleted (another node takes
        it at once rather than after TTL)."""
        await stop_tasks([self._task])
        if self.held:
            await self._drop()
            await self._release()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(RENEW)
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the election end: log, and try again next round
                log.exception("control-plane lease round failed")

    async def _round(self) -> None:
        assert self._kv is not None
        if self.held and time.monotonic() - self._renewed > GIVE_UP:
            # not renewed for that long without a failed try: this process was paused (SIGSTOP, a
            # frozen VM); its lease may be another node's by now, so the work stops before anything
            # else is awaited, and this node asks for the lease again as any other would
            log.warning("node %s has not renewed the control-plane lease for %.1f s (paused?); stopping its work",
                        self.node, time.monotonic() - self._renewed)
            await self._drop()
        if self.held:
            try:
                self._revision = await asyncio.wait_for(
                    self._kv.update(KEY, self.node.encode(), last=self._revision), RENEW * 2)
                self._renewed = time.monotonic()
            except nats.js.errors.KeyWrongLastSequenceError:
                log.warning("node %s lost the control-plane lease to another node", self.node)
                await self._drop()
            except NOT_NOW as exc:
                if time.monotonic() - self._renewed > GIVE_UP:
                    log.warning("node %s could not renew the control-plane lease for %.1f s (%s); "
                                "stopping its work", self.node, GIVE_UP, exc)
                    await self._drop()
            return
        try:
            self._revision = await asyncio.wait_for(self._kv.create(KEY, self.node.encode()), RENEW * 2)
        except nats.js.errors.KeyWrongLastSequenceError:  # someone holds it (maybe this node, before)
            if not await self._take_back():
                return
        except NOT_NOW:
            return
        self._renewed = time.monotonic()
        self.held = True
        log.info("node %s holds the control-plane lease", self.node)
        # the work starts in a task of its own while this loop goes on renewing: a start that
        # takes longer than the key lives (a cluster whose majority just came back) must not let
        # it lapse for another node to take while this one starts the same work
        self._starting = asyncio.create_task(self._start_work(), name="control-work-start")

    async def _start_work(self) -> None:
        """Start the holder's work; a start that fails gives the lease up (what started is
        stopped), so the work is tried again, here or on another node, instead of this node
        holding the lease with its work half started (nothing reconciled, no dead letter moved)."""
        try:
            await self._acquired()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("node %s could not start the control plane's work; giving the lease up", self.node)
            if self.held:
                await self._drop()
                await self._release()

    async def _take_back(self) -> bool:
        """The key exists: held by this node before it restarted (take it back at once), or by
        another."""
        assert self._kv is not None
        try:
            entry = await self._kv.get(KEY)
        except (nats.js.errors.KeyNotFoundError, *NOT_NOW):
            return False
        if (entry.value or b"").decode(errors="replace") != self.node:
            return False
        try:
            self._revision = await self._kv.update(KEY, self.node.encode(), last=entry.revision)
        except NOT_NOW:
            return False
        return True

    async def _drop(self) -> None:
        self.held = False
        starting, self._starting = self._starting, None
        if starting is not None and starting is not asyncio.current_task() and not starting.done():
            await stop_tasks([starting])  # the lease went while the work was starting: stopped below
        await self._lost()

    async def _release(self) -> None:
        """Delete the key (held by this node until now): another node may take it at once."""
        if self._kv is not None:
            with contextlib.suppress(*NOT_NOW):
                await asyncio.wait_for(self._kv.delete(KEY, last=self._revision), 2)
