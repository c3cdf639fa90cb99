"""The dead-letter mover's start against the real broker: the advisory consumer an earlier version
made (max_ack_pending 1000, below the advisories this one keeps in flight) is brought up to date."""

from nats.js import api

from enclave_queue.controller.mover import IN_FLIGHT, MAX_ACK_PENDING
from enclave_queue.names import ADVISORY_STREAM, MOVER


async def test_a_start_raises_an_earlier_advisory_consumers_max_ack_pending_above_what_it_keeps_in_flight(runtime):
    js = runtime.conn.js
    assert (await js.consumer_info(ADVISORY_STREAM, MOVER)).config.max_ack_pending == MAX_ACK_PENDING > IN_FLIGHT
    await runtime.mover.stop()
    await js.add_consumer(ADVISORY_STREAM, api.ConsumerConfig(
        durable_name=MOVER, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30.0, max_deliver=-1, max_ack_pending=1000))
    assert (await js.consumer_info(ADVISORY_STREAM, MOVER)).config.max_ack_pending == 1000
    await runtime.mover.start()
    assert (await js.consumer_info(ADVISORY_STREAM, MOVER)).config.max_ack_pending == MAX_ACK_PENDING
