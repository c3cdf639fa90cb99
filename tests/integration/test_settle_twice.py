"""A release or a reject the app sends again (its first answer lost with a connection the broker
dropped) is answered as the first was, and done once: one copy on the queue, one dead letter."""

from __future__ import annotations

from enclave_queue.client import connect
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
