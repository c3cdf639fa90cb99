"""``put_many``: 1 to 100 messages stored all or none as one JetStream atomic batch (stream
``allow_atomic``; ``Nats-Batch-Id`` / ``-Sequence`` / ``-Commit``), returning their ids in order.
An oversize body is refused before anything is published; a message the broker refuses (err_code
10054 here) fails the whole batch (its commit answers 10176) and nothing is stored."""

import pytest

from enclave_queue.client import connect, connect_sync
from enclave_queue.errors import EnclaveError, MessageTooLarge, QueueFull, SpecError
from enclave_queue.retry import retry_unavailable
from tests.helpers import eventually, make_queue, queue_account_connection


async def test_put_many_returns_the_ids_in_order_and_stores_every_message(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        before = await queue.send("before")
        bodies = [{"n": 0}, "text", b"\x00raw", *[{"n": i} for i in range(3, 100)]]
        ids = await queue.put_many(bodies)
        assert ids == list(range(before + 1, before + 101))
        received = await queue.receive(batch=200, wait=1)
        assert [(m.sequence, m.body) for m in received] == [(before, "before"), *zip(ids, bodies, strict=True)]
        await queue.delete_many(received)
    with connect_sync(creds) as queue:  # the blocking twin
        assert queue.put_many(["x", "y"]) == [ids[-1] + 1, ids[-1] + 2]
        assert queue.len() == 2


async def test_put_many_with_one_oversize_body_puts_none(stack, unique_name):
    creds = make_queue(stack, unique_name, max_message_bytes=1024)
    async with connect(creds) as queue:
        await queue.send("already there")
        with pytest.raises(MessageTooLarge, match=r"^bodies\[2\] is 1025 bytes; the queue accepts at most 1024 "
                                                  r"\(max_message_bytes\)\. Nothing was put\.$"):
            await queue.put_many(["a", "b", "x" * 1025, "d"])
        assert await queue.len() == 1
        assert [m.body for m in await queue.peek(10)] == ["already there"]


async def test_a_batch_the_broker_refuses_in_part_stores_nothing(stack, unique_name):
    """The SDK's size check passes on a limit it cached before the queue's max_message_bytes was
    lowered; the broker refuses the oversize message and, with it, the whole batch."""
    creds = make_queue(stack, unique_name, max_message_bytes=8192)
    async with connect(creds) as queue:
        assert await queue.max_message_bytes() == 8192  # cached for a while
        with stack.admin() as admin:
            admin.update_queue("default", unique_name, {"max_message_bytes": 1024})
            admin.wait_ready("default", unique_name)
        with pytest.raises(MessageTooLarge, match=r"^bodies\[1\] was refused: .*; none of the 3 messages was put\.$"):
            await queue.put_many(["a", "x" * 6000, "c"])  # over the broker's 1024 + header room
        assert await queue.len() == 0
        assert await queue.put_many(["a", "c"]) == [1, 2]  # the refused batch took no sequence


async def test_put_many_refuses_an_empty_list_and_more_than_100_bodies(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        with pytest.raises(SpecError, match=r"^put_many: bodies must hold 1 to 100 bodies \(got 101\)\.$") as caught:
            await queue.put_many(["m"] * 101)
        assert caught.value.errors == [{"field": "bodies", "message": "must hold 1 to 100 bodies (got 101)"}]
        with pytest.raises(SpecError, match=r"\(got 0\)"):
            await queue.put_many([])
        assert await queue.len() == 0


async def test_a_batch_that_does_not_fit_under_max_messages_puts_none(stack, unique_name):
    creds = make_queue(stack, unique_name, max_messages=3)
    async with connect(creds) as queue:
        await queue.send("one")
        with pytest.raises(QueueFull, match=r"has no room for 3 more messages \(max_messages\); none was put\.$"):
            await queue.put_many(["a", "b", "c"])
        assert await queue.len() == 1
        assert len(await queue.put_many(["a", "b"])) == 2


async def test_a_stream_without_allow_atomic_is_a_clear_error_and_the_controller_adds_it_back(stack, unique_name):
    """Queues made before put_many have no allow_atomic: the reconciler sees it as drift."""
    creds = make_queue(stack, unique_name)
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", unique_name)["id"]
    async with queue_account_connection(stack, queue_id) as nc, connect(creds) as queue:
        js = nc.jetstream()
        stream = await retry_unavailable(lambda: js.stream_info(creds["stream"]))
        assert stream.config.allow_atomic is True
        stream.config.allow_atomic = False
        await retry_unavailable(lambda: js.update_stream(stream.config))
        with pytest.raises(EnclaveError, match=r"does not take atomic batches yet .*; nothing was put\.$"):
            await queue.put_many(["a", "b"])
        assert await queue.len() == 0

        async def repaired():
            return (await retry_unavailable(lambda: js.stream_info(creds["stream"]))).config.allow_atomic

        await eventually(repaired, timeout=10)
        assert await queue.put_many(["a", "b"]) == [1, 2]
