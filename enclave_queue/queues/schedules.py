"""Delayed messages' JetStream schedules, turned on for a queue the first time it needs them.

A delayed put is a one-shot JetStream message schedule, which a stream takes only with
``allow_msg_schedules``. nats-server gives every such stream a timing wheel of its own (32 KiB at
creation, whether or not a schedule is ever stored: about a fifth of what a queue costs the
broker), and the setting can be turned on in place but never off. So a queue's stream is made
without it, and it is turned on here the first time the broker refuses a delayed message for the
lack of it (``SCHEDULES_DISABLED``): by the HTTP API's send, by the desk for the SDK's delayed put
(verb ``schedules``), and by a delayed release. A queue with ``max_messages`` never gets it (a limit
that refuses new messages rules out schedules, controller/mapping.py): its delayed message stays
refused, as the error says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..broker.connection import BrokerConnection
from ..envelope import refused_for_schedules
from ..retry import retry_unavailable
from ..state.records import QueueRecord
from .streams import stream_info


async def turn_on(conn: BrokerConnection, record: QueueRecord) -> bool:
    """Give the queue's stream ``allow_msg_schedules`` if it has not got it; False for a queue with
    ``max_messages``, which cannot take schedules. The reconciler keeps what the stream has."""
    if record.spec.max_messages:
        return False
    info = await stream_info(conn, record)
    if not info.config.allow_msg_schedules:
        info.config.allow_msg_schedules = True
        js = conn.queue_js(record.id)
        await retry_unavailable(lambda: js.update_stream(info.config))
    return True


async def publish_delayed(conn: BrokerConnection, record: QueueRecord,
                          publish: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """``publish()`` a delayed message; refused for want of schedules, turn them on and publish it
    again (once). Returns the broker's last answer."""
    answer = await publish()
    if refused_for_schedules(answer) and await turn_on(conn, record):
        answer = await publish()
    return answer

