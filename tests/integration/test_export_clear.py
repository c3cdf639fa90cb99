"""Export, clear and delayed sends by hand, against the real broker: an export lists every message
with its status and takes nothing off; a delayed message waits for its time and keeps its id;
clear removes waiting, delayed and this queue's dead letters and leaves in-flight ones to finish."""

import base64
import json
from datetime import datetime

import httpx
import pytest

from enclave_queue.client import connect
from enclave_queue.errors import NotFound
from tests.helpers import control_connection, eventually, make_queue, publish_as_an_app

NACKED_FOR = 30  #: seconds an in-flight message stays handed back (longer than any test)


def export(stack, name, project="default"):
    with stack.admin() as admin:
        return list(admin.export(project, name))


def counts(stats):
    """A queue's stats without the age, which changes by itself."""
    return {k: v for k, v in stats.items() if k != "oldest_age_seconds"}


def by_body(messages):
    return {str(m["body"]) if m["body"] is not None else m["body_base64"]: m for m in messages}


def letters(stack, name):
    with stack.admin() as admin:
        return admin.list_dead_letters("default", name, limit=500)["dead_letters"]


@pytest.fixture
def queues(stack, unique_name):
    """A queue (2 receives, 1 s visibility) with a dead-letter queue."""
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, visibility_timeout_seconds=1, dead_letter_queue=dlq)
    return unique_name, creds, dlq


async def kill(stack, creds, dlq, body):
    """Send ``body`` and let it use up its two receives (each nacked with an error) until it is
    on the dead-letter queue."""
    async with connect(creds) as queue:
        await queue.send(body)
        for attempt in (1, 2):
            (message,) = await queue.receive(wait=3)
            await message.nack(error=f"failed on try {attempt}")
    await eventually(lambda: any(letter["body"] == body for letter in letters(stack, dlq)), timeout=10)


async def lease(creds, error=None):
    """Receive the oldest waiting message and hand it back for NACKED_FOR seconds: in flight."""
    async with connect(creds) as queue:
        (message,) = await queue.receive(wait=3)
        await message.nack(delay_s=NACKED_FOR, error=error)
        return message


async def test_export_lists_every_message_with_its_status_and_takes_nothing_off(stack, queues):
    name, creds, dlq = queues
    await kill(stack, creds, dlq, "dead one")
    with stack.admin() as admin:
        leased_seq = admin.send("default", name, "in flight")["sequence"]
        await lease(creds, error="SMTP 451")
        waiting = admin.send("default", name, {"order": 7})
        raw = admin.send("default", name, body_base64=base64.b64encode(b"\xff\x00raw").decode())
        delayed = admin.send("default", name, "later", delay=3600)
        before = (counts(admin.stats("default", name)), admin.peek("default", name, 100))

        exported = export(stack, name)

        assert (counts(admin.stats("default", name)), admin.peek("default", name, 100)) == before
    found = by_body(exported)
    assert [m["status"] for m in exported] == ["in_flight", "waiting", "waiting", "delayed", "dead"]
    assert [m["sequence"] for m in exported[:4]] == sorted(m["sequence"] for m in exported[:4])

    flying = found["in flight"]
    assert (flying["id"], flying["sequence"], flying["attempts"]) == (leased_seq, leased_seq, 1)
    assert flying["last_error"] == "SMTP 451" and flying["content_type"] == "text/plain; charset=utf-8"

    order = found["{'order': 7}"]
    assert order["body"] == {"order": 7} and order["content_type"] == "application/json"
    assert (order["id"], order["sequence"], order["attempts"], order["last_error"]) == (
        waiting["sequence"], waiting["sequence"], 0, None)
    assert datetime.fromisoformat(order["enqueued_at"]).tzinfo is not None

    binary = found[base64.b64encode(b"\xff\x00raw").decode()]
    assert binary["body"] is None and binary["sequence"] == raw["sequence"]

    later = found["later"]
    assert later["id"] == later["sequence"] == delayed["sequence"]
    assert later["due_at"] == delayed["delayed_until"] and later["attempts"] == 0

    dead = found["dead one"]
    assert dead["attempts"] == 2 and dead["last_error"] == "failed on try 2"
    assert dead["id"] == 1 and "deadline" not in dead

    async with connect(creds) as queue:  # the waiting ones are still there to receive
        received = await queue.receive(batch=10, wait=1)
        assert sorted(m.sequence for m in received) == [waiting["sequence"], raw["sequence"]]
        for message in received:
            await message.ack()


async def test_a_delayed_message_waits_for_its_time_and_keeps_the_id_send_returned(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with stack.admin() as admin:
        sent = admin.send("default", unique_name, {"later": True}, delay=4)
        assert sent["duplicate"] is False and "delayed_until" in sent
        assert admin.receive("default", unique_name, 10, wait=0.2) == []
        assert admin.stats("default", unique_name)["delayed"] == 1
    async with connect(creds) as queue:
        messages = await eventually(lambda: queue.receive(wait=1), timeout=10)
        (message,) = messages
        assert message.body == {"later": True}
        assert message.id == sent["sequence"] != message.sequence
        await message.ack()


async def test_a_delayed_send_with_a_dedupe_key_seen_before_is_a_duplicate(stack, unique_name):
    make_queue(stack, unique_name)
    with stack.admin() as admin:
        first = admin.send("default", unique_name, "once", dedupe_key="k-1", delay=600)
        admin.send("default", unique_name, "between")
        again = admin.send("default", unique_name, "once", dedupe_key="k-1", delay=600)
        assert (again["sequence"], again["duplicate"]) == (first["sequence"], True)
        assert [m["status"] for m in admin.export("default", unique_name)] == ["delayed", "waiting"]


async def test_clear_removes_waiting_delayed_and_own_dead_letters_and_leaves_in_flight_to_finish(stack, queues):
    name, creds, dlq = queues
    other = f"{name}-other"
    other_creds = make_queue(stack, other, max_receives=2, visibility_timeout_seconds=1, dead_letter_queue=dlq)
    await kill(stack, creds, dlq, "mine")
    await kill(stack, other_creds, dlq, "theirs")
    with stack.admin() as admin:
        admin.send("default", name, "leased")
        leased = await lease(creds)
        for i in range(3):
            admin.send("default", name, f"waiting {i}")
        admin.send("default", name, "later", delay=3600)

        assert admin.clear("default", name) == {"waiting": 3, "delayed": 1, "dead": 1}

        # the one left is the very message leased before the clear, still in flight
        assert [(m["status"], m["sequence"], m["body"]) for m in admin.export("default", name)] == [
            ("in_flight", leased.sequence, "leased")]
        assert [letter["body"] for letter in letters(stack, dlq)] == ["theirs"]
        stats = admin.stats("default", name)
        # dead: this queue's own letters on the shared dead-letter queue ("theirs" is another queue's)
        assert (stats["waiting"], stats["in_flight"], stats["delayed"], stats["dead"]) == (0, 1, 0, 0)
        assert admin.clear("default", name) == {"waiting": 0, "delayed": 0, "dead": 0}


async def test_an_in_flight_message_can_still_be_deleted_or_nacked_after_a_clear(stack, unique_name):
    make_queue(stack, unique_name, visibility_timeout_seconds=30)
    with stack.admin() as admin:
        admin.send("default", unique_name, "deleted after")
        admin.send("default", unique_name, "nacked after")
        first, second = admin.receive("default", unique_name, 2, wait=1)
        admin.send("default", unique_name, "waiting")
        assert admin.clear("default", unique_name) == {"waiting": 1, "delayed": 0, "dead": 0}
        admin.delete_message("default", unique_name, first["receipt"])
        admin.nack_message("default", unique_name, second["receipt"])
        (back,) = admin.receive("default", unique_name, 10, wait=2)
        assert (back["body"], back["receive_count"]) == ("nacked after", 2)
        admin.delete_message("default", unique_name, back["receipt"])
        assert list(admin.export("default", unique_name)) == []


async def test_clear_counts_are_kept_on_the_queue_and_its_dead_letter_queue(stack, queues):
    name, creds, dlq = queues
    await kill(stack, creds, dlq, "gone")
    with stack.admin() as admin:
        admin.send("default", name, "a")
        admin.send("default", name, "b", delay=600)
        assert admin.clear("default", name) == {"waiting": 1, "delayed": 1, "dead": 1}
    async with control_connection(stack) as nc:
        counters = await nc.jetstream().key_value("enclave-counters")
        mine = json.loads((await counters.get(f"default.{name}")).value)
        theirs = json.loads((await counters.get(f"default.{dlq}")).value)
    assert (mine["cleared"], mine["dead_lettered"], theirs["cleared"]) == (2, 1, 1)


@pytest.mark.parametrize("delay", [-1, 604801])
def test_a_delay_out_of_range_is_a_422_naming_delay_seconds(stack, unique_name, delay):
    make_queue(stack, unique_name)
    response = httpx.post(f"{stack.api_url}/v1/projects/default/queues/{unique_name}/messages",
                          headers={"Authorization": f"Bearer {stack.token}"},
                          json={"body": "x", "delay_seconds": delay})
    assert response.status_code == 422
    problem = response.json()
    assert problem["errors"][0]["field"] == "delay_seconds" and "delay_seconds" in problem["detail"]
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["sent"] == 0


@pytest.mark.parametrize("verb", ["clear", "export"])
def test_clear_and_export_of_a_missing_queue_are_404(stack, verb):
    with stack.admin() as admin, pytest.raises(NotFound, match="Queue 'no-such-queue' does not exist"):
        if verb == "clear":
            admin.clear("default", "no-such-queue")
        else:
            list(admin.export("default", "no-such-queue"))


async def test_export_pages_through_a_queue_larger_than_a_page_and_a_read_batch(stack, unique_name):
    """Over 200 messages (one batched read) and over 1 MB of JSON (one page): all, in order, once."""
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        assert await queue.send_batch([f"small {i}" for i in range(210)]) == 210
        assert await queue.send_batch(["x" * 100_000 for _ in range(12)]) == 12
    exported = export(stack, unique_name)
    assert [m["sequence"] for m in exported] == list(range(1, 223))
    assert {m["status"] for m in exported} == {"waiting"}
    with stack.admin() as admin:
        assert admin.clear("default", unique_name) == {"waiting": 222, "delayed": 0, "dead": 0}


async def test_a_json_body_no_parser_reads_is_exported_as_its_text(stack, unique_name):
    """Bodies labelled JSON by any client: one that is not JSON, and one nested deeper than a JSON
    parser goes (which raised past the export: a 500), are exported as their text."""
    creds = make_queue(stack, unique_name)
    deep = "[" * 5000 + "]" * 5000
    await publish_as_an_app(creds, [deep, "not json", '{"fine": 1}'], lambda _: {"Content-Type": "application/json"})
    assert [m["body"] for m in export(stack, unique_name)] == [deep, "not json", {"fine": 1}]
