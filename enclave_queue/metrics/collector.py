"""Each queue's numbers and the broker's state, read fresh at scrape time: a prometheus_client
collector attached to the registry of metrics/instruments.py.

Per queue: its depth (broker/depth.py: two JetStream API requests a queue), its stored counters
and the nak counter's unsaved counts (read together, controller/naks.py), the broker's VARZ. One
read serves every scrape within ``CACHE_SECONDS``, so concurrent scrapers do not multiply the
broker's work. Beside them the broker's store as the storage guard last saw it (broker/storage.py,
every 0.5 s): whether it takes writes, the disk's free bytes, the streams that reported a write
error, the puts refused, and the supervisor's restarts of the broker.

Counters derived from the broker (sent, received, deleted) are kept monotonic here per queue: a
stream or consumer re-created behind the controller's back restarts its sequences, which is
added on top of what was counted before; a dip of ``deleted`` while a dead-letter move is
between its delete and its count is not shown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..broker.connection import BrokerConnection
from ..broker.depth import Depth, read_depths
from ..broker.storage import StorageGuard, StoreHealth
from ..queues.counters import removed_otherwise
from ..state.kv import Store
from ..state.queries import depth_reads, live_queues
from ..state.records import QueueCounters

log = logging.getLogger("enclave.metrics")

CACHE_SECONDS = 1.0  #: a scrape within this long of the last broker read reuses it
LABELS = ("project", "queue")

#: the stored counters by queue key and the naks not stored yet by queue id, read together
#: (controller/naks.py ``NakCounter.counted``)
Counted = Callable[[], Awaitable[tuple[Mapping[str, QueueCounters], Mapping[str, int]]]]

#: (name, help) of the per-queue gauges and counters, in the order they are exposed
QUEUE_GAUGES = (
    ("enclave_queue_messages_waiting", "Messages ready to be received."),
    ("enclave_queue_messages_in_flight", "Messages received and not yet deleted: hidden until their visibility "
                                         "timeout ends, or handed back with a delay that has not run out."),
    ("enclave_queue_messages_delayed", "Messages stored but not deliverable yet (scheduled)."),
    ("enclave_queue_dead_letters", "Messages on the queue's dead-letter queue (only for queues that have one)."),
    ("enclave_queue_oldest_message_age_seconds", "Age of the oldest message the queue holds; 0 when it is empty."),
)
QUEUE_COUNTERS = (
    ("enclave_queue_messages_sent", "Messages stored by the queue (the stream's last sequence)."),
    ("enclave_queue_messages_received", "Deliveries to workers, redeliveries included."),
    ("enclave_queue_messages_deleted", "Messages deleted (acked) by workers or by hand, redriven away, or past "
                                       "retention: removed other than by dead-lettering, discarding, expiry, "
                                       "clear, release or a delayed message's schedule firing."),
    ("enclave_queue_messages_expired", "Messages dropped unrun at their start deadline (put with ttl_s)."),
    ("enclave_queue_messages_nacked", "Messages handed back by a worker (nack), counted from the broker's "
                                      "MSG_NAKED advisories while the control process runs."),
    ("enclave_queue_messages_dead_lettered", "Messages moved to the dead-letter queue after their last receive."),
    ("enclave_queue_messages_discarded", "Messages dropped after their last receive (no dead-letter queue)."),
)


@dataclass
class Totals:
    """One queue's counters as last exposed, for keeping them monotonic."""

    base: dict[str, int] = field(default_factory=lambda: {"sent": 0, "received": 0, "removed": 0})
    last: dict[str, int] = field(default_factory=lambda: {"sent": 0, "received": 0, "removed": 0})
    deleted: int = 0
    nacked: int = 0

    def update(self, depth: Depth, counts: QueueCounters, unsaved_naks: int) -> dict[str, int]:
        # a sequence that went back means its stream (and with it the consumer) or its consumer
        # was re-created: it restarted from zero, on top of what was counted before
        stream_restarted = depth.sent < self.last["sent"] or depth.removed < self.last["removed"]
        restarted = {"sent": stream_restarted, "removed": stream_restarted,
                     "received": stream_restarted or depth.received < self.last["received"]}
        out = {}
        for name in ("sent", "received", "removed"):
            raw = getattr(depth, name)
            if restarted[name]:
                self.base[name] += self.last[name]
            self.last[name] = raw
            out[name] = self.base[name] + raw
        self.deleted = max(self.deleted, out["removed"] - removed_otherwise(counts, depth.delayed))
        self.nacked = max(self.nacked, counts.nacked + unsaved_naks)
        return {"sent": out["sent"], "received": out["received"], "deleted": self.deleted, "nacked": self.nacked,
                "dead_lettered": counts.dead_lettered, "discarded": counts.discarded, "expired": counts.expired}


@dataclass(frozen=True)
class _Snapshot:
    queues: list[tuple[str, str, Depth, dict[str, int]]]  #: project, name, depth, counters
    broker_up: bool
    broker_memory: Optional[int]


@dataclass(frozen=True)
class _Storage:
    """The store's state, read at every scrape (it is in memory: no cache needed)."""

    health: Optional[StoreHealth]
    refused: int  #: puts the storage guard refused
    restarts: int  #: broker restarts by the supervisor (after a crash, or to clear write errors)


class QueueMetrics:
    """A prometheus_client collector of per-queue numbers and the broker's state. ``refresh()``
    (async) reads them; ``collect()`` (called by the exposition, synchronously) shows the last read."""

    def __init__(self, store: Store, conn: BrokerConnection, applied: Callable[[], Collection[str]], counted: Counted,
                 restarts: Callable[[], int], storage: Optional[StorageGuard] = None,
                 answering: Callable[[], bool] = lambda: True) -> None:
        self.store = store
        self.conn = conn
        self.applied = applied  #: the account ids the running broker has loaded (controller/accounts.py)
        self.counted = counted
        self.restarts = restarts  #: the supervisor's restarts of the broker
        self.storage = storage
        self.answering = answering  #: whether the broker answers now (broker/liveness.py): else no read waits on it
        self.reads = 0  #: broker reads done (one per refresh outside the cache)
        self._snapshot = _Snapshot([], False, None)
        self._read_at = -CACHE_SECONDS
        self._lock = asyncio.Lock()
        self._totals: dict[str, Totals] = {}  #: by queue id

    async def refresh(self) -> None:
        async with self._lock:  # a scrape that arrives during a read waits for it and uses it
            if time.monotonic() - self._read_at < CACHE_SECONDS:
                return
            self._snapshot = await self._read()
            self._read_at = time.monotonic()
            self.reads += 1

    async def _read(self) -> _Snapshot:
        if not self.answering():  # stopped or hung: every read would wait for its timeout, the scrape with it
            return _Snapshot([], False, None)
        try:
            memory: Optional[int] = int((await self.conn.varz())["mem"])
        except Exception:  # down, restarting, or not answering: that is what broker_up says
            # and the queues' reads are not tried: each would wait out its own timeout after this
            # one's (a broker hung as a scrape began made it take 15 s, past Prometheus's 10)
            return _Snapshot([], False, None)
        try:
            queues = await self._read_queues()
        except Exception as exc:  # the state store not answering: the broker's numbers still go out
            log.warning("queue metrics not read: %s", exc)
            queues = []
        return _Snapshot(queues, memory is not None, memory)

    async def _read_queues(self) -> list[tuple[str, str, Depth, dict[str, int]]]:
        records = await live_queues(self.store, self.applied())
        depths = await read_depths(self.conn, depth_reads(records))
        counters, unsaved = await self.counted()  # together, so a flush cannot fall in between
        out = []
        for record, depth in zip(records, depths, strict=True):
            if not isinstance(depth, Depth):
                continue  # not ready yet (or its account is being reloaded): no numbers this time
            totals = self._totals.setdefault(record.id, Totals())
            counts = counters.get(record.key) or QueueCounters()
            out.append((record.spec.project, record.spec.name, depth,
                        totals.update(depth, counts, unsaved.get(record.id, 0))))
        for gone in set(self._totals) - {record.id for record in records}:
            del self._totals[gone]
        return out

    def describe(self) -> Iterator[Metric]:
        return self._families(_Snapshot([], False, None), _Storage(None, 0, 0))

    def collect(self) -> Iterator[Metric]:
        storage = self.storage
        return self._families(self._snapshot, _Storage(storage.health if storage else None,
                                                       storage.refused if storage else 0,
                                                       self.restarts()))

    @staticmethod
    def _families(snapshot: _Snapshot, storage: _Storage) -> Iterator[Metric]:
        gauges = {name: GaugeMetricFamily(name, text, labels=LABELS) for name, text in QUEUE_GAUGES}
        counters = {name: CounterMetricFamily(name, text, labels=LABELS) for name, text in QUEUE_COUNTERS}
        for project, name, depth, totals in snapshot.queues:
            labels = [project, name]
            values: dict[str, Any] = {
                "enclave_queue_messages_waiting": depth.waiting,
                "enclave_queue_messages_in_flight": depth.in_flight,
                "enclave_queue_messages_delayed": depth.delayed,
                "enclave_queue_dead_letters": depth.dead,
                "enclave_queue_oldest_message_age_seconds": depth.oldest_age_seconds or 0.0,
            }
            for metric, value in values.items():
                if value is not None:
                    gauges[metric].add_metric(labels, value)
            for metric in counters:
                counters[metric].add_metric(labels, totals[metric.removeprefix("enclave_queue_messages_")])
        yield from gauges.values()
        yield from counters.values()
        up = GaugeMetricFamily("enclave_broker_up", "1 if the broker answered the control plane at this scrape, else 0.")
        up.add_metric([], 1 if snapshot.broker_up else 0)
        yield up
        memory = GaugeMetricFamily("enclave_broker_memory_bytes", "The broker's resident memory (its VARZ 'mem').")
        if snapshot.broker_memory is not None:
            memory.add_metric([], snapshot.broker_memory)
        yield memory
        yield from _storage_families(storage)


def _storage_families(storage: _Storage) -> Iterator[Metric]:
    health = storage.health
    ok = GaugeMetricFamily("enclave_broker_storage_ok", "1 if the broker's store takes writes: its disk has more "
                           "free than the headroom and no stream reported a write error; 0 while puts are refused.")
    free = GaugeMetricFamily("enclave_store_free_bytes", "Bytes free on the filesystem of the broker's store.")
    errors = GaugeMetricFamily("enclave_broker_store_write_errors",
                               "Streams of the broker that reported a write error (until it is restarted).")
    if health is not None:
        ok.add_metric([], 1 if health.ok else 0)
        free.add_metric([], health.free_bytes)
        errors.add_metric([], len(health.write_errors))
    yield from (ok, free, errors)
    refused = CounterMetricFamily("enclave_puts_refused", "Puts refused because the broker's store could not take "
                                  "them (a full disk), answered StorageFull.")
    refused.add_metric([], storage.refused)
    yield refused
    restarts = CounterMetricFamily("enclave_broker_restarts", "Restarts of the broker by the supervisor: after it "
                                   "died, or to clear its store's write errors once the disk had room again.")
    restarts.add_metric([], storage.restarts)
    yield restarts
