"""Group commit (issue 16): on a broker that fsyncs every write (the default), ``send_batch`` and
puts made while another is on its way are stored as JetStream atomic batches, one fsync for
many, and each message keeps its own id, dedupe key and outcome; on an ``interval`` broker they
go one by one. Which way a message went shows in the headers the broker stored it with."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from enclave_queue.client import connect
from enclave_queue.client.grouping import MIN_GROUP, PIPELINE
from enclave_queue.client.pipe import PIPE_CHUNK
from enclave_queue.errors import MaybeStored, MessageTooLarge, QueueFull
from tests.helpers import make_queue, queue_account_connection
from tests.integration.test_sdk_faults import drain, kill_broker


async def batch_ids(stack, creds) -> dict[int, str | None]:
    """Every stored message's sequence and the atomic batch it was committed in (None: alone)."""
    async with queue_account_connection(stack, creds["username"]) as nc:
        js = nc.jetstream()
        state = (await js.stream_info(creds["stream"])).state
        found = {}
        for seq in range(state.first_seq, state.last_seq + 1):
            msg = await js.get_msg(creds["stream"], seq)
            found[seq] = (msg.headers or {}).get("Nats-Batch-Id")
        return found


async def test_send_batch_on_the_durable_default_is_one_atomic_batch_and_reads_back_in_order(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        assert await queue.send_batch([{"n": n} for n in range(300)]) == 300
        batches = await batch_ids(stack, creds)
        assert len(batches) == 300 and len(set(batches.values())) == 1 and None not in batches.values()
        taken = await drain(queue)
        assert [m.body for m in taken] == [{"n": n} for n in range(300)]


async def test_a_send_batch_of_fewer_than_min_group_goes_message_by_message_on_the_durable_default(stack, unique_name):
    """An atomic batch costs the broker more than the fsyncs a few messages save (batching.py)."""
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        assert await queue.send_batch([f"few{n}" for n in range(MIN_GROUP - 1)]) == MIN_GROUP - 1
        assert set((await batch_ids(stack, creds)).values()) == {None}
        assert await queue.send_batch([f"group{n}" for n in range(MIN_GROUP)]) == MIN_GROUP
        batches = list((await batch_ids(stack, creds)).values())
        assert batches[:MIN_GROUP - 1] == [None] * (MIN_GROUP - 1)
        assert len(set(batches[MIN_GROUP - 1:])) == 1 and batches[-1] is not None
        taken = await drain(queue)
        assert [m.body for m in taken] == [f"few{n}" for n in range(MIN_GROUP - 1)] + [f"group{n}" for n in range(MIN_GROUP)]


async def test_send_batch_on_an_interval_broker_goes_message_by_message(enclave_stack_factory):
    stack = enclave_stack_factory(env={"ENCLAVE_SYNC": "interval"})
    creds = make_queue(stack, "pipelined")
    async with connect(creds) as queue:
        await queue.put("first")
        assert await queue.send_batch([f"m{n}" for n in range(50)]) == 50
        assert set((await batch_ids(stack, creds)).values()) == {None}
        assert [m.body for m in await drain(queue)] == ["first"] + [f"m{n}" for n in range(50)]


async def test_send_batch_on_an_interval_broker_stores_every_kind_of_body_as_put_does_chunk_after_chunk(
        enclave_stack_factory):
    """The pipelined messages are written a chunk at a time (client/pipe.py), past the window too."""
    stack = enclave_stack_factory(env={"ENCLAVE_SYNC": "interval"})
    creds = make_queue(stack, "pipelined-kinds")
    kinds = [b"raw", "text", {"n": 1}, [2], b"", "x" * 3000]
    bodies = [kinds[n % len(kinds)] for n in range(1000)]
    async with connect(creds) as queue:
        await queue.put({"n": 1})
        assert await queue.send_batch(bodies, window=PIPE_CHUNK // 2 + 1) == 1000
        assert await queue.send_batch(bodies[:PIPE_CHUNK + 1]) == PIPE_CHUNK + 1
        assert set((await batch_ids(stack, creds)).values()) == {None}  # pipelined, not an atomic batch
        taken = await drain(queue)
        assert [m.body for m in taken] == [{"n": 1}] + bodies + bodies[:PIPE_CHUNK + 1]
        assert {m.headers.get("Content-Type") for m in taken if m.body == {"n": 1}} == {"application/json"}
        assert {m.headers.get("Content-Type") for m in taken if isinstance(m.body, bytes)} == {None}


async def test_a_batch_the_queue_has_no_room_for_is_sent_one_by_one_and_says_how_many_went(stack, unique_name):
    creds = make_queue(stack, unique_name, max_messages=5)
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b"])
        with pytest.raises(QueueFull, match=r"^3 of 5 messages were sent; the first failure: "):
            await queue.send_batch(["c", "d", "e", "f", "g"])
        assert [m.body for m in await drain(queue)] == ["a", "b", "c", "d", "e"]


async def test_an_oversize_body_in_a_batch_is_refused_alone_and_the_rest_are_stored(stack, unique_name):
    creds = make_queue(stack, unique_name, max_message_bytes=1024)
    async with connect(creds) as queue:
        with pytest.raises(MessageTooLarge, match=r"^2 of 3 messages were sent; the first failure: "):
            await queue.send_batch(["a", "x" * 2000, "c"])
        assert [m.body for m in await drain(queue)] == ["a", "c"]


async def test_concurrent_puts_are_committed_together_each_with_its_own_id(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.put("warm-up")  # settings read: every put below queues without waiting
        ids = await asyncio.gather(*(queue.put({"n": n}) for n in range(200)))
        assert len(set(ids)) == 200
        batches = await batch_ids(stack, creds)
        # the first PIPELINE go alone (fewer were on their way); the rest, put meanwhile, as one batch
        assert [batches[i] for i in ids[:PIPELINE]] == [None] * PIPELINE
        assert len({batches[i] for i in ids[PIPELINE:]}) == 1 and batches[ids[PIPELINE]]
        taken = {m.id: m.body for m in await drain(queue)}
        assert all(taken[i] == {"n": n} for n, i in enumerate(ids))


async def test_a_few_puts_queued_behind_another_go_alone_each_with_its_own_id(stack, unique_name):
    """Puts at once, fewer than MIN_GROUP behind the first PIPELINE: those go straight out and the
    ones queued behind them go alone too, not as a small atomic batch (a batch the broker must stage costs
    it more than the fsyncs a few messages save), each still with its dedupe key."""
    creds = make_queue(stack, unique_name)
    few = MIN_GROUP - 1
    async with connect(creds) as queue:
        await queue.put("warm-up")
        ids = await asyncio.gather(*(queue.put(f"m{n}", dedupe_key=f"k-{n}") for n in range(few + 1)))
        assert await queue.put("again", dedupe_key=f"k-{few}") == ids[-1]  # the duplicate of a queued one
        batches = await batch_ids(stack, creds)
        assert len(batches) == few + 2 and set(batches.values()) == {None}
        taken = {m.id: m.body for m in await drain(queue)}
        assert all(taken[i] == f"m{n}" for n, i in enumerate(ids))


async def test_a_repeated_dedupe_key_in_a_group_is_answered_as_its_duplicate_and_the_rest_are_stored(
        stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        first = await queue.put("original", dedupe_key="order-7")
        ids = await asyncio.gather(queue.put("x1"), queue.put("again", dedupe_key="order-7"), queue.put("x2"),
                                   queue.put("x3", dedupe_key="order-8"))
        assert ids[1] == first and len(set(ids)) == 4
        assert sorted(m.body for m in await drain(queue)) == ["original", "x1", "x2", "x3"]


async def test_concurrent_puts_on_a_full_queue_each_get_their_own_outcome(stack, unique_name):
    creds = make_queue(stack, unique_name, max_messages=3)
    async with connect(creds) as queue:
        await queue.put("there")
        outcomes = await asyncio.gather(*(queue.put(f"p{n}") for n in range(5)), return_exceptions=True)
        stored = [o for o in outcomes if isinstance(o, int)]
        assert len(stored) == 2 and all(isinstance(o, QueueFull) for o in outcomes if not isinstance(o, int))
        assert len(await drain(queue)) == 3


async def test_group_committed_puts_across_a_broker_kill_are_stored_once_each(enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "group-kill")
    async with connect(creds) as queue:
        await queue.put("warm-up")
        puts = [asyncio.ensure_future(queue.put(f"m{n}", timeout=15)) for n in range(300)]
        await asyncio.sleep(0)
        await kill_broker(stack)
        outcomes = await asyncio.gather(*puts, return_exceptions=True)
        assert all(isinstance(o, (int, MaybeStored)) for o in outcomes), outcomes
        counts = Counter(m.body for m in await drain(queue))
        assert max(counts.values()) == 1
        assert all(counts[f"m{n}"] == 1 for n, o in enumerate(outcomes) if isinstance(o, int))
