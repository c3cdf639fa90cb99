"""Batched direct gets (broker/direct.py) made side by side on one connection: each gets its own
stream's messages, on the one reply subscription the connection keeps for them, and the replies
of a get that gave up reach no other."""

import asyncio

import pytest
from nats.js import api

from enclave_queue.broker import direct
from enclave_queue.broker.direct import direct_batch, direct_get_subject
from enclave_queue.errors import BrokerUnavailable

STREAMS = ("DIRECT_A", "DIRECT_B", "DIRECT_C")


async def filled(runtime) -> None:
    js = runtime.conn.js
    for name in STREAMS:
        await js.add_stream(api.StreamConfig(name=name, subjects=[f"directtest.{name}"], allow_direct=True,
                                             storage=api.StorageType.MEMORY))
        for i in range(5):
            await js.publish(f"directtest.{name}", f"{name}-{i}".encode())


def reply_subscriptions(nc) -> int:
    prefix = nc._inbox_prefix.decode()
    return sum(1 for sub in nc._subs.values() if sub.subject.startswith(prefix) and sub.subject.endswith(".*"))


async def get_all(nc, name: str, **request):
    return await direct_batch(nc, direct_get_subject(name), {"seq": 1, "batch": 10, **request}, name)


async def test_gets_side_by_side_on_one_connection_each_get_their_own_on_one_subscription(runtime):
    await filled(runtime)
    nc = runtime.conn.control
    names = [STREAMS[i % len(STREAMS)] for i in range(30)]
    before = reply_subscriptions(nc)  # nats-py's own for requests
    for _ in range(2):
        batches = await asyncio.gather(*(get_all(nc, name) for name in names))
        for name, batch in zip(names, batches, strict=True):
            assert [m.data for m in batch.messages] == [f"{name}-{i}".encode() for i in range(5)]
            assert [m.sequence for m in batch.messages] == [1, 2, 3, 4, 5] and not batch.more
        assert reply_subscriptions(nc) == before + 1  # the same one both rounds, none per get


async def test_the_replies_of_a_get_that_gave_up_reach_no_other(runtime, monkeypatch):
    await filled(runtime)
    nc = runtime.conn.control
    monkeypatch.setattr(direct, "READ_TIMEOUT", 0.000001)
    with pytest.raises(BrokerUnavailable, match="DIRECT_A timed out"):
        await get_all(nc, "DIRECT_A")
    monkeypatch.undo()
    await asyncio.sleep(0.2)  # its replies have come (and gone nowhere)
    batch = await get_all(nc, "DIRECT_B", batch=2)
    assert [m.data for m in batch.messages] == [b"DIRECT_B-0", b"DIRECT_B-1"] and batch.more
