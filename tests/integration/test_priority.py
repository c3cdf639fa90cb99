"""Priorities: on a queue with ``priorities``, of the messages waiting the highest priority is
taken first (one consumer a level: lanes), against the real broker."""

import asyncio

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import SpecError
from tests.helpers import eventually, make_queue, pulls_waiting


async def test_higher_priority_is_taken_first_when_both_wait_and_fifo_within_a_level(stack, unique_name):
    creds = make_queue(stack, unique_name, priorities=True)
    async with connect(creds) as queue:
        for body, priority in (("low", 0), ("mid", 5), ("high", 9), ("low 2", 0), ("mid 2", 5)):
            await queue.put(body, priority=priority)
        assert await queue.len() == 5
        with stack.admin() as admin:  # the depth the API, console and metrics show counts every level
            assert admin.stats("default", unique_name)["waiting"] == 5
        assert [m.body for m in await queue.peek(10)] == ["low", "mid", "high", "low 2", "mid 2"]  # stored order
        taken = []
        async for message in queue.iterate(stop_when_empty=True, batch=2):
            taken.append(message.body)
            await message.ack()
        assert taken == ["high", "mid", "mid 2", "low", "low 2"]
        assert await queue.len() == 0


async def test_a_long_poll_wakes_for_a_message_on_any_level(stack, unique_name):
    creds = make_queue(stack, unique_name, priorities=True)
    async with connect(creds) as worker, connect(creds) as producer:
        polling = asyncio.ensure_future(worker.get(timeout_s=30))
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # its long polls are with the broker
        await producer.put("urgent", priority=7)
        message = await asyncio.wait_for(polling, 10)
        assert message is not None and message.body == "urgent"
        await message.ack()
        assert await worker.get(timeout_s=0.5) is None  # the other lanes' polls ended with it


async def test_release_and_nack_keep_a_message_on_its_level(stack, unique_name):
    creds = make_queue(stack, unique_name, priorities=True, visibility_timeout_seconds=30)
    async with connect(creds) as queue:
        await queue.put("urgent", priority=9)
        message = await queue.get(timeout_s=2)
        await queue.put("routine")  # waits on level 0 meanwhile
        await message.release()
        again = await queue.get(timeout_s=2)
        assert again.body == "urgent" and again.attempts == 1  # back on its level: still first
        await again.nack()
        third = await queue.get(timeout_s=2)
        assert third.body == "urgent" and third.attempts == 2
        await third.ack()
        last = await queue.get(timeout_s=2)
        assert last.body == "routine"
        await last.ack()


async def test_a_lane_message_out_of_receives_is_dead_lettered(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, priorities=True, max_receives=1, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        await queue.put({"job": 1}, priority=4)
        message = await queue.get(timeout_s=2)
        await message.nack(error="boom")

        async def dead() -> list:
            await queue.get(timeout_s=0.2)  # a waiting pull lets the broker retire it
            return await queue.dead_letters()

        (letter,) = await eventually(dead, timeout=10)
        assert (letter.body, letter.last_error) == ({"job": 1}, "boom")


async def test_priority_needs_a_queue_with_priorities_and_a_level_from_0_to_9(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        with pytest.raises(SpecError) as refused:
            await queue.put("x", priority=3)
        assert refused.value.errors[0]["field"] == "priority" and "priorities" in refused.value.message
        for bad in (-1, 10, 2.5, True):
            with pytest.raises(SpecError, match=r"priority must be an integer from 0 to 9"):
                await queue.put("x", priority=bad)
        await queue.put("x", priority=0)  # the default level is every queue's
        assert await queue.len() == 1


async def test_priorities_turned_on_in_place_and_the_operator_views_cover_every_level(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.put("before")
        with stack.admin() as admin:
            admin.update_queue("default", unique_name, {"priorities": True})
            admin.wait_ready("default", unique_name)
        await asyncio.sleep(0)
        queue._settings.clear()  # the SDK caches the queue's settings for 30 s; a new client would not
        await queue.put("after, urgent", priority=8)
        with stack.admin() as admin:
            assert admin.get_queue("default", unique_name)["priorities"] is True
            taken = admin.receive("default", unique_name, max_messages=1, wait=1)  # by hand: highest first
            assert [m["body"] for m in taken] == ["after, urgent"]
            lines = list(admin.export("default", unique_name))
            assert sorted((line["body"], line["status"]) for line in lines) == [
                ("after, urgent", "in_flight"), ("before", "waiting")]
            assert admin.clear("default", unique_name)["waiting"] == 1
            with pytest.raises(SpecError, match="priorities"):
                admin.update_queue("default", unique_name, {"priorities": False})
        assert await queue.len() == 0
