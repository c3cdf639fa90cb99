"""Messages are hidden for the visibility timeout, come back if not deleted, and never once deleted."""

import asyncio

from enclave_queue.client import connect
from tests.helpers import make_queue


async def test_an_undeleted_message_comes_back_after_the_timeout_with_its_count_up(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=2)
    async with connect(creds) as queue:
        await queue.send({"n": 1})
        (first,) = await queue.receive(wait=2)
        assert first.body == {"n": 1} and first.receive_count == 1
        assert await queue.receive(wait=0.5) == []  # hidden while leased (1.5 s of the lease to spare)
        (again,) = await queue.receive(wait=6)
        assert again.sequence == first.sequence
        assert again.receive_count == 2
        await again.delete()


async def test_a_deleted_message_never_comes_back(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1)
    async with connect(creds) as queue:
        await queue.send("once")
        (message,) = await queue.receive(wait=2)
        await message.delete()
        assert await queue.receive(wait=2.5) == []


async def test_extend_keeps_a_message_hidden_and_nack_hands_it_back(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=2)
    async with connect(creds) as queue:
        await queue.send(b"\x00binary")
        (message,) = await queue.receive(wait=2)
        for _ in range(6):  # 3 s in all, past the 2 s timeout; each extend 1.5 s before its lease ends
            await asyncio.sleep(0.5)  # the worker busy with it: time passing is what is tested
            await message.extend()
        assert await queue.receive(wait=0.3) == []
        await message.nack()
        (back,) = await queue.receive(wait=2)
        assert back.body == b"\x00binary" and back.receive_count == 2
        await back.delete()


async def test_batches_and_the_message_iterator(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        assert await queue.send_batch([{"i": i} for i in range(250)]) == 250
        seen = []
        async for message in queue.messages(batch=100, wait=0.5):
            seen.append(message)
            if len(seen) % 50 == 0:
                await queue.delete_many(seen[-50:])
        assert sorted(m.body["i"] for m in seen) == list(range(250))
        assert await queue.receive(wait=0.2) == []


async def test_unconfirmed_deletes_delete_too(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1)
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b", "c"])
        first, *rest = await queue.receive(batch=3, wait=2)
        await first.delete(confirm=False)
        await queue.delete_many(rest, confirm=False)
        assert await queue.receive(wait=2) == []  # past the 1 s lease: none came back
