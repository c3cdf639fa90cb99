"""The nak counter: how many times workers handed a message back, per queue.

The broker keeps no count of naks. It emits a MSG_NAKED advisory for each one (measured on
nats-server 2.15.1: ``io.nats.jetstream.advisory.v1.nak``, for a plain ``-NAK`` and for one with a
delay alike), but only while someone listens: every queue account exports its consumer's
advisories to the control account as ``adv.<id>.<KIND>`` (broker/config.py), and this counter
subscribes to ``adv.*.MSG_NAKED.*`` there. It is a plain subscription, not a stream: keeping every
nak in a stream would cost the broker a synced write per nak, and the mover's advisory stream
keeps only MAX_DELIVERIES.

Counts gather in memory and are added to the queue's ``nacked`` counter in the state store every
``FLUSH_SECONDS`` (one compare-and-set per queue that had naks) and when the process stops. So
the count survives restarts, except the naks of the last few seconds before a crash and the naks
made while the control process is down (no one listens then, so the broker sends nothing).
Readers take the stored counters and the naks not stored yet together (``counted``, ``counts``),
so a flush cannot fall in between and count naks twice or not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Any

import nats.errors
from nats.aio.msg import Msg

from ..broker.connection import BrokerConnection
from ..broker.tasks import stop_tasks
from ..errors import EnclaveError
from ..names import advisory_subject
from ..state.kv import Store
from ..state.records import QueueCounters, QueueRecord

log = logging.getLogger("enclave.naks")

FLUSH_SECONDS = 5.0  #: seconds between additions to the stored counters
STOP_FLUSH_TIMEOUT = 3.0  #: seconds the last addition may take when the process stops
PARALLEL = 32  #: counters updated at the same time


class NakCounter:
    def __init__(self, store: Store, conn: BrokerConnection, flush_seconds: float = FLUSH_SECONDS) -> None:
        self.store = store
        self.conn = conn
        self.flush_seconds = flush_seconds
        #: queue id -> naks not yet added to the stored counter. Read with ``lock`` held, together
        #: with the stored counters, for a sum that a flush in between cannot count twice
        self.pending: Counter[str] = Counter()
        self.lock = asyncio.Lock()
        self._sub: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._sub = await self.conn.control.subscribe(advisory_subject("*", "MSG_NAKED"), cb=self._on_nak)
        self._task = asyncio.create_task(self._flushes(), name="nak-counter")

    async def stop(self) -> None:
        """Stop listening and store what was counted (before the broker connection closes)."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        await stop_tasks([self._task])
        try:
            await asyncio.wait_for(self.flush(), STOP_FLUSH_TIMEOUT)
        except (EnclaveError, nats.errors.Error, TimeoutError) as exc:
            log.warning("%d naks not stored: %r", sum(self.pending.values()), exc)

    async def counted(self) -> tuple[dict[str, QueueCounters], dict[str, int]]:
        """Every queue's stored counters, by queue key, and the naks not stored yet, by queue id."""
        async with self.lock:
            counters = {key: counts for key, counts, _ in await self.store.counters.items()}
            return counters, dict(self.pending)

    async def counts(self, record: QueueRecord) -> tuple[QueueCounters, int]:
        """One queue's stored counters and the naks of it not stored yet."""
        async with self.lock:
            return await self.store.counts(record.key), self.pending.get(record.id, 0)

    async def _on_nak(self, msg: Msg) -> None:
        self.pending[msg.subject.split(".")[1]] += 1

    async def _flushes(self) -> None:
        while True:
            await asyncio.sleep(self.flush_seconds)
            try:
                await self.flush()
            except (EnclaveError, nats.errors.Error) as exc:
                log.warning("nak counts not stored yet: %s", exc)

    async def flush(self) -> None:
        """Add the naks counted so far to each live queue's stored ``nacked`` counter. A queue that
        is gone or being deleted drops its count (its counters are deleted with it)."""
        async with self.lock:
            if not self.pending:
                return
            keys = {record.id: key for key, record, _ in await self.store.queues.items() if not record.deleting}
            gate = asyncio.Semaphore(PARALLEL)

            async def add(queue_id: str, naks: int) -> None:
                async with gate:
                    await self.store.count(keys[queue_id], "nacked", naks)
                self.pending.subtract({queue_id: naks})  # naks that came in meanwhile stay
                if self.pending[queue_id] <= 0:
                    del self.pending[queue_id]

            taken = [(queue_id, naks) for queue_id, naks in self.pending.items() if queue_id in keys]
            for gone in set(self.pending) - set(keys):
                del self.pending[gone]
            failed = [r for r in await asyncio.gather(*(add(q, n) for q, n in taken), return_exceptions=True)
                      if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
