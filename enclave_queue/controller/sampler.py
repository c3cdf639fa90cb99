"""The depth sampler: every ``sample_seconds``, how many messages each live queue holds, kept 7 days.

Each round reads every queue's depth from one server-wide JSZ snapshot (jsz.py: a request per 256
accounts instead of one a queue; a queue the snapshot lacks is read on its own, broker/depth.py)
and publishes one sample a queue to the ``ENCLAVE_SAMPLES`` stream in the control account,
subject ``samples.<queue id>``, pipelined: all the round's publishes go out at once and their
PubAcks come back to one inbox. A sample's format is broker/depth.py's; reading a
queue's history is queues/samples.py's. Samples of a deleted queue expire with the stream's max
age; a re-created queue has a new id, so it never shows the old queue's history. After each round,
the queues holding messages they do not deliver have their delay subjects checked for anything
that is not a one-shot delay (schedulecheck.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Optional

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from ..broker.config import CONTROL_STREAM_BYTES
from ..broker.connection import BrokerConnection, ensure_stream
from ..broker.depth import Depth, encode_sample, read_depths
from ..broker.storage import StorageGuard
from ..broker.tasks import keep_running, stop_tasks
from ..errors import BrokerUnavailable
from ..names import SAMPLES_STREAM, samples_subject
from ..state.kv import Store
from ..state.queries import depth_reads, live_queues
from ..state.records import QueueRecord
from .accounts import Accounts
from .jsz import Snapshot
from .schedulecheck import ScheduleCheck

log = logging.getLogger("enclave.sampler")

KEEP_SECONDS = 7 * 24 * 3600.0  #: how long a sample is kept
#: the stream's max_bytes is CONTROL_STREAM_BYTES[SAMPLES_STREAM], sized for the store when the
#: sampler starts (256 MiB from a 1 GiB store up): the oldest samples go first past it. A sample
#: takes 57 bytes (measured), so at 256 MiB 1000 queues sampled every 60 s keep about 3 days of
#: history, 100 queues the full 7
PUBLISH_TIMEOUT = 10.0  #: seconds a round's PubAcks may take
CHECKS_AT_ONCE = 16  #: queues whose delay subjects are read at the same time


class Sampler:
    """Samples every live queue's depth every ``sample_seconds``, in the control process."""

    def __init__(self, store: Store, conn: BrokerConnection, accounts: Accounts, sample_seconds: float,
                 storage: Optional[StorageGuard] = None) -> None:
        self.store = store
        self.conn = conn
        self.accounts = accounts  #: its ``applied`` ids: the queues the broker runs (accounts.py)
        self.sample_seconds = sample_seconds
        self.storage = storage  #: while its store is short of space, no samples take what is left
        self.rounds = 0
        self.samples = 0  #: samples stored since start
        self._task: Optional[asyncio.Task[None]] = None
        self.schedules = ScheduleCheck(conn)

    async def start(self) -> None:
        config = api.StreamConfig(
            name=SAMPLES_STREAM, subjects=[samples_subject("*")], retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_age=KEEP_SECONDS, max_bytes=CONTROL_STREAM_BYTES[SAMPLES_STREAM],
            discard=api.DiscardPolicy.OLD, allow_direct=True, num_replicas=1,
        )
        await ensure_stream(self.conn.js, config)
        self._task = keep_running(self._rounds, "depth-sampler")

    async def stop(self) -> None:
        await stop_tasks([self._task])

    async def _rounds(self) -> None:
        # the first round one period after start, not while the reconciler looks at every queue
        due = time.monotonic()
        while True:
            # a round that overran its period starts the next one now, without catching up
            due = max(due + self.sample_seconds, time.monotonic())
            await asyncio.sleep(due - time.monotonic())
            if self.storage is not None and not self.storage.health.ok:
                continue  # the room left on the disk is for the control state's records
            try:
                await self.sample()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker restarting, say: the next round tries again
                log.warning("depth sample failed: %s", exc)

    async def sample(self) -> int:
        """Read every live queue's depth and store one sample each; returns how many were stored."""
        records = await live_queues(self.store, self.accounts.applied)
        source: object = self.conn
        if records:
            try:
                source = await Snapshot.read(self.conn)
            except BrokerUnavailable as exc:  # one request a queue, as before the snapshot
                log.info("depth snapshot failed (%s); reading each queue", exc)
        depths = await read_depths(source, depth_reads(records))  # type: ignore[arg-type]  # only account_jsz
        samples = [(samples_subject(r.id), encode_sample(d)) for r, d in zip(records, depths, strict=True)
                   if isinstance(d, Depth)]  # a queue not ready yet has no sample this round
        stored = await self._publish(samples)
        await self._check_schedules([r for r, d in zip(records, depths, strict=True) if isinstance(d, Depth) and d.delayed])
        self.schedules.keep_only({r.id for r in records})
        self.rounds += 1
        self.samples += stored
        return stored

    async def _check_schedules(self, records: list[QueueRecord]) -> None:
        """What apps stored on the delay subjects of the queues holding undelivered messages, looked
        at once (schedulecheck.py): what is not a one-shot delay goes."""
        gate = asyncio.Semaphore(CHECKS_AT_ONCE)

        async def one(record: QueueRecord) -> None:
            async with gate:
                try:
                    await self.schedules.check(record)
                except Exception as exc:  # the next round looks again
                    log.info("delay subjects of %s not checked: %s", record.key, exc)

        await asyncio.gather(*(one(record) for record in records))

    async def _publish(self, samples: list[tuple[str, bytes]]) -> int:
        """Publish all at once, each with its own reply subject under one inbox; count the PubAcks."""
        if not samples:
            return 0
        nc = self.conn.control
        inbox = nc.new_inbox()
        outstanding = len(samples)
        stored, errors = 0, []
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def on_ack(msg: Msg) -> None:
            nonlocal outstanding, stored
            outstanding -= 1
            status = (msg.headers or {}).get("Status")
            if status is not None or b'"error"' in msg.data:  # 503: no stream to store it
                errors.append(status or msg.data.decode(errors="replace"))
            else:
                stored += 1
            if outstanding == 0 and not settled.done():
                settled.set_result(None)

        sub = await nc.subscribe(f"{inbox}.*", cb=on_ack)
        try:
            for i, (subject, payload) in enumerate(samples):
                await nc.publish(subject, payload, reply=f"{inbox}.{i}")
            await asyncio.wait_for(settled, PUBLISH_TIMEOUT)
        except TimeoutError:
            errors.append(f"{outstanding} PubAcks missing after {PUBLISH_TIMEOUT:g} s")
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        if errors:
            log.warning("%d of %d depth samples not stored: %s", len(samples) - stored, len(samples), errors[0])
        return stored
