"""Settings changed on a live queue reach connected SDK workers: a raised max_receives before
the SDK gives up on a message itself, a lowered visibility timeout before a late ack settles the
copy another worker now holds (a real stack, one connection kept across the change)."""


import pytest

from enclave_queue.client import connect
from enclave_queue.client import settings as settings_module
from enclave_queue.errors import Conflict
from tests.helpers import eventually, make_queue


def change(stack, name, **changes):
    with stack.admin() as admin:
        admin.update_queue("default", name, changes)
        admin.wait_ready("default", name)


async def test_a_raised_max_receives_lets_a_connected_worker_receive_past_the_old_limit(stack, unique_name):
    creds = make_queue(stack, unique_name, max_receives=2, visibility_timeout_seconds=30)
    async with connect(creds) as queue:
        await queue.put("keep trying")
        message = await queue.get(timeout_s=5)  # the SDK has read max_receives 2
        await message.nack()
        change(stack, unique_name, max_receives=5)
        message = await queue.get(timeout_s=5)
        await message.nack()
        third = await queue.get(timeout_s=5)  # the old limit had the SDK discard it here
        assert (third is not None and third.body, third.attempts if third else None) == ("keep trying", 3)
        await third.ack()
    with stack.admin() as admin:
        assert admin.queue_status("default", unique_name)["discarded"] == 0


async def test_a_lowered_visibility_timeout_ends_a_connected_worker_s_lease_with_the_broker_s(
        stack, unique_name, monkeypatch):
    monkeypatch.setattr(settings_module, "CONSUMER_TTL", 0.2)  # the SDK reads the lease again soon
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=30)
    async with connect(creds) as slow, connect(creds) as other:
        await slow.put("one")
        held = await slow.get(timeout_s=5)  # leased for 30 s, as the SDK read it
        change(stack, unique_name, visibility_timeout_seconds=1)
        taken = await other.get(timeout_s=10)  # the broker's lease of 1 s ran out: the other worker has it
        assert taken is not None and taken.sequence == held.sequence

        await eventually(lambda: _late(held), timeout=5)  # once the SDK has read the lease again
        with pytest.raises(Conflict):
            await held.ack()  # it had deleted the copy the other worker holds
        await taken.ack()
        assert await slow.len() == 0


def _late(message) -> bool:
    try:
        message._check_lease("acked")
    except Conflict:
        return True
    return False
