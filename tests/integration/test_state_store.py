"""The state store's listings against a real broker: complete every time (nats-py's own end
marker races with the first entries), deletes left out, and no consumer left behind (nats-server
2.15 refuses a stream's 1001st consumer)."""

import asyncio

import nats
import pytest

from enclave_queue import pushes
from enclave_queue.broker.tasks import stop_tasks
from enclave_queue.state.kv import Store
from enclave_queue.state.records import TokenRecord
from tests.helpers import eventually


async def test_a_full_bucket_is_never_listed_as_empty(store):
    for key in ("a", "b", "c"):
        await store.tokens.put(key, TokenRecord(name=key))
    await store.tokens.delete("c")  # the last entry is a delete: the listing still ends
    wrong = [len(found) for found in [await store.tokens.items() for _ in range(500)] if len(found) != 2]
    assert wrong == []  # about 1 in 300 came back empty when nats-py's marker was trusted
    assert sorted(key for key, _, _ in await store.tokens.items()) == ["a", "b"]


async def test_a_pattern_nothing_matches_is_an_empty_listing(store):
    await store.tokens.put("shop.orders", TokenRecord(name="x"))
    assert await store.tokens.items("billing.*") == []
    assert [key for key, _, _ in await store.tokens.items("shop.*")] == ["shop.orders"]


async def test_listings_leave_no_consumers_behind(store, nats_server):
    await store.tokens.put("a", TokenRecord(name="a"))
    for _ in range(50):
        await store.tokens.items()
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()

        async def none_left():
            return (await js.stream_info("KV_enclave-tokens")).state.consumer_count == 0

        await eventually(none_left, timeout=10, interval=0.2)
    finally:
        await nc.close()


def running() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if not t.done()} - {asyncio.current_task()}


async def read_all(updates) -> None:
    async for _ in updates:
        pass


@pytest.mark.parametrize("how", ["watch", "watch_keys", "items"])
async def test_a_watch_cancelled_at_any_step_leaves_no_watcher_running(store, how):
    await store.queues.put("shop.orders", TokenRecord(name="x"))
    before = running()  # the connection's own
    for steps in range(40):  # each step of making the watcher, reading it and stopping it
        watching = getattr(store.queues, how)()
        task = asyncio.ensure_future(watching if how == "items" else read_all(watching))
        for _ in range(steps):
            await asyncio.sleep(0)
        await stop_tasks([task])  # cancelled again if Python 3.11's wait_for drops the cancel
        # one cancelled while being made is stopped once made; nats-py's heartbeat and flow-control
        # checks run as long as the connection is open
        await eventually(lambda: running() <= before, timeout=5, interval=0.01)


@pytest.mark.parametrize("how", ["watch", "watch_keys"])
async def test_a_watch_whose_connection_closed_leaves_no_watcher_running(nats_server, how):
    before = running()
    nc = await nats.connect(nats_server.url)
    store = await Store.open(nc.jetstream())
    updates = getattr(store.queues, how)()
    seen = asyncio.ensure_future(anext(updates))
    await store.queues.put("shop.orders", TokenRecord(name="x"))
    assert (await asyncio.wait_for(seen, 5))[0 if how == "watch" else slice(None)] == "shop.orders"
    await nc.close()
    await updates.aclose()  # the unsubscribe fails on the closed connection
    # nats-py's heartbeat check would look at the connection again in 10 s
    await eventually(lambda: running() <= before, timeout=2, interval=0.01)


async def test_an_ordered_consumer_whose_connection_closed_leaves_nothing_running(nats_server):
    # the error notes' and the desk deadlines' subscriptions, stopped after the connection closed
    before = running()
    nc = await nats.connect(nats_server.url)
    js = nc.jetstream()
    await js.add_stream(name="notes", subjects=["notes.>"])
    got = asyncio.Event()

    async def on_note(_msg) -> None:
        got.set()

    sub = await js.subscribe("notes.>", ordered_consumer=True, cb=on_note)
    await js.publish("notes.a", b"x")
    await asyncio.wait_for(got.wait(), 5)
    await nc.close()
    await pushes.unsubscribe(sub)
    await eventually(lambda: running() <= before, timeout=2, interval=0.01)


async def test_concurrent_counts_of_one_queue_all_land_without_fighting_over_the_key(store, monkeypatch):
    # a flood of releases counted each at once: the compare-and-sets lost to one another, retried
    # at once, and the control plane spent minutes reading and writing one key
    writes = []
    update, create = store.counters.update, store.counters.create

    async def noted_update(*args):
        writes.append("update")
        return await update(*args)

    async def noted_create(*args):
        writes.append("create")
        return await create(*args)

    monkeypatch.setattr(store.counters, "update", noted_update)
    monkeypatch.setattr(store.counters, "create", noted_create)
    await asyncio.gather(*(store.count("shop.orders", "released") for _ in range(50)))
    assert (await store.counts("shop.orders")).released == 50
    assert len(writes) == 50  # one write a count: none lost a race and was tried again
