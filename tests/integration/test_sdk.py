"""The SDK's errors: clear, specific and immediate."""

import asyncio
import time

import pytest

from enclave_queue.client import connect, connect_sync
from enclave_queue.errors import MessageTooLarge, PermissionDenied, SpecError, Unauthorized
from tests.helpers import make_queue


async def test_a_permission_denial_raises_at_once_not_after_a_timeout(stack, unique_name):
    """The denial ends the call, rather than the call waiting its whole wait out and timing out
    (what nats-py alone does): a 20 s wait is cut short (how fast: bench/ has no need, it is one
    round trip)."""
    creds = make_queue(stack, unique_name)
    async with connect({**creds, "stream": "SOMEONE_ELSES"}) as queue:
        with pytest.raises(PermissionDenied, match="permissions violation for publish"):
            await asyncio.wait_for(queue.receive(wait=20), 10)


async def test_wrong_password_and_missing_credentials(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with pytest.raises(Unauthorized, match=f"refused user '{creds['username']}': wrong username or password"):
        await connect({**creds, "password": "not-it"})
    with pytest.raises(SpecError, match="Credentials are missing password"):
        await connect({k: v for k, v in creds.items() if k != "password"})
    with pytest.raises(SpecError, match="ENCLAVE_QUEUE_BROKER_URL"):
        from enclave_queue.client import Credentials

        Credentials.from_env({})


async def test_oversize_messages_raise_message_too_large_and_batches_say_how_many_went(stack, unique_name):
    creds = make_queue(stack, unique_name, max_message_bytes=1024)
    async with connect(creds) as queue:
        with pytest.raises(MessageTooLarge):
            await queue.send(b"x" * 1025)
        with pytest.raises(MessageTooLarge, match=r"^9 of 10 messages were sent"):
            await queue.send_batch([b"ok"] * 9 + [b"x" * 2000])
        assert len(await queue.receive(batch=20, wait=1)) == 9


async def test_a_closed_queue_says_so(stack, unique_name):
    creds = make_queue(stack, unique_name)
    queue = await connect(creds)
    await queue.close()
    with pytest.raises(RuntimeError, match="^Client is closed.$"):
        await queue.send("late")


async def test_a_deleted_queue_fails_its_clients_with_unauthorized(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send("before")
        with stack.admin() as admin:
            admin.delete_queue("default", unique_name)
            admin.wait_deleted("default", unique_name)
        deadline = time.monotonic() + 15
        with pytest.raises(Unauthorized, match="refused user"):  # the broker cut the deleted user off
            while time.monotonic() < deadline:  # sends go on until the cut reaches this connection
                await queue.send("after")
                await asyncio.sleep(0.05)


def test_the_sync_client(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with connect_sync(creds) as queue:
        assert queue.send_batch(["a", "b"]) == 2
        messages = queue.receive(batch=5, wait=1)
        assert [m.body for m in messages] == ["a", "b"]
        assert messages[0].receive_count == 1
        for message in messages:
            message.delete()
        assert queue.receive(wait=0.2) == []
