"""The depth sampler: every ``sample_seconds``, how many messages each live queue holds, kept 7 days.

Each round reads every queue's depth (depth.py: two JetStream API requests a queue, 32 queues at a
time) and publishes one sample a queue to the ``ENCLAVE_SAMPLES`` stream in the control account,
subject ``samples.<queue id>``, pipelined: all the round's publishes go out at once and their
PubAcks come back to one inbox. A sample is the JSON array ``[waiting, in_flight, delayed, dead]``
(``dead`` is ``null`` for a queue without a dead-letter queue); its time is the broker's timestamp
of the stored message, so it costs no bytes of its own.

Reading a queue's history (``read_samples``) is a batched direct get: the broker finds the first
sample at or after the start time (``start_time`` with ``next_by_subj``) and streams up to
``READ_BATCH`` of that queue's samples per request, each request continuing after the last
sequence it got. No consumer is created. Samples of a deleted queue expire with the stream's
max age; a re-created queue has a new id, so it never shows the old queue's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any, Optional

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from ..broker.config import CONTROL_STREAM_BYTES
from ..broker.connection import BrokerConnection, ensure_stream
from ..broker.storage import StorageGuard
from ..broker.tasks import keep_running
from ..depth import Depth, depth_reads, read_depths
from ..errors import BrokerUnavailable, EnclaveError
from ..state.kv import Store
from ..state.records import QueueRecord
from .accounts import Accounts

log = logging.getLogger("enclave.sampler")

SAMPLES_STREAM = "ENCLAVE_SAMPLES"
KEEP_SECONDS = 7 * 24 * 3600.0  #: how long a sample is kept
#: the stream's max_bytes is CONTROL_STREAM_BYTES[SAMPLES_STREAM], sized for the store when the
#: sampler starts (256 MiB from a 1 GiB store up): the oldest samples go first past it. A sample
#: takes 57 bytes (measured), so at 256 MiB 1000 queues sampled every 60 s keep about 3 days of
#: history, 100 queues the full 7
PUBLISH_TIMEOUT = 10.0  #: seconds a round's PubAcks may take
READ_BATCH = 2000  #: samples one direct-get request returns
READ_TIMEOUT = 10.0  #: seconds one direct-get request may take


async def live_queues(store: Store, accounts: Accounts) -> list[QueueRecord]:
    """The queues whose depth can be read: not being deleted, their account loaded in the broker
    (a queue waiting for a reload would only make its reads wait for no responders)."""
    return [record for _, record, _ in sorted(await store.queues.items(), key=lambda item: item[0])
            if not record.deleting and record.id in accounts.applied]



def samples_subject(queue_id: str) -> str:
    return f"samples.{queue_id}"


def encode(depth: Depth) -> bytes:
    return json.dumps([depth.waiting, depth.in_flight, depth.delayed, depth.dead], separators=(",", ":")).encode()


def point(data: bytes, stamp: str) -> dict[str, Any]:
    """One sample as the API returns it: its time (ISO 8601, UTC) and the four counts."""
    waiting, in_flight, delayed, dead = json.loads(data)
    return {"t": _parse_stamp(stamp).isoformat(timespec="milliseconds"), "waiting": waiting,
            "in_flight": in_flight, "delayed": delayed, "dead": dead}


def _parse_stamp(stamp: str) -> datetime:
    """The broker's RFC 3339 timestamp (nanoseconds, ``Z``) as a datetime (microseconds)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}+00:00")


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Sampler:
    """Samples every live queue's depth every ``sample_seconds``, in the control process."""

    def __init__(self, store: Store, conn: BrokerConnection, accounts: Accounts, sample_seconds: float,
                 storage: Optional[StorageGuard] = None) -> None:
        self.store = store
        self.conn = conn
        self.accounts = accounts
        self.sample_seconds = sample_seconds
        self.storage = storage  #: while its store is short of space, no samples take what is left
        self.rounds = 0
        self.samples = 0  #: samples stored since start
        self._task: Optional[asyncio.Task[None]] = None

    async def start(self) -> None:
        config = api.StreamConfig(
            name=SAMPLES_STREAM, subjects=[samples_subject("*")], retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_age=KEEP_SECONDS, max_bytes=CONTROL_STREAM_BYTES[SAMPLES_STREAM],
            discard=api.DiscardPolicy.OLD, allow_direct=True, num_replicas=1,
        )
        await ensure_stream(self.conn.js, config)
        self._task = keep_running(self._rounds, "depth-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

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
        records = await live_queues(self.store, self.accounts)
        depths = await read_depths(self.conn, depth_reads(records))
        samples = [(samples_subject(r.id), encode(d)) for r, d in zip(records, depths, strict=True)
                   if isinstance(d, Depth)]  # a queue not ready yet has no sample this round
        stored = await self._publish(samples)
        self.rounds += 1
        self.samples += stored
        return stored

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


async def read_samples(conn: BrokerConnection, queue_id: str, since: datetime) -> list[dict[str, Any]]:
    """A queue's samples stored at or after ``since``, oldest first (see ``point``)."""
    subject = samples_subject(queue_id)
    request: dict[str, Any] = {"start_time": _rfc3339(since), "next_by_subj": subject, "batch": READ_BATCH}
    points: list[dict[str, Any]] = []
    while True:
        batch, last_seq, pending = await _direct_get(conn, request)
        points += batch
        if not batch or not pending:
            return points
        request = {"seq": last_seq + 1, "next_by_subj": subject, "batch": READ_BATCH}


async def _direct_get(conn: BrokerConnection, request: dict[str, Any]) -> tuple[list[dict[str, Any]], int, int]:
    """One batched direct get: the points, the sequence of the last one, and how many of the
    subject's samples remain after it."""
    nc = conn.control
    inbox = nc.new_inbox()
    points: list[dict[str, Any]] = []
    last_seq, pending = 0, 0
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def collect(msg: Msg) -> None:
        nonlocal last_seq, pending
        headers = msg.headers or {}
        status = headers.get("Status")
        if status is None:
            last_seq = int(headers["Nats-Sequence"])
            points.append(point(msg.data, headers["Nats-Time-Stamp"]))
            return
        if status == "204":  # end of batch, with how many more there are
            pending = int(headers.get("Nats-Num-Pending") or 0)
        elif status != "404":  # 404: no (more) samples
            pending = 0
            if not done.done():
                done.set_exception(EnclaveError(f"The broker refused to read depth samples: {status} "
                                                f"{headers.get('Description', '')}".strip() + "."))
        if not done.done():
            done.set_result(None)

    sub = await nc.subscribe(inbox, cb=collect)
    try:
        await nc.publish(f"$JS.API.DIRECT.GET.{SAMPLES_STREAM}", json.dumps(request).encode(), reply=inbox)
        await asyncio.wait_for(done, READ_TIMEOUT)
    except TimeoutError:
        raise BrokerUnavailable("Reading depth samples timed out.") from None
    finally:
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    return points, last_seq, pending
