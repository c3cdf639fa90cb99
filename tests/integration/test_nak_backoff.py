"""A delayed nack on a queue with a retry schedule, against the real broker: the message comes
back after the delay asked for, also when that delay is shorter than the schedule's own step
(the SDK then sends the broker a negative delay, which it adds into its own sum)."""

import time

from enclave_queue.client import connect
from tests.helpers import make_queue


async def test_a_delayed_nack_comes_back_after_the_delay_asked_for_whatever_the_schedule(stack, unique_name):
    creds = make_queue(stack, unique_name, retry_backoff_seconds=[1, 3, 8], max_receives=10,
                       visibility_timeout_seconds=30)
    gaps = {}
    async with connect(creds) as queue:
        await queue.put("flaky")
        message = await queue.get(timeout_s=5)
        for attempt, wait in ((1, 0.2), (2, 0.5), (3, 2.0)):  # the schedule's own steps: 1, 3 and 8 s
            assert message is not None and message.attempts == attempt
            await message.nack(delay_s=wait)
            nacked = time.monotonic()
            message = await queue.get(timeout_s=15)
            gaps[attempt] = (wait, time.monotonic() - nacked)
        await message.ack()
    # without the compensation going negative, attempts 2 and 3 came back after 2 s and 7 s
    for attempt, (wait, gap) in gaps.items():
        assert wait - 0.05 <= gap <= wait + 1.5, (attempt, wait, gap)
