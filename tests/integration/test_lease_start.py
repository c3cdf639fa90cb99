"""The control-plane lease (controller/lease.py) on a real broker: the holder's work is started
while the lease is renewed, and a start that fails gives the lease up, so the work is started
again (where a node used to hold the lease for good with its work half started: nothing
reconciled, no dead letter moved, until a restart by hand)."""

import asyncio

import nats

from enclave_queue.broker.tasks import stop_tasks
from enclave_queue.controller import lease as lease_module
from enclave_queue.controller.lease import Lease
from tests.helpers import eventually


async def test_a_start_that_fails_gives_the_lease_up_and_is_tried_again(nats_server):
    nc = await nats.connect(nats_server.url)
    starts: list[str] = []
    stopped: list[str] = []

    async def acquired():
        starts.append("start")
        if len(starts) == 1:
            raise RuntimeError("the mover could not start")

    async def lost():
        stopped.append("stop")

    lease = Lease(nc.jetstream(), "node-a", 1, acquired, lost)
    try:
        await lease.start()
        assert (starts, stopped, lease.held) == (["start"], ["stop"], False)  # given up, what started stopped
        assert await eventually(lambda: lease.held and len(starts) == 2, timeout=5)  # taken again
        assert stopped == ["stop"]
    finally:
        await lease.stop()
        await nc.close()


async def test_the_lease_is_renewed_while_a_slow_start_runs(nats_server, monkeypatch):
    """A start longer than the key lives must not let it lapse for another node to take."""
    monkeypatch.setattr(lease_module, "TTL", 2.0)
    monkeypatch.setattr(lease_module, "RENEW", 0.3)
    nc = await nats.connect(nats_server.url)
    release = asyncio.Event()

    async def slow():
        await release.wait()

    async def nothing():
        pass

    holder = Lease(nc.jetstream(), "node-a", 1, slow, nothing)
    other = Lease(nc.jetstream(), "node-b", 1, nothing, nothing)
    starting = asyncio.create_task(holder.start())
    try:
        await eventually(lambda: holder.held, timeout=5)
        await other.start()
        await asyncio.sleep(3.0)  # past the key's 2 s: renewed meanwhile, so node-b never takes it
        assert (holder.held, other.held) == (True, False)
        release.set()
        await asyncio.wait_for(starting, 5)
    finally:
        release.set()
        await other.stop()
        await holder.stop()
        await nc.close()


async def test_a_holder_that_wakes_from_a_pause_stops_its_work_before_it_renews(nats_server):
    # a SIGSTOP longer than the lease: another node may hold it now, so the work stops at once, not
    # after a renewal's round trip (two nodes had held it for up to 2 s)
    nc = await nats.connect(nats_server.url)
    events: list[str] = []

    async def acquired():
        events.append("start")

    async def lost():
        events.append("stop")

    lease = Lease(nc.jetstream(), "node-a", 1, acquired, lost)
    try:
        await lease.start()
        await stop_tasks([lease._task])  # its loop paused: the test drives the rounds
        assert (lease.held, events) == (True, ["start"])
        renew = lease._kv.update

        async def noted_renew(*args, **kwargs):
            events.append("renew")
            return await renew(*args, **kwargs)

        lease._kv.update = noted_renew
        lease._renewed -= lease_module.TTL + 1  # as after a pause that long
        await lease._round()
        assert events[:2] == ["start", "stop"]  # stopped before any renewal was tried
        # the key was still its own (nobody took it meanwhile): taken back, and the work started again
        assert await eventually(lambda: lease.held and events.count("start") == 2, timeout=5)
    finally:
        await lease.stop()
        await nc.close()
