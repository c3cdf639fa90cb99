"""Messages past their start deadline (``put(ttl_s=)``): dropped unrun and counted as expired.

Called when a deadline comes (desk/deadlines.py), and when a message comes back to a receive
after its deadline (the desk's ``expire``, a receive by hand: messages.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import nats.js.errors

from .. import envelope
from ..broker.connection import BrokerConnection, delete_message
from ..names import lane_consumer, stream_name
from ..retry import retry_unavailable
from ..state.kv import Store
from ..state.notes import drop_note
from ..state.records import QueueRecord


async def drop_expired(conn: BrokerConnection, store: Store, record: QueueRecord, seq: int, *, taken_ok: bool) -> int:
    """Delete message ``seq`` if it carries a start deadline that has passed and (unless
    ``taken_ok``: it was found on a redelivery) no worker has taken it yet; count it as expired.
    1 if dropped, else 0."""
    js = conn.queue_js(record.id)
    stream = stream_name(record.id)
    try:
        msg = await retry_unavailable(lambda: js.get_msg(stream, seq=seq, direct=True))
    except nats.js.errors.NotFoundError:
        return 0  # deleted by its worker, or dropped already
    headers = dict(msg.headers or {})
    deadline = envelope.deadline_of(headers)
    if deadline is None or deadline > datetime.now(UTC):
        return 0
    if not taken_ok:  # the consumer of its priority lane (the queue's own for 0)
        consumer = lane_consumer(envelope.priority_of(msg.subject or ""))
        info = await retry_unavailable(lambda: js.consumer_info(stream, consumer))
        if seq <= info.delivered.stream_seq:
            return 0  # a worker took it in time; it is that worker's now
    await store.count(record.key, "expired", once=f"expire:{seq}")  # before the delete: a repeat counts nothing
    if not await delete_message(js, stream, seq):
        return 0
    await drop_note(conn.js, record.id, envelope.message_id(headers, seq))
    return 1
