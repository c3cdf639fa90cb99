"""The resync and the depth sampler read the broker through one server-wide JSZ snapshot: a resync
reconciles only the queues the snapshot shows out of step (and so still repairs drift), the
snapshot pages through every account, and a depth read from it equals one read queue by queue."""

from datetime import UTC, datetime

import pytest

from enclave_queue.broker.depth import read_depth
from enclave_queue.client import connect
from enclave_queue.controller import jsz
from enclave_queue.controller.jsz import Snapshot
from enclave_queue.names import CONSUMER
from enclave_queue.retry import retry_unavailable
from enclave_queue.spec import QueueSpec
from tests.helpers import eventually


async def ready_queues(runtime, names):
    queues = {}
    for name in names:
        queues[name] = await runtime.service.create(QueueSpec(name=name))

    async def all_ready():
        for name in names:
            status = await runtime.service.status("default", name)
            if status["state"] != "Ready" or status["observed_generation"] != status["generation"]:
                return False
        return True

    await eventually(all_ready, timeout=20)
    return queues


async def test_a_resync_reconciles_only_the_queues_out_of_step_and_repairs_them(runtime):
    queues = await ready_queues(runtime, ["calm", "lost-consumer", "changed-consumer"])
    assert await eventually(lambda: _none_out_of_step(runtime), timeout=10)

    lost, changed = queues["lost-consumer"], queues["changed-consumer"]
    await retry_unavailable(lambda: runtime.conn.queue_js(lost.id).delete_consumer(lost.id.upper(), CONSUMER))
    js = runtime.conn.queue_js(changed.id)
    config = (await js.consumer_info(changed.id.upper(), CONSUMER)).config
    config.ack_wait = 99.0
    await js.add_consumer(changed.id.upper(), config)

    assert sorted(await runtime.reconciler.out_of_step()) == ["default.changed-consumer", "default.lost-consumer"]

    async def repaired():
        try:
            lost_info = await runtime.conn.queue_js(lost.id).consumer_info(lost.id.upper(), CONSUMER)
        except Exception:
            return False
        changed_info = await js.consumer_info(changed.id.upper(), CONSUMER)
        return lost_info.config.ack_wait == 30 and changed_info.config.ack_wait == 30

    await eventually(repaired, timeout=10)  # by the periodic resync: the watch saw nothing change
    assert await eventually(lambda: _none_out_of_step(runtime), timeout=10)


async def _none_out_of_step(runtime):
    return await runtime.reconciler.out_of_step() == []


async def test_a_stream_changed_behind_the_controllers_back_is_out_of_step(runtime):
    queue = (await ready_queues(runtime, ["drifted"]))["drifted"]
    assert await eventually(lambda: _none_out_of_step(runtime), timeout=10)
    js = runtime.conn.queue_js(queue.id)
    info = await js.stream_info(queue.id.upper())
    desired = info.config.max_msg_size
    for _ in range(5):
        info.config.max_msg_size = 2048
        await js.update_stream(info.config)
        if (seen := await runtime.reconciler.out_of_step()) == ["default.drifted"]:
            break
        # a resync (every 0.5 s here) came in between and put the stream back already
        assert seen == [] and (await js.stream_info(queue.id.upper())).config.max_msg_size == desired
    else:
        pytest.fail("the drift was never found out of step")
    await eventually(lambda: _none_out_of_step(runtime), timeout=10)
    assert (await js.stream_info(queue.id.upper())).config.max_msg_size == desired


async def test_the_snapshot_pages_through_every_account(runtime, monkeypatch):
    queues = await ready_queues(runtime, [f"paged-{i}" for i in range(5)])
    monkeypatch.setattr(jsz, "PAGE", 2)
    snapshot = await Snapshot.read(runtime.conn)
    assert len(snapshot.accounts) > 5  # the queues' accounts and the platform's own
    for queue in queues.values():
        stream = snapshot.stream(queue.id)
        assert stream is not None and {c["name"] for c in stream["consumer_detail"]} >= {CONSUMER}


async def test_a_depth_from_the_snapshot_is_the_depth_read_queue_by_queue(runtime):
    queue = (await ready_queues(runtime, ["deep"]))["deep"]
    creds = await runtime.service.credentials("default", "deep")
    async with connect(creds) as q:
        for i in range(5):
            await q.put(f"m{i}")
        taken = await q.receive(2, wait=5)
        assert len(taken) == 2

        snapshot = await Snapshot.read(runtime.conn)
        now = datetime.now(UTC)
        from_snapshot = await read_depth(snapshot, queue.id, now=now)  # type: ignore[arg-type]
        one_by_one = await read_depth(runtime.conn, queue.id, now=now)
        assert from_snapshot == one_by_one
        assert (from_snapshot.waiting, from_snapshot.in_flight, from_snapshot.sent) == (3, 2, 5)

        stored = await runtime.sampler.sample()
        assert stored == 1  # one sample a live queue
        await q.delete_many(taken)

