"""A ready queue's stream and consumers as the broker reports them: their info, and the last
sequence each consumer delivered. A stream or consumer that does not answer (not created yet, or
its account being loaded) means the queue is not ready: Conflict (lookup.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import nats.js.errors

from ..broker.connection import BrokerConnection
from ..envelope import lane_subject
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


async def floors(conn: BrokerConnection, record: QueueRecord) -> dict[str, int]:
    """The last sequence each consumer delivered, by the subject it delivers: a message at or
    below it has been taken (it is in flight), one above it waits."""
    subject = subject_for(record.spec.project, record.spec.name)
    lanes = levels(record)
    infos = await asyncio.gather(*(consumer_info(conn, record, lane_consumer(level)) for level in lanes))
    return {lane_subject(subject, level): info.delivered.stream_seq for level, info in zip(lanes, infos, strict=True)}
