"""Ending a JetStream push subscription (a KV watch, an ordered consumer) for good: ``unsubscribe``.

nats-py gives such a subscription a heartbeat check and a flow-control task, and cancels them
only after an unsubscribe that went through. One that raises (the connection closed first) or is
cancelled leaves both running: the heartbeat check looks at the connection every two heartbeats
(10 s), the flow-control one every 0.25 s for as long as the connection is open. The state store,
the error notes and the desk's deadlines each stop theirs here.
"""

from __future__ import annotations

import contextlib
from typing import Any


async def unsubscribe(subscription: Any) -> None:
    """Unsubscribe ``subscription`` (a nats-py ``JetStreamContext.PushSubscription``) if the
    connection still can, and end its tasks in any case, even when this is cancelled."""
    try:
        with contextlib.suppress(Exception):  # a closed connection: the broker drops the consumer
            await subscription.unsubscribe()
    finally:
        jsi = subscription._sub._jsi  # the subscription's JetStream state (private to nats-py)
        for task in (jsi._hbtask, jsi._fctask):
            if task is not None:
                task.cancel()
