"""A queue's depth history: the samples controller/sampler.py stored, read back.

Reading is a batched direct get (broker/direct.py): the broker finds the first sample at or after
the start time (``start_time`` with ``next_by_subj``) and streams up to READ_BATCH of that queue's
samples per request, each request continuing after the last sequence it got. No consumer is
created. A sample's format is broker/depth.py's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ..broker.connection import BrokerConnection
from ..broker.depth import decode_sample
from ..broker.direct import direct_batch, direct_get_subject
from ..errors import EnclaveError, out_of_range
from ..names import SAMPLES_STREAM, samples_subject
from ..spec import MAX_HISTORY_HOURS, rule

READ_BATCH = 2000  #: samples one direct-get request returns


def check_hours(hours: int) -> int:
    """``hours`` of history if it follows its rule (1 to MAX_HISTORY_HOURS); SpecError otherwise."""
    if not 1 <= hours <= MAX_HISTORY_HOURS:
        raise out_of_range("hours", rule("hours"), repr(hours))
    return hours


async def history(conn: BrokerConnection, queue_id: str, hours: int) -> list[dict[str, Any]]:
    """The queue's samples of the last ``hours`` hours (checked by ``check_hours`` first)."""
    return await read_samples(conn, queue_id, datetime.now(UTC) - timedelta(hours=hours))


async def read_samples(conn: BrokerConnection, queue_id: str, since: datetime) -> list[dict[str, Any]]:
    """A queue's samples stored at or after ``since``, oldest first (``decode_sample``)."""
    subject = samples_subject(queue_id)
    request: dict[str, Any] = {"start_time": _rfc3339(since), "next_by_subj": subject, "batch": READ_BATCH}
    points: list[dict[str, Any]] = []
    while True:
        batch = await direct_batch(conn.control, direct_get_subject(SAMPLES_STREAM), request, "depth samples")
        if batch.status not in ("204", "404"):  # 204: end of a batch; 404: no (more) samples
            raise EnclaveError(f"The broker refused to read depth samples: {batch.status} "
                               f"{batch.description}".strip() + ".")
        points += [decode_sample(sample.data, sample.stored_at or "") for sample in batch.messages]
        if not batch.messages or not batch.more:
            return points
        request = {"seq": batch.messages[-1].sequence + 1, "next_by_subj": subject, "batch": READ_BATCH}


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")
