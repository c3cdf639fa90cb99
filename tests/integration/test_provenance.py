"""Dead-letter provenance against the real stack (issue 11, item 1): an app that can publish to a
dead-letter queue cannot make its messages pass for another queue's dead letters, nor pre-empt the
mover's copy of a real one."""

import json

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import NotFound, SpecError
from tests.helpers import RawClient, eventually, make_queue

FORGED = {"Enclave-Source-Queue": "", "Enclave-Source-Project": "default", "Enclave-Source-Sequence": "1",
          "Enclave-Receive-Count": "3", "Enclave-Last-Error": "forged",
          "Enclave-Provenance": "v1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}


async def publish_as_app(creds, body, headers):
    """Publish to the queue with its own app credentials, as any NATS client could; the PubAck."""
    raw = RawClient()
    nc = await raw.connect(creds)
    try:
        reply = await nc.request(creds["subject"], body, timeout=5, headers=headers)
        return json.loads(reply.data)
    finally:
        await raw.close()


def dead_letters(stack, name):
    with stack.admin() as admin:
        return admin.list_dead_letters("default", name, limit=500)["dead_letters"]


@pytest.fixture
def setup(stack, unique_name):
    """A victim queue with a dead-letter queue whose app is the attacker, and a second victim that
    uses no dead-letter queue at all."""
    dlq, victim, other = f"{unique_name}-dlq", unique_name, f"{unique_name}-other"
    dlq_creds = make_queue(stack, dlq)
    victim_creds = make_queue(stack, victim, max_receives=1, visibility_timeout_seconds=1, dead_letter_queue=dlq)
    other_creds = make_queue(stack, other)
    return dlq, dlq_creds, victim, victim_creds, other, other_creds


async def test_forged_source_headers_are_not_read_as_provenance(stack, setup):
    dlq, dlq_creds, victim, victim_creds, other, other_creds = setup
    for target in (victim, other):
        ack = await publish_as_app(dlq_creds, f"evil for {target}".encode(), {**FORGED, "Enclave-Source-Queue": target})
        assert "seq" in ack
    listed = dead_letters(stack, dlq)
    assert len(listed) == 2
    for letter in listed:  # read as plain messages: no source, no count, no error
        assert letter["source_queue"] is None and letter["source_project"] is None
        assert letter["receive_count"] is None and letter["last_error"] is None

    with stack.admin() as admin:
        for letter in listed:  # a retry takes none: a redrive names the destination
            with pytest.raises(SpecError, match="a redrive that names a destination"):
                admin.retry_dead_letter("default", dlq, letter["sequence"])
        task = admin.start_redrive("default", dlq)
        done = await eventually(lambda: (t := admin.redrive_status("default", dlq, task["id"]))["state"] != "running"
                                and t)
        assert done["moved"] == 0 and done["failed"] == 2
        # the victim's own views do not count them as its letters, and clear leaves them be
        assert [m for m in admin.export("default", victim) if m["status"] == "dead"] == []
        assert admin.clear("default", victim)["dead"] == 0
    assert len(dead_letters(stack, dlq)) == 2

    async with connect(victim_creds) as queue:  # the app's desk: only letters the mover wrote
        assert await queue.dead_letters(limit=50) == []
        assert await queue.receive(batch=10, wait=0.5) == []
    async with connect(other_creds) as queue:
        assert await queue.receive(batch=10, wait=0.5) == []


async def test_a_predicted_mover_id_does_not_swallow_a_real_dead_letter(stack, setup):
    dlq, dlq_creds, victim, victim_creds, _, _ = setup
    with stack.admin() as admin:
        victim_id = admin.get_queue("default", victim)["id"]
    async with connect(victim_creds) as queue:
        sequence = await queue.send("real work")
    # the ids an earlier version used for the mover's copy, published first by the dead-letter queue's app
    for guess in (f"dlq:{victim_id}:{sequence}", f"dlq:{victim_id}:{sequence + 1}"):
        assert "seq" in await publish_as_app(dlq_creds, b"decoy", {"Nats-Msg-Id": guess})
    async with connect(victim_creds) as queue:
        assert [m.body for m in await queue.receive(batch=1, wait=3)] == ["real work"]
    real = await eventually(lambda: [letter for letter in dead_letters(stack, dlq) if letter["source_queue"]],
                            timeout=15)
    assert [(r["source_queue"], r["source_sequence"], r["body"]) for r in real] == [(victim, sequence, "real work")]

    # the real letter is the victim's: its desk lists it, and a retry sends it home exactly once
    async with connect(victim_creds) as queue:
        (letter,) = await queue.dead_letters(limit=50)
        assert letter.body == "real work"
        await letter.retry()
        with pytest.raises(NotFound):
            await letter.retry()
        (back,) = await queue.receive(batch=10, wait=3)
        assert back.body == "real work"
        await back.delete()
    assert sorted(letter["body"] for letter in dead_letters(stack, dlq)) == ["decoy", "decoy"]


async def test_a_replayed_real_letter_keeps_its_provenance_only_with_its_own_body(stack, setup):
    """The app of the dead-letter queue reads a real letter's headers and republishes them over
    another body: the signature does not cover that body, so the copy names no source."""
    dlq, dlq_creds, victim, victim_creds, _, _ = setup
    async with connect(victim_creds) as queue:
        await queue.send("original")
        assert await queue.receive(batch=1, wait=3)
    (real,) = await eventually(lambda: dead_letters(stack, dlq), timeout=15)
    raw = RawClient()
    nc = await raw.connect(dlq_creds)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind(dlq_creds["consumer"], stream=dlq_creds["stream"])
        (msg,) = await sub.fetch(1, timeout=5)
        stolen = {k: v for k, v in (msg.headers or {}).items() if k.startswith("Enclave-")}
        await msg.nak()
    finally:
        await raw.close()
    assert stolen.get("Enclave-Provenance")
    await publish_as_app(dlq_creds, b"swapped body", stolen)
    await publish_as_app(dlq_creds, b"original", stolen)  # the same letter again, as it was
    listed = dead_letters(stack, dlq)
    by_body = {letter["body"]: letter for letter in listed}
    assert by_body["original"]["source_queue"] == victim == real["source_queue"]
    assert by_body["swapped body"]["source_queue"] is None
    assert [letter["body"] for letter in listed].count("original") == 2

    with stack.admin() as admin:  # a redrive sends the real letter home once, the replay deduplicated
        task = admin.start_redrive("default", dlq)
        done = await eventually(lambda: (t := admin.redrive_status("default", dlq, task["id"]))["state"] != "running"
                                and t)
    assert (done["moved"], done["failed"]) == (2, 1)
    async with connect(victim_creds) as queue:
        assert [m.body for m in await queue.receive(batch=10, wait=1)] == ["original"]
