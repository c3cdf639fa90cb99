"""The control plane's publish of many messages into a queue (broker/connection.py
``publish_many_into``: the dead-letter mover's copies) against the real broker: one atomic batch
(from ``atomic_from`` messages), and one by one, each with its own answer, when they are fewer or
the broker refuses the batch."""

import pytest

from enclave_queue.broker.connection import ATOMIC_FROM, publish_many_into, stored_seq
from enclave_queue.errors import QueueFull
from enclave_queue.names import stream_name
from enclave_queue.spec import QueueSpec, subject_for
from tests.helpers import eventually


async def ready(runtime, spec: QueueSpec):
    record = await runtime.service.create(spec)

    async def is_ready():
        status = await runtime.service.status("default", spec.name)
        return status["state"] == "Ready" and status["observed_generation"] == status["generation"]

    await eventually(is_ready, timeout=20)
    return record


async def stored(runtime, record, seqs):
    js = runtime.conn.queue_js(record.id)
    return [await js.get_msg(stream_name(record.id), seq) for seq in seqs]


async def test_many_go_as_one_atomic_batch_each_at_its_own_sequence(runtime):
    spec = QueueSpec(name="copies")
    record = await ready(runtime, spec)
    messages = [(f"m{n}".encode(), {"Nats-Msg-Id": f"id-{n}", "Enclave-Note": f"n{n}"}) for n in range(5)]
    answers = await publish_many_into(runtime.conn, record.id, subject_for("default", "copies"), messages,
                                      atomic_from=5)
    seqs = [stored_seq(answer, spec) for answer in answers]
    assert seqs == list(range(seqs[0], seqs[0] + 5))
    found = await stored(runtime, record, seqs)
    assert [(m.data, m.headers["Nats-Msg-Id"], m.headers["Enclave-Note"]) for m in found] == \
        [(f"m{n}".encode(), f"id-{n}", f"n{n}") for n in range(5)]
    assert len({m.headers.get("Nats-Batch-Id") for m in found}) == 1 and found[0].headers.get("Nats-Batch-Id")


async def test_fewer_than_atomic_from_go_one_by_one(runtime):
    spec = QueueSpec(name="few")
    record = await ready(runtime, spec)
    messages = [(f"m{n}".encode(), {"Nats-Msg-Id": f"id-{n}"}) for n in range(ATOMIC_FROM - 1)]
    answers = await publish_many_into(runtime.conn, record.id, subject_for("default", "few"), messages)
    found = await stored(runtime, record, [stored_seq(answer, spec) for answer in answers])
    assert [m.data for m in found] == [f"m{n}".encode() for n in range(ATOMIC_FROM - 1)]
    assert {m.headers.get("Nats-Batch-Id") for m in found} == {None}


async def test_a_batch_holding_an_id_stored_already_goes_one_by_one_each_with_its_answer(runtime):
    # a move repeated after a crash: the one copied already is a duplicate, the others are stored
    record = await ready(runtime, QueueSpec(name="again"))
    subject = subject_for("default", "again")
    [first] = await publish_many_into(runtime.conn, record.id, subject, [(b"m1", {"Nats-Msg-Id": "id-1"})])
    answers = await publish_many_into(runtime.conn, record.id, subject, [
        (b"m0", {"Nats-Msg-Id": "id-0"}), (b"m1 again", {"Nats-Msg-Id": "id-1"}), (b"m2", {"Nats-Msg-Id": "id-2"})],
        atomic_from=2)
    assert answers[1]["seq"] == first["seq"] and answers[1].get("duplicate")
    assert not answers[0].get("duplicate") and not answers[2].get("duplicate")
    found = await stored(runtime, record, [answers[0]["seq"], first["seq"], answers[2]["seq"]])
    assert [m.data for m in found] == [b"m0", b"m1", b"m2"]
    info = await runtime.conn.queue_js(record.id).stream_info(stream_name(record.id))
    assert info.state.messages == 3


async def test_a_batch_with_no_room_for_all_stores_as_many_as_fit(runtime):
    spec = QueueSpec(name="small", max_messages=2)
    record = await ready(runtime, spec)
    messages = [(f"m{n}".encode(), {"Nats-Msg-Id": f"id-{n}"}) for n in range(3)]
    answers = await publish_many_into(runtime.conn, record.id, subject_for("default", "small"), messages, atomic_from=2)
    assert [m.data for m in await stored(runtime, record, [stored_seq(a, spec) for a in answers[:2]])] == \
        [b"m0", b"m1"]
    with pytest.raises(QueueFull):
        stored_seq(answers[2], spec)
