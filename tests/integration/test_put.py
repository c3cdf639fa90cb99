"""put: delays (JetStream message schedules), start deadlines (ttl_s), dedupe with a delay,
and the limits of every option, against the real broker."""

from datetime import UTC, datetime, timedelta

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import MessageTooLarge, SpecError
from enclave_queue.names import NOTES_STREAM, notes_subject
from tests.helpers import control_connection, eventually, make_queue


async def test_a_delayed_message_is_invisible_until_due_then_taken_with_the_id_put_returned(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.put("now")  # another message first, so the ids of the two differ from their counts
        put_at = datetime.now(UTC)
        delayed_id = await queue.put({"job": "later"}, delay_s=2)
        (first,) = await queue.receive(wait=0.5)
        assert first.body == "now"
        await first.ack()
        assert await queue.len() == 1  # the delayed one counts in the queue's depth …
        assert await queue.receive(wait=0.5) == []  # … but nobody can take it yet
        assert [m.id for m in await queue.peek()] == []  # peek shows waiting and in-flight ones only
        message = await queue.get(timeout_s=10)
        assert message is not None and message.body == {"job": "later"}
        assert datetime.now(UTC) >= put_at + timedelta(seconds=2)  # not before it was due
        assert message.id == delayed_id  # its copy keeps the id put returned
        assert message.sequence != delayed_id  # though it is stored anew when due
        assert message.attempts == 1
        assert abs((message.enqueued_at - put_at).total_seconds()) < 1  # put time, not the due time
        await message.ack()
        assert await queue.len() == 0


async def test_a_repeated_dedupe_key_with_a_delay_adds_nothing_and_returns_the_first_id(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        first = await queue.put("a", delay_s=1, dedupe_key="order-7")
        again = await queue.put("a", delay_s=1, dedupe_key="order-7")
        assert again == first
        message = await queue.get(timeout_s=10)
        assert message is not None and message.id == first
        await message.ack()
        assert await queue.get(timeout_s=1.5) is None  # one message, not two


async def test_a_message_past_its_deadline_is_never_delivered_and_counts_as_expired(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.put("stale", ttl_s=1)
        kept = await queue.put("fresh", ttl_s=60)

        async def expired() -> bool:
            return (await queue.metrics())["expired"] == 1

        await eventually(expired, timeout=10)
        message = await queue.get(timeout_s=2)
        assert message is not None and message.id == kept and message.body == "fresh"
        assert message.deadline is not None and message.deadline > datetime.now(UTC)
        await message.ack()
        assert await queue.get(timeout_s=0.5) is None
        assert await queue.len() == 0


async def test_a_message_taken_before_its_deadline_stays_with_its_worker(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=30)
    async with connect(creds) as queue, control_connection(stack) as nc:
        js = nc.jetstream()

        async def notes() -> int:  # the queue's deadline notes the control plane has not dealt with yet
            info = await js.stream_info(NOTES_STREAM, subjects_filter=notes_subject(creds["username"]))
            return sum((info.state.subjects or {}).values())

        async def dealt_with() -> bool:  # at the deadline the control plane checks it, then deletes its note
            return await notes() == 0

        await queue.put("job", ttl_s=2)
        assert await notes() == 1  # put returns once its deadline note is stored
        message = await queue.get(timeout_s=2)
        assert message is not None
        await eventually(dealt_with)  # the deadline came while it was being worked on,
        assert message.deadline is not None and message.deadline <= datetime.now(UTC)
        await message.ack()  # and the control plane left it to its worker: no error
        assert (await queue.metrics())["expired"] == 0


async def test_a_queue_with_max_messages_refuses_a_delay_naming_both(stack, unique_name):
    creds = make_queue(stack, unique_name, max_messages=10)
    async with connect(creds) as queue:
        with pytest.raises(SpecError) as refused:
            await queue.put("x", delay_s=5)
        assert refused.value.errors[0]["field"] == "delay_s"
        assert "max_messages" in refused.value.message
        assert await queue.len() == 0


@pytest.mark.parametrize(("options", "field", "rule"), [
    ({"delay_s": -1}, "delay_s", "from 0 to 604800"),
    ({"delay_s": 604801}, "delay_s", "from 0 to 604800"),
    ({"delay_s": "soon"}, "delay_s", "from 0 to 604800"),
    ({"ttl_s": 0}, "ttl_s", "from 1 to 1209600"),
    ({"ttl_s": 5, "delay_s": 5}, "ttl_s", "more than delay_s"),
    ({"dedupe_key": "k" * 129}, "dedupe_key", "1 to 128 printable characters"),
])
async def test_bad_put_options_are_refused_naming_the_option_and_nothing_is_stored(stack, unique_name, options, field,
                                                                                rule):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        with pytest.raises(SpecError) as refused:
            await queue.put("x", **options)
        assert refused.value.errors[0]["field"] == field and rule in refused.value.message
        assert await queue.len() == 0


async def test_batch_limits_and_body_size_are_refused_before_anything_is_sent(stack, unique_name):
    creds = make_queue(stack, unique_name, max_message_bytes=1024)
    async with connect(creds) as queue:
        with pytest.raises(SpecError, match=r"bodies must hold 1 to 1000 bodies \(got 1001\)"):
            await queue.send_batch(["x"] * 1001)
        with pytest.raises(SpecError, match=r"bodies must hold 1 to 100 bodies \(got 101\)"):
            await queue.put_many(["x"] * 101)
        with pytest.raises(MessageTooLarge, match="at most 1024"):
            await queue.put("x" * 1025, delay_s=1)
        assert await queue.len() == 0


async def test_a_message_back_after_its_deadline_is_not_started_again_by_any_receiver(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        for _ in range(2):
            await queue.put("job", ttl_s=1)
        for _ in range(2):  # both taken in time, and handed back to come again after the deadline
            message = await queue.get(timeout_s=2)
            await message.nack(delay_s=1.5)
        assert await queue.get(timeout_s=3) is None  # the SDK drops it on receipt …
        with stack.admin() as admin:
            assert admin.receive("default", unique_name, max_messages=10, wait=2) == []  # … and so does the API
        assert (await queue.metrics())["expired"] == 2
        assert await queue.len() == 0
