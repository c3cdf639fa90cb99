"""Delete leaves nothing behind; drift made behind the controller's back is repaired; updates
apply in place to the live stream and consumer."""

import asyncio

import nats.js.errors
import pytest
from nats.js import api

from enclave_queue.client import connect
from enclave_queue.errors import NotFound, Unauthorized
from enclave_queue.retry import retry_unavailable
from enclave_queue.spec import HEADER_ROOM
from tests.helpers import (
    account_on_broker,
    account_refuses_logins,
    account_store,
    eventually,
    make_queue,
    queue_account_connection,
)


async def test_delete_cuts_the_user_removes_everything_and_a_recreated_queue_starts_empty(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=5)
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", unique_name)["id"]
    disconnected = asyncio.Event()

    async with connect(creds) as queue:
        queue._nc._disconnected_cb = lambda: disconnected.set() or asyncio.sleep(0)
        await queue.send_batch(["old"] * 3)
        assert account_on_broker(stack, queue_id)
        assert account_store(stack, queue_id).is_dir()

        with stack.admin() as admin:
            admin.delete_queue("default", unique_name)
            admin.wait_deleted("default", unique_name, timeout=20)
            with pytest.raises(NotFound):
                admin.get_queue("default", unique_name)
            with pytest.raises(NotFound):
                admin.read_secret("default", f"{unique_name}-password")
        await asyncio.wait_for(disconnected.wait(), 5)

    with pytest.raises(Unauthorized):
        await connect(creds)
    assert not account_on_broker(stack, queue_id)
    assert not account_store(stack, queue_id).exists()
    assert await account_refuses_logins(stack, queue_id)  # the account is gone from the broker

    fresh = make_queue(stack, unique_name)
    assert fresh["username"] != creds["username"] and fresh["password"] != creds["password"]
    async with connect(fresh) as queue:
        assert await queue.receive(wait=0.3) == []


async def test_a_stream_deleted_behind_the_controllers_back_comes_back_and_works(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", unique_name)["id"]
    async with queue_account_connection(stack, queue_id) as nc:
        js = nc.jetstream()
        await retry_unavailable(lambda: js.delete_stream(creds["stream"]))
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.stream_info(creds["stream"])

        async def restored():
            try:
                await retry_unavailable(lambda: js.consumer_info(creds["stream"], "worker"))
                return True
            except nats.js.errors.NotFoundError:
                return False

        await eventually(restored, timeout=10)
    async with connect(creds) as queue:
        await queue.send("after repair")
        (message,) = await queue.receive(wait=2)
        assert message.body == "after repair"
        await message.delete()


async def test_a_consumer_changed_behind_the_controllers_back_is_put_back(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=7, max_receives=4)
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", unique_name)["id"]
    async with queue_account_connection(stack, queue_id) as nc:
        js = nc.jetstream()
        info = await retry_unavailable(lambda: js.consumer_info(creds["stream"], "worker"))
        changed = info.config
        changed.ack_wait = 99
        changed.max_deliver = 50
        await retry_unavailable(lambda: js.add_consumer(creds["stream"], changed))

        async def repaired():
            config = (await retry_unavailable(lambda: js.consumer_info(creds["stream"], "worker"))).config
            return config.ack_wait == 7 and config.max_deliver == 4

        await eventually(repaired, timeout=10)
        stream = await retry_unavailable(lambda: js.stream_info(creds["stream"]))
        stream.config.max_age = 7200.0
        await retry_unavailable(lambda: js.update_stream(stream.config))

        async def stream_repaired():
            return (await retry_unavailable(lambda: js.stream_info(creds["stream"]))).config.max_age == 96 * 3600

        await eventually(stream_repaired, timeout=10)


async def test_update_applies_in_place_to_the_live_stream_and_consumer(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send("kept across the update")
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", unique_name)["id"]
        updated = admin.update_queue("default", unique_name, {
            "visibility_timeout_seconds": 2, "max_receives": 5, "retention_hours": 1, "max_message_bytes": 2048})
        assert updated["visibility_timeout_seconds"] == 2
        admin.wait_ready("default", unique_name)
        status = admin.queue_status("default", unique_name)
        assert status["generation"] == status["observed_generation"] == 2
    async with queue_account_connection(stack, queue_id) as nc:
        js = nc.jetstream()
        stream = await retry_unavailable(lambda: js.stream_info(creds["stream"]))
        consumer = await retry_unavailable(lambda: js.consumer_info(creds["stream"], "worker"))
    assert (stream.config.max_age, stream.config.max_msg_size) == (3600, 2048 + HEADER_ROOM)
    assert (consumer.config.ack_wait, consumer.config.max_deliver) == (2, 5)
    assert stream.state.messages == 1
    assert stream.config.retention == api.RetentionPolicy.WORK_QUEUE
