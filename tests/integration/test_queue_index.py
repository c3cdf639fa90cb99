"""The queue index's copy of the records, kept by a watch of the bucket on a real broker: it
follows creates, changes and deletes; a lookup it cannot answer is read fresh; and after the broker
restarts the copy starts again from the bucket, so nothing written since is missed."""

import nats
import nats.errors
import pytest

from enclave_queue.spec import QueueSpec
from enclave_queue.state.queries import QueueIndex
from enclave_queue.state.records import QueueRecord
from tests.helpers import eventually


@pytest.fixture
async def index(store):
    index = QueueIndex(store)
    await index.start()
    try:
        yield index
    finally:
        await index.stop()


def record(queue_id: str, name: str, **spec: object) -> QueueRecord:
    return QueueRecord(id=queue_id, spec=QueueSpec(name=name, **spec))


async def watched_as(index: QueueIndex, queue_id: str, wanted):
    """Wait until the copy of ``queue_id``'s record is ``wanted(record)``; the record."""
    def check():
        found = index.watched(queue_id)
        return (found,) if wanted(found) else None
    return (await eventually(check, timeout=5, interval=0.02))[0]


async def answered(read):
    """``read``'s answer, or None while the broker (restarting) does not answer in time."""
    try:
        return await read
    except nats.errors.TimeoutError:
        return None


async def test_the_copy_follows_creates_changes_and_deletes(store, index):
    await store.queues.create("default.orders", record("q1", "orders", dead_letter_queue="bad", max_receives=3))
    await store.queues.create("default.bad", record("q2", "bad"))
    await store.queues.create("default.worse", record("q3", "worse"))
    orders = await watched_as(index, "q1", lambda r: r is not None)
    await watched_as(index, "q2", lambda r: r is not None)
    await watched_as(index, "q3", lambda r: r is not None)
    assert (await index.record_of("q1", cached=True)) == orders
    assert (await index.dead_letter_queue_of(orders)).id == "q2"

    # a changed DLQ reaches the copy, and the next lookup of the DLQ follows it
    _, revision = await store.queues.get("default.orders")
    changed = orders.model_copy(update={"spec": orders.spec.model_copy(update={"dead_letter_queue": "worse"}),
                                        "generation": 2})
    await store.queues.update("default.orders", changed, revision)
    orders = await watched_as(index, "q1", lambda r: r is not None and r.generation == 2)
    assert (await index.dead_letter_queue_of(orders)).id == "q3"

    # a DLQ being deleted is no DLQ; one deleted is read fresh, and is gone
    worse, revision = await store.queues.get("default.worse")
    await store.queues.update("default.worse", worse.model_copy(update={"deleting": True}), revision)
    await watched_as(index, "q3", lambda r: r is not None and r.deleting)
    assert await index.dead_letter_queue_of(orders) is None
    await store.queues.delete("default.worse")
    await watched_as(index, "q3", lambda r: r is None)
    assert await index.dead_letter_queue_of(orders) is None
    await store.queues.delete("default.orders")
    await watched_as(index, "q1", lambda r: r is None)
    assert await index.record_of("q1", cached=True) is None


async def test_a_record_the_copy_does_not_hold_is_read_fresh(store):
    """The watch not running (or not caught up yet): a cached lookup is a read, as any other."""
    index = QueueIndex(store)
    await store.queues.create("default.fresh", record("q9", "fresh", dead_letter_queue="dlq"))
    await store.queues.create("default.dlq", record("q10", "dlq"))
    assert index.watched("q9") is None
    found = await index.record_of("q9", cached=True)
    assert found is not None and found.spec.name == "fresh"
    assert (await index.dead_letter_queue_of(found)).id == "q10"
    assert await index.record_of("nope", cached=True) is None


async def test_after_a_broker_restart_the_copy_misses_nothing_written_since(nats_server, store, index):
    await store.queues.create("default.kept", record("q5", "kept"))
    await watched_as(index, "q5", lambda r: r is not None)
    nats_server.restart()
    # written once the broker is back: the watch from before the restart would not deliver it
    kept, revision = await eventually(lambda: answered(store.queues.get("default.kept")), timeout=10)
    await store.queues.update("default.kept", kept.model_copy(update={"generation": 7}), revision)
    await store.queues.create("default.new", record("q6", "new"))
    await watched_as(index, "q5", lambda r: r is not None and r.generation == 7)
    await watched_as(index, "q6", lambda r: r is not None)
