"""The order of a burst's moves, in-process against the real broker: every queue's copy to its
DLQ (what the DLQs' workers wait for) goes before any batch's finish (count, deletes), and a
finish waits no longer than ``FINISH_DEFER`` (a reject's, ``REJECT_FINISH_DEFER``) when the copies
never pause."""

import asyncio

import pytest

from enclave_queue.controller import mover as mover_module
from enclave_queue.names import stream_name
from enclave_queue.spec import QueueSpec, subject_for


async def failing_queue(runtime, name):
    """A queue with one message on it and a DLQ: its record, and the message's sequence."""
    await runtime.service.create(QueueSpec(name=f"{name}-dlq"))
    await runtime.service.create(QueueSpec(name=name, max_receives=1, dead_letter_queue=f"{name}-dlq"))
    record = await runtime.service.lookup.live("default", name)
    for settling in (name, f"{name}-dlq"):
        assert (await runtime.service.wait_settled("default", settling, timeout=20))["state"] == "Ready"
    ack = await runtime.conn.queue_js(record.id).publish(subject_for("default", name), f"body of {name}".encode())
    return record, ack.seq


async def left_on(runtime, record):
    return (await runtime.conn.queue_js(record.id).stream_info(stream_name(record.id))).state.messages


async def test_a_burst_is_copied_to_every_dlq_before_any_batch_is_counted_and_deleted(runtime, monkeypatch):
    # the copies' pause alone lets the finishes go (these are rejects: their bound is the one that counts)
    monkeypatch.setattr(mover_module, "REJECT_FINISH_DEFER", 30.0)
    monkeypatch.setattr(mover_module, "FINISH_DEFER", 30.0)
    mover = runtime.mover
    failing = await asyncio.gather(*(failing_queue(runtime, f"burst-{i}") for i in range(8)))
    events = []
    copy_batch, finish = mover._copy_batch, mover._finish

    async def copied_then_noted(record, dead, how, read=None):
        copied = await copy_batch(record, dead, how, read)
        events.append("copied")
        return copied

    async def noted_then_finished(copied):
        events.append("finish")
        return await finish(copied)

    monkeypatch.setattr(mover, "_copy_batch", copied_then_noted)
    monkeypatch.setattr(mover, "_finish", noted_then_finished)
    outcomes = await asyncio.wait_for(asyncio.gather(*(mover.move(record, seq) for record, seq in failing)), 20)
    assert outcomes == ["moved"] * 8
    assert events == ["copied"] * 8 + ["finish"] * 8
    for record, _ in failing:
        assert await left_on(runtime, record) == 0
        assert (await runtime.service.status("default", record.spec.name))["dead_lettered"] == 1
        dlq = await runtime.service.get("default", record.spec.dead_letter_queue)
        assert await left_on(runtime, dlq) == 1


@pytest.mark.parametrize("how", ["nack", "reject"])
async def test_a_finish_goes_after_its_bound_while_the_copies_never_pause(runtime, monkeypatch, how):
    # the bound of the way in is short, the other's longer than the test waits: the finish goes by its own
    short, long = ("REJECT_FINISH_DEFER", "FINISH_DEFER") if how == "reject" else ("FINISH_DEFER", "REJECT_FINISH_DEFER")
    monkeypatch.setattr(mover_module, short, 0.2)
    monkeypatch.setattr(mover_module, long, 60.0)
    mover = runtime.mover
    record, seq = await failing_queue(runtime, f"never-pausing-{how}")
    endless = asyncio.create_task(asyncio.Event().wait())  # a queue whose copies are never done
    mover._movers[("elsewhere", "advisory")] = endless
    mover._lull.clear()
    try:
        # "nack": what an app's word about a message handed back on its last receive becomes
        moved = mover.move(record, seq) if how == "reject" else mover._submit(record, mover_module.Dead(seq, 1), how)
        assert await asyncio.wait_for(moved, 10) == "moved"
        assert await left_on(runtime, record) == 0
        assert (await runtime.service.status("default", f"never-pausing-{how}"))["dead_lettered"] == 1
        assert not mover._lull.is_set()  # it went on its own clock, not because the copies paused
    finally:
        del mover._movers[("elsewhere", "advisory")]
        endless.cancel()
        with pytest.raises(asyncio.CancelledError):
            await endless


async def test_a_stop_lets_the_moves_under_way_finish(runtime):
    mover = runtime.mover
    failing = await asyncio.gather(*(failing_queue(runtime, f"stopping-{i}") for i in range(4)))
    moves = [asyncio.ensure_future(mover.move(record, seq)) for record, seq in failing]
    await asyncio.sleep(0)  # submitted: their copies are under way
    await mover.stop()
    assert await asyncio.wait_for(asyncio.gather(*moves), 5) == ["moved"] * 4  # settled, not cut off
    for record, _ in failing:
        assert await left_on(runtime, record) == 0
        assert (await runtime.service.status("default", record.spec.name))["dead_lettered"] == 1


async def test_the_batches_of_one_queue_finishing_together_count_in_one_write_each_move_once(runtime, monkeypatch):
    # a batch a message, and every finish held until the last copy is done: then they all count at once
    monkeypatch.setattr(mover_module, "MOVE_BATCH", 1)
    monkeypatch.setattr(mover_module, "FINISH_DEFER", 30.0)
    mover = runtime.mover
    record, first = await failing_queue(runtime, "together")
    js = runtime.conn.queue_js(record.id)
    seqs = [first] + [(await js.publish(subject_for("default", "together"), b"again")).seq for _ in range(5)]
    writes = []
    update, create = mover.store.counters.update, mover.store.counters.create

    async def noted_update(key, value, revision):
        writes.append(key)
        return await update(key, value, revision)

    async def noted_create(key, value):
        writes.append(key)
        return await create(key, value)

    monkeypatch.setattr(mover.store.counters, "update", noted_update)
    monkeypatch.setattr(mover.store.counters, "create", noted_create)
    moves = [mover._submit(record, mover_module.Dead(seq, 1), "nack") for seq in seqs]
    assert await asyncio.wait_for(asyncio.gather(*moves), 20) == ["moved"] * 6
    # six batches: the first counted alone at most, those that came meanwhile in one more write
    assert 1 <= writes.count(record.key) <= 2
    assert (await runtime.service.status("default", "together"))["dead_lettered"] == 6
    assert await left_on(runtime, record) == 0
    dlq = await runtime.service.get("default", record.spec.dead_letter_queue)
    assert await left_on(runtime, dlq) == 6
    # counted once: the same moves counted again (a batch repeated after a crash) add nothing
    async with mover._counted_once(record.key, "dead_lettered", seqs):
        pass
    assert (await runtime.service.status("default", "together"))["dead_lettered"] == 6


async def test_a_queue_s_next_count_waits_until_the_moves_counted_last_are_deleted(runtime, monkeypatch):
    """Moves counted and not yet deleted are what a crash leaves to be moved again; the counters
    remember only the last RECENT_EVENTS counted, so a queue's moves may not run ahead counting
    while earlier ones are still being deleted (a kill mid-burst counted hundreds twice)."""
    mover = runtime.mover
    record, _ = await failing_queue(runtime, "inorder")
    first_deleting, release = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with mover._counted_once(record.key, "dead_lettered", [1]):
            first_deleting.set()
            await release.wait()  # its deletes under way

    held = asyncio.create_task(first())
    await first_deleting.wait()
    second = asyncio.create_task(_count(mover, record, [2]))
    await asyncio.sleep(0.5)
    assert not second.done()  # waits for the first's block: not counted yet
    assert (await runtime.service.status("default", "inorder"))["dead_lettered"] == 1
    release.set()
    await asyncio.wait_for(asyncio.gather(held, second), 10)
    assert (await runtime.service.status("default", "inorder"))["dead_lettered"] == 2


async def _count(mover, record, seqs) -> None:
    async with mover._counted_once(record.key, "dead_lettered", seqs):
        pass


async def test_a_message_the_sweep_and_its_advisory_both_bring_is_moved_and_counted_once(runtime):
    """After a restart with a backlog, the stored advisories and the sweep find the same messages at
    once. Each message is copied and counted by one move; the other way joins it (before, both moved
    it, and with more than the counters remember in between it was counted twice: a kill mid-burst
    of 1,500 counted up to 1,997)."""
    mover = runtime.mover
    record, first = await failing_queue(runtime, "twoways")
    js = runtime.conn.queue_js(record.id)
    seqs = [first] + [(await js.publish(subject_for("default", "twoways"), b"again")).seq for _ in range(299)]
    dead = [mover_module.Dead(seq, 1) for seq in seqs]
    moved_before = mover.moved
    by_advisory = [mover._submit(record, d, "advisory") for d in dead]
    swept = await asyncio.wait_for(asyncio.gather(mover.move_batch(record, dead[:150], "sweep"),
                                                  mover.move_batch(record, dead[150:], "sweep"),
                                                  *by_advisory), 60)
    assert {**swept[0], **swept[1]} == dict.fromkeys(seqs, "moved")
    assert swept[2:] == ["moved"] * 300
    assert mover.moved - moved_before == 300  # one move a message
    assert (await runtime.service.status("default", "twoways"))["dead_lettered"] == 300
    dlq = await runtime.service.get("default", record.spec.dead_letter_queue)
    assert await left_on(runtime, dlq) == 300 and await left_on(runtime, record) == 0
