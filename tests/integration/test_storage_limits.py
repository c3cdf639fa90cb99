"""What one queue's app can take of what all queues share (issue 11, item 3), on real stacks: its
own storage (max_bytes: a full queue refuses with QueueFull and keeps what it holds), the broker's
store (a queue that does not fit is refused with StorageFull), and the control plane's notes and
error notes (bounded per queue)."""

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from enclave_queue.client import connect
from enclave_queue.controller.errornotes import ERRORS_PER_QUEUE, ERRORS_SLACK
from enclave_queue.desk.deadlines import NOTES_PER_QUEUE
from enclave_queue.errors import QueueFull, StorageFull
from enclave_queue.names import ERRORS_STREAM, NOTES_STREAM
from tests.helpers import RawClient, control_connection, eventually, make_queue

MIB = 1 << 20
BODY = b"x" * 100_000


async def fill(queue, body=BODY, most=100):
    """Put ``body`` until the queue refuses; how many were stored."""
    for stored in range(most):
        try:
            await queue.put(body)
        except QueueFull:
            return stored
    raise AssertionError(f"{most} messages of {len(body)} bytes fitted")


async def test_a_queue_at_max_bytes_refuses_with_queue_full_and_keeps_its_messages(stack, unique_name):
    small = make_queue(stack, unique_name, max_bytes=MIB)
    other = make_queue(stack, f"{unique_name}-other")
    async with connect(small) as queue:
        stored = await fill(queue)
        assert 5 <= stored <= 11  # about 1 MiB of 100 kB bodies
        assert await queue.len() == stored  # nothing was discarded to make room
    with stack.admin() as admin, pytest.raises(QueueFull, match="max_bytes"):  # by hand too: a 409 "Queue full"
        admin.send("default", unique_name, BODY.decode())
    raw = RawClient()  # and any NATS client is answered at once with the broker's error
    nc = await raw.connect(small)
    try:
        answer = json.loads((await nc.request(small["subject"], BODY, timeout=5)).data)
        assert answer["error"]["err_code"] == 10002
    finally:
        await raw.close()
    async with connect(other) as queue:  # another queue is not affected
        await queue.put(BODY)
        assert await queue.len() == 1
    async with connect(small) as queue:  # taking messages makes room again
        taken = await queue.receive(batch=3, wait=2)
        await queue.delete_many(taken)
        await queue.put(BODY)


async def test_max_bytes_can_grow_in_place(stack, unique_name):
    creds = make_queue(stack, unique_name, max_bytes=MIB)
    async with connect(creds) as queue:
        before = await fill(queue)
    with stack.admin() as admin:
        assert admin.update_queue("default", unique_name, {"max_bytes": 2 * MIB})["max_bytes"] == 2 * MIB
        admin.wait_ready("default", unique_name, timeout=20)
    async with connect(creds) as queue:
        assert await fill(queue) >= before


async def test_a_queue_that_does_not_fit_in_the_store_is_refused(enclave_stack_factory, unique_name):
    stack = enclave_stack_factory({"ENCLAVE_MAX_FILE_STORE": "1G"})
    with stack.admin() as admin:
        with pytest.raises(StorageFull, match="max_bytes"):
            admin.create_queue("default", {"name": unique_name, "max_bytes": 600 * MIB})
        assert admin.list_queues("default") == []
        admin.create_queue("default", {"name": unique_name, "max_bytes": 200 * MIB})
        admin.wait_ready("default", unique_name, timeout=20)
        with pytest.raises(StorageFull):
            admin.update_queue("default", unique_name, {"max_bytes": 600 * MIB})
        assert admin.get_queue("default", unique_name)["max_bytes"] == 200 * MIB
        admin.delete_queue("default", unique_name)
        admin.wait_deleted("default", unique_name, timeout=20)
        admin.create_queue("default", {"name": unique_name, "max_bytes": 500 * MIB})  # its room came back
        admin.wait_ready("default", unique_name, timeout=20)


async def _subjects(stack, stream, filter_):
    async with control_connection(stack) as nc:
        info = await nc.jetstream().stream_info(stream, subjects_filter=filter_)
        return info.state.subjects or {}


async def test_put_notes_are_bounded_per_queue(stack, unique_name):
    flood = make_queue(stack, unique_name)
    calm = make_queue(stack, f"{unique_name}-calm")
    with stack.admin() as admin:
        flood_id = admin.get_queue("default", unique_name)["id"]
    far = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    raw = RawClient()
    nc = await raw.connect(flood)
    try:
        note = json.dumps({"seq": 10**9, "deadline": far}).encode()
        answers = await asyncio.gather(*(nc.request("enclave.notes", note, timeout=10) for _ in range(NOTES_PER_QUEUE + 5)))
        refused = [a for a in answers if "error" in json.loads(a.data)]
        assert len(refused) == 5
        # a deadline no put can have (2099) is dropped by the control plane, not kept for ever
        late = json.dumps({"seq": 1, "deadline": "2099-01-01T00:00:00Z"}).encode()
        assert "error" in json.loads((await nc.request("enclave.notes", late, timeout=5)).data)  # the queue is full
    finally:
        await raw.close()
    calm_raw = RawClient()
    nc = await calm_raw.connect(calm)
    try:
        late = json.dumps({"seq": 1, "deadline": "2099-01-01T00:00:00Z"}).encode()
        answer = json.loads((await nc.request("enclave.notes", late, timeout=5)).data)
        assert "seq" in answer  # the other queue's note is stored: the flood took only its own room
    finally:
        await calm_raw.close()
    assert (await _subjects(stack, NOTES_STREAM, f"notes.{flood_id}")).get(f"notes.{flood_id}") == NOTES_PER_QUEUE
    with stack.admin() as admin:
        calm_id = admin.get_queue("default", f"{unique_name}-calm")["id"]
    await eventually(lambda: _no_notes(stack, calm_id), timeout=10)  # the 2099 note was forgotten


async def _no_notes(stack, queue_id):
    return not (await _subjects(stack, NOTES_STREAM, f"notes.{queue_id}"))


async def test_error_notes_are_bounded_per_queue(stack, unique_name):
    flood = make_queue(stack, unique_name)
    calm = make_queue(stack, f"{unique_name}-calm")
    with stack.admin() as admin:
        flood_id = admin.get_queue("default", unique_name)["id"]
        calm_id = admin.get_queue("default", f"{unique_name}-calm")["id"]
    for creds, count in ((calm, 10), (flood, ERRORS_PER_QUEUE + ERRORS_SLACK + 50)):
        raw = RawClient()
        nc = await raw.connect(creds)
        try:
            await asyncio.gather(*(nc.request(f"enclave.errors.{n}", b"boom", timeout=10) for n in range(1, count + 1)))
        finally:
            await raw.close()

    async def trimmed():
        return len(await _subjects(stack, ERRORS_STREAM, f"errors.{flood_id}.*")) <= ERRORS_PER_QUEUE + ERRORS_SLACK

    await eventually(trimmed, timeout=10)
    kept = await _subjects(stack, ERRORS_STREAM, f"errors.{flood_id}.*")
    assert f"errors.{flood_id}.{ERRORS_PER_QUEUE + ERRORS_SLACK + 50}" in kept  # the newest are the ones kept
    assert len(await _subjects(stack, ERRORS_STREAM, f"errors.{calm_id}.*")) == 10  # no other queue's went
