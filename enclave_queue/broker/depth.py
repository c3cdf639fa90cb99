"""How full a queue is, read from its stream and consumers as the broker's system account sees
them (one ``$SYS.REQ.ACCOUNT.<account>.JSZ`` request a queue: no connection into its account).

- ``waiting``: stored and ready to be received (the consumer's ``num_pending``);
- ``in_flight``: received and not yet deleted, hidden until their visibility timeout ends or a
  nack's delay runs out (``num_ack_pending``; like SQS's "not visible"), while a lease can still
  be running (``leases_over``): a message whose lease ran out and that nobody took again counts as
  waiting, as in SQS, not as in flight;
- ``delayed``: stored but not deliverable (stream messages outside both counts: scheduled
  messages, none until a send asks for a delay; and messages out of receives until the
  dead-letter mover takes them);
- ``dead``: messages on the queue's dead-letter queue, ``None`` when it has none;
- ``oldest_age_seconds``: the age of the oldest stored message, ``None`` when it is empty.

And three counts since the stream was created, which only grow (Prometheus counters):
``sent`` (the stream's last sequence), ``received`` (deliveries, redeliveries included: the
consumer's delivered sequence) and ``removed`` (sent minus stored: deleted by workers or by hand,
dead-lettered, discarded, or past retention).

A depth sample (controller/sampler.py stores one a queue every ``sample_seconds``; the depth
history reads them, queues/samples.py) is the JSON array ``[waiting, in_flight, delayed, dead,
sent, received, removed]`` (``dead`` is ``null`` for a queue without a dead-letter queue; the three
counts since creation give the rates between two samples; samples stored before they were added
have the first four only); its time is the broker's timestamp of the stored message, so it costs
no bytes of its own.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Optional

from ..envelope import consumer_leases_over, parse_stamp
from ..errors import BrokerUnavailable
from ..names import CONSUMER, LANES, lane_consumer, stream_name
from .connection import BrokerConnection

PARALLEL = 32  #: queues read at the same time
#: the consumers a queue's depth sums: its own and its priority lanes'
CONSUMERS = frozenset({CONSUMER, *(lane_consumer(level) for level in LANES)})


@dataclass(frozen=True)
class Depth:
    waiting: int
    in_flight: int
    delayed: int
    dead: Optional[int]
    oldest_age_seconds: Optional[float]
    sent: int
    received: int
    removed: int

    def view(self) -> dict[str, Any]:
        return asdict(self)


async def _account_streams(conn: BrokerConnection, queue_id: str) -> dict[str, Any]:
    """The queue's stream as the system account's JSZ reports it: ``state`` and ``consumer_detail``
    (the queue's consumer and its priority lanes)."""
    body = await conn.account_jsz(queue_id)
    for stream in body.get("stream_detail") or []:
        if stream.get("name") == stream_name(queue_id):
            return stream
    raise BrokerUnavailable(f"The broker has no stream for {queue_id} (yet).")


async def stream_messages(conn: BrokerConnection, queue_id: str) -> int:
    return int((await _account_streams(conn, queue_id))["state"]["messages"])


async def read_depth(conn: BrokerConnection, queue_id: str, dead_letter_id: Optional[str] = None,
                     now: Optional[datetime] = None) -> Depth:
    """A queue's depth now, summed over its priority lanes if it has them. ``dead_letter_id``: the
    account id of its dead-letter queue."""
    reads: list[Any] = [_account_streams(conn, queue_id)]
    if dead_letter_id is not None:
        reads.append(stream_messages(conn, dead_letter_id))
    stream, *dead = await asyncio.gather(*reads)
    state = stream["state"]
    consumers = [c for c in stream.get("consumer_detail") or [] if c.get("name") in CONSUMERS]
    if not consumers:
        raise BrokerUnavailable(f"The broker has no consumer for {queue_id} (yet).")
    stored, last_seq = int(state["messages"]), int(state["last_seq"])
    now = now or datetime.now(UTC)
    waiting = sum(int(c["num_pending"]) for c in consumers)
    in_flight = 0
    for c in consumers:  # what each consumer holds, unless every lease it gave ran out (then: waiting)
        if consumer_leases_over(c, now):
            waiting += int(c["num_ack_pending"])
        else:
            in_flight += int(c["num_ack_pending"])
    oldest = None
    if stored and state.get("first_ts"):
        first = datetime.fromisoformat(state["first_ts"])
        oldest = max((now - first).total_seconds(), 0.0)
    return Depth(
        waiting=waiting,
        in_flight=in_flight,
        delayed=max(stored - waiting - in_flight, 0),
        dead=dead[0] if dead else None,
        oldest_age_seconds=oldest,
        sent=last_seq,
        received=sum(int(c["delivered"]["consumer_seq"]) for c in consumers),
        removed=max(last_seq - stored, 0),
    )


async def read_depths(conn: BrokerConnection, queues: list[tuple[str, Optional[str]]]) -> list[Depth | BaseException]:
    """Depths of many queues (``(id, dead-letter id)`` pairs), at most PARALLEL at a time; a
    queue that could not be read gives its exception in its place."""
    gate = asyncio.Semaphore(PARALLEL)

    async def one(queue_id: str, dead_letter_id: Optional[str]) -> Depth:
        async with gate:
            return await read_depth(conn, queue_id, dead_letter_id)

    return list(await asyncio.gather(*(one(q, d) for q, d in queues), return_exceptions=True))


def encode_sample(depth: Depth) -> bytes:
    """A depth sample as stored: ``[waiting, in_flight, delayed, dead, sent, received, removed]``."""
    return json.dumps([depth.waiting, depth.in_flight, depth.delayed, depth.dead, depth.sent, depth.received,
                       depth.removed], separators=(",", ":")).encode()


def decode_sample(data: bytes, stamp: str) -> dict[str, Any]:
    """One stored sample as the API returns it: its time (ISO 8601, UTC, from the broker's
    ``stamp``), the four counts and the three counts since creation (None in an older sample)."""
    waiting, in_flight, delayed, dead, *totals = json.loads(data)
    sent, received, removed = totals if len(totals) == 3 else (None, None, None)
    return {"t": parse_stamp(stamp).isoformat(timespec="milliseconds"), "waiting": waiting,
            "in_flight": in_flight, "delayed": delayed, "dead": dead, "sent": sent, "received": received,
            "removed": removed}


