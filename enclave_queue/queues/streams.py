"""A ready queue's stream and consumers as the broker reports them: their info, and the last
sequence each consumer delivered. A stream or consumer that does not answer (not created yet, or
its account being loaded) means the queue is not ready: Conflict (lookup.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import nats.js.errors

from ..broker.connection import BrokerConnection
from ..envelope import lane_subject, leases_over
from ..names import CONSUMER, LANES, lane_consumer, stream_name
from ..retry import UNAVAILABLE, retry_unavailable
from ..spec import subject_for
from ..state.records import QueueRecord
from .lookup import not_ready


async def stream_info(conn: BrokerConnection, record: QueueRecord) -> Any:
    """The queue's StreamInfo; Conflict (not ready) if it does not answer."""
    try:
        return await retry_unavailable(lambda: conn.queue_js(record.id).stream_info(stream_name(record.id)))
    except (*UNAVAILABLE, nats.js.errors.NotFoundError):
        raise not_ready(record) from None


async def consumer_info(conn: BrokerConnection, record: QueueRecord, consumer: str = CONSUMER) -> Any:
    """One of the queue's consumers' ConsumerInfo; Conflict (not ready) if it does not answer."""
    try:
        return await retry_unavailable(
            lambda: conn.queue_js(record.id).consumer_info(stream_name(record.id), consumer))
    except (*UNAVAILABLE, nats.js.errors.NotFoundError):
        raise not_ready(record) from None


def levels(record: QueueRecord) -> tuple[int, ...]:
    """The queue's priority levels that have a consumer: 0, and 1–9 with ``priorities``."""
    return (0, *LANES) if record.spec.priorities else (0,)


@dataclass(frozen=True)
class Lane:
    """One consumer of a queue as it stands: the subject it delivers, the last sequence it
    delivered (a message stored at or below it was taken, one above it waits) and whether every
    lease it gave has run out (envelope.py ``leases_over``: then what it took and nobody
    deleted waits for its next receive too)."""

    subject: str
    floor: int
    leases_over: bool


async def lanes(conn: BrokerConnection, record: QueueRecord) -> dict[str, Lane]:
    """The queue's consumers (its own, and each priority lane's) by the subject they deliver."""
    subject = subject_for(record.spec.project, record.spec.name)
    levels_ = levels(record)
    infos = await asyncio.gather(*(consumer_info(conn, record, lane_consumer(level)) for level in levels_))
    now = datetime.now(UTC)
    return {lane_subject(subject, level): Lane(lane_subject(subject, level), info.delivered.stream_seq,
                                               bool(info.num_ack_pending) and _over(info, now))
            for level, info in zip(levels_, infos, strict=True)}


def _over(info: Any, now: datetime) -> bool:
    config = info.config
    return leases_over(info.delivered.last_active, float(config.ack_wait or 0), list(config.backoff or ()), now)
