"""A queue's stream gets its message schedules (what delayed messages are) with its first delayed
message, by each path that makes one: the SDK's delayed put (through the desk), the HTTP API's
delayed send, and a delayed release. A queue that never delays anything never pays for them, and
a queue with max_messages still refuses a delay."""

import json

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import SpecError
from tests.helpers import eventually, make_queue, stream_config

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
