"""A release or a reject the app sends again (its first answer lost with a connection the broker
dropped) is answered as the first was, and done once: one copy on the queue, one dead letter."""

from __future__ import annotations

import asyncio

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import Conflict
from tests.helpers import make_queue


async def test_a_release_asked_twice_answers_the_same_and_leaves_one_copy(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=30)
    async with connect(creds) as queue:
        await queue.put("once")
        (message,) = await queue.receive(batch=1, wait=3)
        body = {"seq": message.sequence, "receive_count": message.receive_count, "delay_s": 0}
        first = await queue._session.desk("release", body)
        again = await queue._session.desk("release", body)  # the first's answer, not "not on the queue"
        assert again == first and first["id"] == message.id
        assert await queue.len() == 1
        (copy,) = await queue.receive(batch=10, wait=3)
        assert (copy.body, copy.id, copy.sequence, copy.attempts) == ("once", message.id, first["sequence"], 1)
        await copy.ack()


async def test_a_reject_asked_twice_answers_moved_both_times_and_dead_letters_once(stack, unique_name):
    make_queue(stack, f"{unique_name}-dlq")
    creds = make_queue(stack, unique_name, dead_letter_queue=f"{unique_name}-dlq")
    async with connect(creds) as queue:
        await queue.put("poison")
        (message,) = await queue.receive(batch=1, wait=3)
        asked = (message.sequence, message.id, message.receive_count, "bad")
        assert await queue._session.reject(*asked) == "moved"
        assert await queue._session.reject(*asked) == "moved"  # not "gone": the first moved it
        assert await queue.len() == 0
        letters = await queue.dead_letters(limit=10)
    assert [(letter.body, letter.last_error) for letter in letters] == [("poison", "bad")]
    with stack.admin() as admin:
        assert admin.queue_status("default", unique_name)["dead_lettered"] == 1


async def test_a_reject_after_the_lease_ran_out_is_refused_and_leaves_the_message_to_its_new_holder(
        stack, unique_name):
    make_queue(stack, f"{unique_name}-dlq")
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1, dead_letter_queue=f"{unique_name}-dlq")
    async with connect(creds) as first, connect(creds) as second:
        await first.put({"order": 1})
        late = await first.get(timeout_s=3)
        await asyncio.sleep(1.3)  # its lease ran out: the message is back
        holder = await second.get(timeout_s=5)
        assert (holder.id, holder.attempts) == (late.id, 2)
        with pytest.raises(Conflict, match="lease on message .* expired"):
            await late.reject(error="late")
        await holder.ack()
        assert await first.dead_letters(limit=10) == []
    with stack.admin() as admin:
        assert admin.queue_status("default", unique_name)["dead_lettered"] == 0
