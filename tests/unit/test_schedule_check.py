"""schedulecheck.one_shot_delay: which messages on a queue's delay subjects are delayed puts."""

import pytest

from enclave_queue.controller.schedulecheck import one_shot_delay

Q = "queue.default.emails"
AT = "@at 2030-01-01T00:00:00Z"


@pytest.mark.parametrize(("headers", "kept"), [
    ({"Nats-Schedule": AT, "Nats-Schedule-Target": Q}, True),
    ({"Nats-Schedule": AT, "Nats-Schedule-Target": f"{Q}.priority.7"}, True),  # a lane of a queue with priorities
    ({"Nats-Schedule": AT, "Nats-Schedule-Target": f"{Q}.priority.0"}, False),
    ({"Nats-Schedule": AT, "Nats-Schedule-Target": f"{Q}.priority.10"}, False),
    ({"Nats-Schedule": AT, "Nats-Schedule-Target": f"{Q}.delay.x"}, False),
    ({"Nats-Schedule": AT, "Nats-Schedule-Target": "queue.default.other"}, False),
    ({"Nats-Schedule": AT, "Nats-Schedule-Target": Q, "Nats-Schedule-Source": f"{Q}.delay.y"}, False),
    ({"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": Q}, False),
    ({"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": Q}, False),
    ({"Nats-Schedule": "@at not a time", "Nats-Schedule-Target": Q}, False),
    ({}, False),
])
def test_a_delayed_put_is_at_a_time_into_the_queue_and_nothing_more(headers, kept):
    assert one_shot_delay(headers, Q) is kept
