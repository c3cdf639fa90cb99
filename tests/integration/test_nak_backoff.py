"""A delayed nack on a queue with a retry schedule, against the real broker.

First the broker's own rule, on a bare nats-server: with a consumer backoff, a ``-NAK`` with a
delay d comes back d - backoff[0] + backoff[n] later (n: the message's redeliveries so far, the
last entry repeating), also when d is zero or negative. Then the SDK, which sends the delay that
rule turns into the wait asked for (envelope.nak_delay): the message comes back after the delay
asked, whatever the schedule's own step.

Each case is chosen so that the other readings of the broker (the delay alone, the backoff step
alone, a negative or zero delay taken as none) would bring the message back at least a second
earlier or later than the bounds allow."""

import json
import time

import nats
from nats.js import api

from enclave_queue.client import connect
from tests.helpers import make_queue

EARLY = 0.1  #: seconds a redelivery may seem early: the clock starts once the nack was sent
LATE = 1.0  #: seconds a redelivery may be late on a busy machine


def on_time(gap: float, expected: float) -> bool:
    return expected - EARLY <= gap <= expected + LATE


async def test_the_broker_adds_the_backoff_step_to_a_naks_delay(nats_server):
    backoff = [1.0, 4.0, 8.0]
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="NAKS", subjects=["naks"], retention="workqueue")
        info = await js.add_consumer("NAKS", api.ConsumerConfig(
            durable_name="worker", ack_policy=api.AckPolicy.EXPLICIT, max_deliver=10, backoff=backoff))
        assert info.config.ack_wait == backoff[0]  # the server sets it to the first step
        sub = await js.pull_subscribe_bind("worker", "NAKS")
        await js.publish("naks", b"x")
        (message,) = await sub.fetch(1, timeout=5)
        gaps = []
        # (delay sent, when the rule says it comes back): d - 1 + backoff[n]
        for sent, expected in ((0.5, 0.5), (-1.5, 1.5), (-5.5, 1.5), (-5.0, 2.0)):
            delivered = message.metadata.num_delivered
            await nc.publish(message.reply, b"-NAK " + json.dumps({"delay": round(sent * 1e9)}).encode())
            await nc.flush()
            nacked = time.monotonic()
            (message,) = await sub.fetch(1, timeout=15)
            gaps.append((delivered, sent, expected, round(time.monotonic() - nacked, 3)))
            assert message.metadata.num_delivered == delivered + 1
        await message.ack()
    finally:
        await nc.close()
    assert all(on_time(gap, expected) for _, _, expected, gap in gaps), gaps


async def test_a_delayed_nack_comes_back_after_the_delay_asked_for_whatever_the_schedule(stack, unique_name):
    creds = make_queue(stack, unique_name, retry_backoff_seconds=[1, 4, 8], max_receives=10,
                       visibility_timeout_seconds=30)
    gaps = []
    async with connect(creds) as queue:
        await queue.put("flaky")
        message = await queue.get(timeout_s=5)
        # sent to the broker: 0.3 s; 3 + 1 - 4 = 0 s (a zero delay); 1.5 + 1 - 8 = -5.5 s.
        # Sent uncompensated they would come back after 0.3, 6 and 8.5 s
        for attempt, wait in ((1, 0.3), (2, 3.0), (3, 1.5)):
            assert message is not None and message.attempts == attempt
            await message.nack(delay_s=wait)
            nacked = time.monotonic()
            message = await queue.get(timeout_s=15)
            gaps.append((attempt, wait, round(time.monotonic() - nacked, 3)))
        assert message is not None and message.attempts == 4
        await message.ack()
    assert all(on_time(gap, wait) for _, wait, gap in gaps), gaps
