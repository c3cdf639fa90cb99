"""get (a long poll) and iterate (async and sync generators), against the real broker."""

import asyncio
from datetime import UTC, datetime

import pytest

from enclave_queue.client import connect, connect_sync
from enclave_queue.errors import SpecError
from tests.helpers import consumer_info, eventually, make_queue, pulls_waiting


async def test_a_long_poll_returns_as_soon_as_a_message_arrives(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as worker, connect(creds) as producer:
        polling = asyncio.ensure_future(worker.get(timeout_s=30))
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # its request is with the broker
        assert not polling.done()  # it waits …
        await producer.put({"n": 1})
        message = await asyncio.wait_for(polling, 10)  # … and returns with the message, not at 30 s
        assert message is not None and message.body == {"n": 1}
        await message.ack()


async def test_get_returns_none_when_nothing_arrives_and_refuses_a_wait_over_a_minute(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        assert await queue.get(timeout_s=0.3) is None
        assert await queue.get(timeout_s=0) is None
        for bad in (-1, 61, "5"):
            with pytest.raises(SpecError) as refused:
                await queue.get(timeout_s=bad)
            assert refused.value.errors[0]["field"] == "timeout_s" and "from 0 to 60" in refused.value.message
        with pytest.raises(SpecError, match=r"lease_s must be a number of seconds from 1 to 43200"):
            await queue.get(timeout_s=0.1, lease_s=43201)


async def test_gets_in_a_loop_share_one_inbox_and_leave_no_request_or_lease_behind(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as worker, connect(creds) as producer:
        await producer.send_batch(list(range(20)))
        first = await worker.get(timeout_s=5)
        assert first is not None
        await first.ack(confirm=False)
        subscriptions = len(worker._nc._subs)  # the session's replies and the first get's inbox
        taken = [first.body]
        for _ in range(19):
            message = await worker.get(timeout_s=5)
            assert message is not None
            taken.append(message.body)
            await message.ack(confirm=False)
        assert taken == list(range(20))
        assert await worker.get(timeout_s=0.3) is None  # one that ended empty (expired) keeps it too
        assert len(worker._nc._subs) == subscriptions  # the later gets subscribed nothing
        await worker._nc.flush()  # the unconfirmed acks are with the broker
        state = await consumer_info(creds)
        assert (state.num_waiting, state.num_ack_pending, state.num_pending) == (0, 0, 0)


async def test_a_get_given_up_while_it_waits_leaves_no_message_leased_to_nobody(stack, unique_name):
    """A get cancelled while the broker holds its pull request tells the broker to send that
    request's inbox nothing more (it delivers nothing to a reply subject nobody listens to): a
    message put next goes to the next get at once, not to the abandoned request, leased to nobody
    for the visibility timeout."""
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=60)
    async with connect(creds) as worker, connect(creds) as producer:
        assert await worker.get(timeout_s=0.1) is None  # an inbox kept for the next get …
        subscriptions = len(worker._nc._subs)
        polling = asyncio.ensure_future(worker.get(timeout_s=60))  # … which it takes
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # its request is with the broker
        polling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await polling
        # the broker was told at once to send that inbox nothing more; it goes a moment later
        await eventually(lambda: len(worker._nc._subs) == subscriptions - 1, timeout=10)
        sent = await producer.put("after the cancel")
        message = await worker.get(timeout_s=20)  # within the 60 s lease a leaked delivery would hold
        assert message is not None and (message.id, message.receive_count) == (sent, 1)
        state = await consumer_info(creds)
        assert (state.num_ack_pending, state.num_redelivered) == (1, 0)  # only this get's lease, never another
        await message.ack()


async def test_stop_when_empty_ends_while_a_message_is_leased_elsewhere_or_delayed(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=60)
    async with connect(creds) as other, connect(creds) as worker:
        await other.put("held")
        held = await other.get(timeout_s=2)
        assert held is not None  # leased by another worker
        await worker.put("later", delay_s=60)  # and one not due for a minute
        await worker.put_many(["a", "b", "c"])
        seen = []
        async for message in worker.iterate(stop_when_empty=True, batch=2):
            seen.append(message.body)
            await message.ack()
        assert seen == ["a", "b", "c"]  # ended, though two messages are still on the queue:
        assert await worker.len() == 1  # the delayed one (len leaves the leased one out)
        await held.ack()


async def test_iterate_keeps_waiting_for_new_messages_until_the_caller_stops(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as worker, connect(creds) as producer:
        seen = []

        async def consume() -> None:
            async for message in worker.iterate(lease_s=5):
                seen.append(message.body)
                await message.ack()
                if len(seen) == 2:
                    return

        consuming = asyncio.ensure_future(consume())
        await producer.put("first")
        await eventually(lambda: seen == ["first"], timeout=10)
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # iterate waits for more …
        await producer.put("second")  # … and the one that arrives then is taken too
        await asyncio.wait_for(consuming, 10)
        assert seen == ["first", "second"]


def test_the_sync_iterate_and_get(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with connect_sync(creds) as queue:
        queue.send_batch([1, 2, 3])
        bodies = []
        for message in queue.iterate(stop_when_empty=True):
            bodies.append(message.body)
            message.ack()
        assert bodies == [1, 2, 3]
        queue.put("x")
        message = queue.get(timeout_s=2)
        assert message is not None and (message.body, message.attempts) == ("x", 1)
        message.release()
        again = queue.get(timeout_s=2)
        assert again is not None and again.id == message.id and again.attempts == 1
        again.ack()
        assert queue.get(timeout_s=0.2) is None


async def test_leaving_iterate_early_hands_the_fetched_messages_back_at_once_unspent(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=60)
    async with connect(creds) as queue:
        await queue.send_batch(list(range(30)))
        async for message in queue.iterate(batch=10):
            assert message.body == 0
            await message.ack()
            break  # the rest of this batch and the next one were fetched already

        async def handed_back() -> bool:  # the generator is closed (and hands back) when it is collected
            return await queue.len() == 29

        await eventually(handed_back, timeout=5)
        rest = []
        async for message in queue.iterate(stop_when_empty=True):
            rest.append((message.body, message.attempts))
            await message.ack()
        assert sorted(body for body, _ in rest) == list(range(1, 30))  # back at once, not after 60 s
        assert {attempts for _, attempts in rest} == {1}  # and not counted as tried


async def test_iterate_hands_out_no_message_whose_lease_ran_out_while_it_waited_its_turn(stack, unique_name):
    """A batch's messages (and the next, fetched meanwhile) wait their turn behind a slow handler:
    those whose lease ran out were handed out all the same, to fail their ack, and the receives
    they spent sent messages no worker had failed to the dead-letter queue."""
    make_queue(stack, f"{unique_name}-dlq")
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=2, max_receives=2,
                       dead_letter_queue=f"{unique_name}-dlq")
    async with connect(creds) as queue:
        await queue.send_batch([f"m{i}" for i in range(20)])
        handled = []
        async for message in queue.iterate(batch=10, stop_when_empty=True):
            assert message.lease_expires_at > datetime.now(UTC), message  # handed out with its lease
            await asyncio.sleep(0.25)  # ten of these outlast a lease
            await message.ack()
            handled.append(message.body)
    assert sorted(handled) == sorted(f"m{i}" for i in range(20))
    with stack.admin() as admin:
        assert admin.queue_status("default", unique_name)["dead_lettered"] == 0
