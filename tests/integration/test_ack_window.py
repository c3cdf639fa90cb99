"""``await m.ack()`` inside ``iterate()`` (issue 16): the iteration confirms a batch's acks
together, one wait for many, before it hands out the next batch and before it ends; an ack it
could not confirm is raised by the iteration. Against the real broker."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import BrokerUnavailable
from tests.helpers import make_queue, queue_account_connection


async def stored(stack, creds) -> int:
    """How many messages the queue's stream holds: an acked one is gone from it."""
    async with queue_account_connection(stack, creds["username"]) as nc:
        return (await nc.jetstream().stream_info(creds["stream"])).state.messages


async def test_an_iteration_ends_only_once_every_ack_it_handed_out_is_confirmed(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send_batch([{"n": n} for n in range(250)])
        seen = []
        async for message in queue.iterate(stop_when_empty=True, batch=100):
            await message.ack()
            seen.append(message.body["n"])
        assert seen == list(range(250))
        assert await stored(stack, creds) == 0  # no waiting: the iteration's end confirmed them


async def test_a_batch_is_handed_out_only_after_the_acks_of_the_one_before_are_confirmed(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send_batch(list(range(30)))
        left = []
        async for message in queue.iterate(stop_when_empty=True, batch=10):
            if message.body % 10 == 0:  # the first of a batch: all before it are acked and gone
                left.append((message.body, await stored(stack, creds)))
            await message.ack()
        assert left == [(0, 30), (10, 20), (20, 10)]


async def test_leaving_an_iteration_early_still_confirms_its_acks_as_it_closes(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b", "c"])
        async with contextlib.aclosing(queue.iterate(batch=1)) as messages:
            async for message in messages:
                await message.ack()
                break
        assert await stored(stack, creds) == 2
        assert sorted(m.body for m in await queue.receive(batch=5, wait=1)) == ["b", "c"]  # handed back, not leased


async def test_an_ack_the_broker_never_confirms_is_raised_by_the_iteration(enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "unconfirmed-ack", visibility_timeout_seconds=60)
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b"])
        acked = []
        try:
            with pytest.raises(BrokerUnavailable, match=r"did not confirm 1 acknowledgement\(s\) within 5 s"):
                async for message in queue.iterate(stop_when_empty=True, batch=1):
                    os.kill(stack.broker_pid, signal.SIGSTOP)
                    await message.ack()  # returns at once: the iteration waits for its confirmation
                    acked.append(message.body)
        finally:
            os.kill(stack.broker_pid, signal.SIGCONT)
        assert acked == ["a"]  # the second was never handed out
