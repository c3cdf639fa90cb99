"""A queue's stream gets its message schedules (what delayed messages are) with its first delayed
message, by each path that makes one: the SDK's delayed put (through the desk), the HTTP API's
delayed send, and a delayed release. A queue that never delays anything never pays for them, and
a queue with max_messages still refuses a delay."""

import asyncio
import json

import nats.js.errors
import pytest

from enclave_queue.client import connect
from enclave_queue.errors import SpecError
from tests.helpers import app_connection, eventually, make_queue, stream_config

pytestmark = pytest.mark.slow


def queue_id(stack, name: str) -> str:
    with stack.admin() as admin:
        return admin.get_queue("default", name)["id"]


async def schedules_on(stack, name: str) -> bool:
    return bool((await stream_config(stack, queue_id(stack, name))).allow_msg_schedules)


async def test_a_new_queue_has_no_schedules_until_its_first_delayed_put(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send("now")
        assert not await schedules_on(stack, unique_name)
        delayed = await queue.put("later", delay_s=1)
        assert await schedules_on(stack, unique_name)
        first = await queue.receive(batch=10, wait=2)
        assert [m.body for m in first] == ["now"]
        await first[0].delete()
        [late] = await queue.receive(wait=5)
        assert (late.body, late.id) == ("later", delayed)
        await late.delete()


async def test_the_apis_delayed_send_turns_them_on(stack, unique_name):
    make_queue(stack, unique_name)
    with stack.admin() as admin:
        sent = admin.send("default", unique_name, {"n": 1}, delay=1)
        assert sent["delayed_until"]
        assert admin.receive("default", unique_name, wait=0.2) == []
    assert await schedules_on(stack, unique_name)
    with stack.admin() as admin:
        got = await eventually(lambda: admin.receive("default", unique_name, wait=1), timeout=10)
        assert json.loads(got[0]["body"]) == {"n": 1}


async def test_a_delayed_release_turns_them_on(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send("job")
        [message] = await queue.receive(wait=2)
        await message.release(delay_s=1)
        assert await schedules_on(stack, unique_name)
        [again] = await queue.receive(wait=5)
        assert (again.body, again.id) == ("job", message.id)
        await again.delete()


async def test_a_queue_with_max_messages_never_gets_them(stack, unique_name):
    """Its refusal of a delay (test_put.py) stands: the desk does not turn schedules on for it."""
    async with connect(make_queue(stack, unique_name, max_messages=10)) as queue:
        with pytest.raises(SpecError):
            await queue.put("later", delay_s=5)
    assert not await schedules_on(stack, unique_name)


async def test_only_one_shot_delays_into_the_queue_stay_on_its_delay_subjects(stack, unique_name):
    """The queue's user may publish to its delay subjects (any NATS client may delay its messages),
    and the broker takes any schedule there: a repeating one made a message every second for good,
    whatever became of its app. After the next depth sample, what is not a one-shot delay into the
    queue is gone, and a real delayed message stays."""
    creds = make_queue(stack, unique_name)
    subject = creds["subject"]
    async with connect(creds) as queue:
        await queue.put("later", delay_s=600)  # turns the queue's schedules on, and stays
    hostile = {
        "every": {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": subject},
        "cron": {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": subject},
        "source": {"Nats-Schedule": "@at 2099-01-01T00:00:00Z", "Nats-Schedule-Target": subject,
                   "Nats-Schedule-Source": f"{subject}.delay.every"},
        "plain": {},  # no schedule at all: never delivered
    }
    async with app_connection(creds) as nc:
        js = nc.jetstream()
        for token, headers in hostile.items():
            await js.publish(f"{subject}.delay.{token}", token.encode(), headers=headers)
    with stack.admin() as admin:
        await eventually(lambda: admin.stats("default", unique_name)["delayed"] == 1, timeout=15)
        made = admin.stats("default", unique_name)["waiting"]
        await asyncio.sleep(2.5)  # longer than "@every 1s": nothing makes messages any more
        assert admin.stats("default", unique_name)["waiting"] == made
    async with app_connection(creds) as nc:
        js = nc.jetstream()
        for token in hostile:
            with pytest.raises(nats.js.errors.NotFoundError):
                await js.get_last_msg(creds["stream"], f"{subject}.delay.{token}")  # STREAM.MSG.GET
