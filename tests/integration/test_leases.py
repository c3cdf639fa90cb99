"""A received message's fields and lease: late acks, release, extend and leases of their own,
against the real broker."""

from datetime import UTC, datetime, timedelta

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import Conflict, SpecError
from tests.helpers import eventually, make_queue

CLOCK = timedelta(milliseconds=5)  #: the broker's and this process's clocks are one clock, read at different precisions


async def test_a_message_tells_its_id_attempts_times_and_last_error(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=30)
    async with connect(creds) as queue:
        before_put = datetime.now(UTC)
        put_id = await queue.put({"to": "a@example.com"})
        after_put = datetime.now(UTC)
        first = await queue.get(timeout_s=2)
        after_get = datetime.now(UTC)
        assert first is not None
        assert (first.id, first.attempts, first.last_error) == (put_id, 1, None)
        assert before_put - CLOCK <= first.enqueued_at <= after_put + CLOCK  # the broker's time of the put
        # the visibility timeout from the receive (which came between after_put and after_get)
        assert after_put + timedelta(seconds=30) - CLOCK <= first.lease_expires_at <= after_get + timedelta(seconds=30)
        await first.nack(error="SMTP 451")
        second = await queue.get(timeout_s=2)
        assert second is not None
        assert (second.id, second.attempts, second.last_error) == (put_id, 2, "SMTP 451")
        await second.ack()


async def test_an_ack_after_the_lease_ran_out_raises_conflict(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1)
    async with connect(creds) as queue:
        await queue.put("slow job")
        message = await queue.get(timeout_s=2)
        assert message is not None
        again = await queue.get(timeout_s=5)  # the broker gave it out again: the lease ran out there
        assert again is not None and again.id == message.id and again.attempts == 2
        await eventually(lambda: datetime.now(UTC) > message.lease_expires_at, timeout=5)  # and here
        with pytest.raises(Conflict, match="ran out"):
            await message.ack()
        await again.ack()
        assert await queue.len() == 0 and await queue.get(timeout_s=2) is None  # the new lease's ack counted


async def test_release_gives_the_attempt_back_keeps_the_last_error_and_the_message_returns(stack, unique_name):
    creds = make_queue(stack, unique_name, max_receives=2, visibility_timeout_seconds=30)
    async with connect(creds) as queue:
        put_id = await queue.put("job")
        first = await queue.get(timeout_s=2)
        await first.nack(error="timeout talking to the bank")
        second = await queue.get(timeout_s=2)
        assert second.attempts == 2
        await second.release()  # shutting down: not tried, so not an attempt
        with pytest.raises(Conflict, match="already"):
            await second.ack()
        third = await queue.get(timeout_s=2)
        assert third is not None
        assert (third.id, third.attempts, third.last_error) == (put_id, 2, "timeout talking to the bank")
        assert third.sequence != second.sequence  # a copy at the back of the queue
        await third.release(delay_s=2)
        assert await queue.get(timeout_s=0.3) is None  # hidden for the delay
        fourth = await queue.get(timeout_s=5)
        assert fourth is not None and (fourth.id, fourth.attempts) == (put_id, 2)
        await fourth.ack()
        assert (await queue.metrics())["dead_lettered"] == 0


async def test_a_lease_of_its_own_longer_than_the_visibility_timeout(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1)
    async with connect(creds) as worker, connect(creds) as other:
        await worker.put("long")
        held = await worker.get(timeout_s=2, lease_s=6)
        assert held is not None
        assert held.lease_expires_at > datetime.now(UTC) + timedelta(seconds=5)
        assert await other.get(timeout_s=3) is None  # well past the 1 s visibility timeout, still held
        await held.ack()


async def test_a_lease_of_its_own_shorter_than_the_visibility_timeout(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=20)
    async with connect(creds) as worker, connect(creds) as other:
        await worker.put("short")
        brief = await worker.get(timeout_s=2, lease_s=1)
        assert brief is not None
        back = await other.get(timeout_s=10)  # given back at 1 s, long before the 20 s timeout
        assert back is not None and back.id == brief.id
        await back.ack()


async def test_extend_with_a_lease_holds_the_message_past_the_visibility_timeout(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1)
    async with connect(creds) as worker, connect(creds) as other:
        await worker.put("job")
        message = await worker.get(timeout_s=2)
        await message.extend(lease_s=4)
        assert await other.get(timeout_s=2) is None
        await message.ack()
        with pytest.raises(SpecError, match=r"lease_s must be a number of seconds from 1 to 43200"):
            await message.extend(lease_s=0)
