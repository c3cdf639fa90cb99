"""A message handed back on its last receive is moved to its DLQ at once, on the word of whoever
handed it back (the SDK's nack and lease keeper, the API's nack, the SQS endpoint's visibility
change to 0), not on the broker's advisory: on this module's stack the sweep never runs and the
advisories are held back from the mover, so the word is the only way in. Without the word (lost,
or an app on a plain NATS client), the advisory still moves it; a word the mover cannot use moves
nothing and breaks nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator

import nats
import pytest

from enclave_queue import envelope
from enclave_queue.client import connect
from enclave_queue.client.session import Session
from enclave_queue.controller.mover import MAX_ACK_PENDING
from enclave_queue.errors import EnclaveError
from enclave_queue.names import REJECT_SUBJECT
from enclave_queue.testing import EnclaveStack
from tests.helpers import eventually, make_queue
from tests.integration.test_deadletters import advisories_handled, advisories_held, drain, letters, mover_backlog
from tests.sqs.conftest import boto_client, create_key, revoke_key


@pytest.fixture(scope="module")
def quiet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnclaveStack]:
    """A stack whose sweep does not run within the module."""
    running = EnclaveStack.start(tmp_path_factory.mktemp("dead-word"), {"ENCLAVE_SWEEP_SECONDS": "86400"})
    try:
        yield running
    finally:
        running.stop()


def source_and_dlq(stack: EnclaveStack, name: str, **settings: object) -> tuple[dict[str, str], dict[str, str]]:
    dlq = make_queue(stack, f"{name}-dlq")
    settings = {"max_receives": 2, "visibility_timeout_seconds": 30, **settings}
    return make_queue(stack, name, dead_letter_queue=f"{name}-dlq", **settings), dlq


def dead_lettered(stack: EnclaveStack, name: str) -> int:
    with stack.admin() as admin:
        return admin.queue_status("default", name)["dead_lettered"]


async def test_a_nack_of_the_last_receive_moves_the_message_at_once(quiet_stack, unique_name):
    creds, dlq = source_and_dlq(quiet_stack, unique_name)
    async with connect(creds) as queue:
        await queue.send_batch(["poison", "fine"])
        async with advisories_held(quiet_stack):
            (first, second) = await queue.receive(batch=2, wait=3)
            await first.nack(error="try 1")  # not its last receive: it comes back
            await second.ack()
            (again,) = await queue.receive(wait=3)
            assert (again.body, again.receive_count, again.last_error) == ("poison", 2, "try 1")
            await again.nack(error="try 2")
            (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=10)
    assert (letter["body"], letter["receive_count"], letter["last_error"]) == ("poison", 2, "try 2")
    await advisories_handled(quiet_stack)
    assert await drain(creds) == []
    assert [m["body"] for m in letters(quiet_stack, f"{unique_name}-dlq")] == ["poison"]
    assert dead_lettered(quiet_stack, unique_name) == 1
    assert await drain(dlq) == ["poison"]


async def test_a_lease_of_the_last_receive_run_out_in_the_sdk_moves_the_message(quiet_stack, unique_name):
    """``lease_s`` shorter than the broker's: the SDK's lease keeper hands the message back at its
    end, and tells the mover as a nack does."""
    creds, _ = source_and_dlq(quiet_stack, unique_name, max_receives=1)
    async with connect(creds) as queue:
        await queue.send("slow")
        async with advisories_held(quiet_stack):
            assert len(await queue.receive(wait=3, lease_s=1)) == 1
            (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=10)
    assert (letter["body"], letter["receive_count"]) == ("slow", 1)


async def nack_unheard(creds: dict[str, str], body: str) -> None:
    """Send ``body`` and nack its last receive with the word lost (``Session.tell_dead`` patched by
    the caller): a pull waits past the grace, so the broker retires it and writes its advisory."""
    async with connect(creds) as queue:
        await queue.send(body)
        (message,) = await queue.receive(wait=3)
        await message.nack()
        assert await queue.receive(wait=3) == []


async def test_without_the_word_the_advisory_moves_it(quiet_stack, unique_name, monkeypatch):
    """The word lost on the way: the message was handed back for DEAD_GRACE seconds, and the
    broker's advisory has it moved after that, as for an app on any other NATS client."""
    async def lost(self, sequence, receive_count):
        return None

    monkeypatch.setattr(Session, "tell_dead", lost)
    monkeypatch.setattr(envelope, "DEAD_GRACE", 1.0)
    creds, _ = source_and_dlq(quiet_stack, unique_name, max_receives=1)
    stored_before = (await mover_backlog(quiet_stack))[0]
    await nack_unheard(creds, "unheard")
    (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=10)
    assert letter["body"] == "unheard"
    assert (await mover_backlog(quiet_stack))[0] == stored_before + 1  # the advisory was the way in
    await advisories_handled(quiet_stack)


async def test_the_api_nack_of_the_last_receive_moves_the_message(quiet_stack, unique_name):
    source_and_dlq(quiet_stack, unique_name, max_receives=1)
    with quiet_stack.admin() as admin:
        admin.send("default", unique_name, "by hand")
        async with advisories_held(quiet_stack):
            (taken,) = admin.receive("default", unique_name, wait=3)
            admin.nack_message("default", unique_name, taken["receipt"])
            (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=10)
    assert (letter["body"], letter["receive_count"]) == ("by hand", 1)


async def test_an_sqs_visibility_change_to_0_on_the_last_receive_moves_the_message(quiet_stack, unique_name):
    source_and_dlq(quiet_stack, unique_name, max_receives=1)
    key = create_key(quiet_stack)
    try:
        sqs = boto_client(quiet_stack.api_url + "/sqs", key["access_key_id"], key["secret_access_key"])
        url = f"{quiet_stack.api_url}/sqs/default/{unique_name}"
        sqs.send_message(QueueUrl=url, MessageBody="via sqs")
        async with advisories_held(quiet_stack):
            (taken,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=3)["Messages"]
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=taken["ReceiptHandle"], VisibilityTimeout=0)
            (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=10)
    finally:
        revoke_key(quiet_stack, key["access_key_id"])
    assert (letter["body"], letter["receive_count"]) == ("via sqs", 1)


async def raw(creds: dict[str, str]) -> nats.NATS:
    """The queue's own user on a plain nats-py connection."""
    return await nats.connect(creds["broker_url"], user=creds["username"], password=creds["password"],
                              inbox_prefix=creds["inbox_prefix"], allow_reconnect=False)


async def test_words_the_mover_cannot_use_move_nothing_and_break_nothing(quiet_stack, unique_name):
    """Hostile or broken words from an app's own user: not JSON, the wrong shapes, a sequence its
    queue does not hold, one naming a sequence another queue does hold (the word reaches the
    mover under the sender's own queue, whatever it says), and one about a receive that is not
    the last its queue allows. Then a real nack still moves."""
    creds, _ = source_and_dlq(quiet_stack, unique_name, max_receives=1)
    other_creds, _ = source_and_dlq(quiet_stack, f"{unique_name}-b", max_receives=1)
    async with connect(other_creds) as other:
        other_seq = await other.send("someone else's")
        await other.send("and another")
    async with connect(creds) as queue:
        mine = await queue.send("mine")
    nc = await raw(creds)
    try:
        for word in (b"not json", b"[]", b"{}", b'{"seq": "x", "receive_count": 1}', b'{"seq": 1}',
                     json.dumps({"seq": 10**9, "receive_count": 1, "exhausted": True}).encode(),
                     json.dumps({"seq": other_seq + 1, "receive_count": 1, "exhausted": True,
                                 "subject": other_creds["subject"]}).encode(),
                     json.dumps({"seq": mine, "receive_count": 0, "exhausted": True}).encode(),  # not its last
                     # numbers int() would bend: its own message's sequence and a fraction, infinities
                     json.dumps({"seq": mine + 0.4, "receive_count": 1}).encode(),
                     b'{"seq": Infinity, "receive_count": 1}', b'{"seq": 1e400, "receive_count": 1}',
                     json.dumps({"seq": mine, "receive_count": 1.5}).encode(),
                     b"[" * 5000 + b"]" * 5000,  # deeper than the JSON parser goes
                     b"\xff" * 4096):
            await nc.publish(REJECT_SUBJECT, word)
        await nc.flush()
    finally:
        await nc.close()
    async with connect(other_creds) as other:
        assert sorted(m.body for m in await other.peek()) == ["and another", "someone else's"]
    assert letters(quiet_stack, f"{unique_name}-b-dlq") == []
    async with connect(creds) as queue:
        (message,) = await queue.receive(wait=3)
        await message.nack()
    (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=10)
    assert letter["body"] == "mine"
    await advisories_handled(quiet_stack)


async def test_answers_an_app_has_sent_onto_its_advisory_subject_are_dropped_and_hold_back_no_other_queue(
        quiet_stack, unique_name, monkeypatch):
    """An app cannot publish on its queue's advisory subject, but it can name that subject as the
    reply of its own requests, and the broker's answers (an empty pull's status, a PubAck) then land
    with the mover as MAX_DELIVERIES advisories. They were nakked to come again for ever: past
    MAX_ACK_PENDING of them, no queue's advisory reached the mover, across restarts."""
    monkeypatch.setattr(Session, "tell_dead", lambda self, sequence, receive_count: asyncio.sleep(0))
    monkeypatch.setattr(envelope, "DEAD_GRACE", 1.0)
    app = make_queue(quiet_stack, f"{unique_name}-app")
    victim, _ = source_and_dlq(quiet_stack, unique_name, max_receives=1)
    forged = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{app['stream']}.worker"
    before = quiet_stack.log_path.read_text()
    stored_before = (await mover_backlog(quiet_stack))[0]
    nc = await raw(app)
    try:
        for _ in range(MAX_ACK_PENDING + 200):  # "404 No Messages", each
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{app['stream']}.worker", b'{"batch": 1, "no_wait": true}',
                             reply=forged)
        await nc.publish(app["subject"], b"kept", reply=forged)  # its PubAck
        await nc.flush()
    finally:
        await nc.close()

    async def all_stored() -> bool:
        return (await mover_backlog(quiet_stack))[0] >= stored_before + MAX_ACK_PENDING + 201

    await eventually(all_stored, timeout=10)
    await nack_unheard(victim, "dies")  # a plain client's way: no word, the broker's advisory
    (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=15)
    assert letter["body"] == "dies"
    await advisories_handled(quiet_stack)  # none left to come again
    async with connect(app) as queue:
        assert [m.body for m in await queue.peek()] == [b"kept"]
    dropped = [line for line in quiet_stack.log_path.read_text()[len(before):].splitlines()
               if "did not write" in line]
    assert len(dropped) == 1 and f".{unique_name}-app:" in dropped[0], dropped  # once a minute at most


async def test_a_changed_dead_letter_queue_takes_the_next_dead_letter(quiet_stack, unique_name):
    """The mover reads a queue's record from its watched copy: a DLQ changed through the API
    applies to the next dead letter, with no wait for anything to refresh."""
    creds, _ = source_and_dlq(quiet_stack, unique_name, max_receives=1)
    make_queue(quiet_stack, f"{unique_name}-other")
    async with connect(creds) as queue:
        await queue.send_batch(["before", "after"])
        async with advisories_held(quiet_stack):
            (first,) = await queue.receive(wait=3)
            await first.nack()
            (moved,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=10)
            with quiet_stack.admin() as admin:
                admin.update_queue("default", unique_name, {"dead_letter_queue": f"{unique_name}-other"})
            (second,) = await queue.receive(wait=3)
            await second.nack()
            (moved_later,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-other"), timeout=10)
    assert (moved["body"], moved_later["body"]) == ("before", "after")
    assert [m["body"] for m in letters(quiet_stack, f"{unique_name}-dlq")] == ["before"]


async def test_the_word_goes_before_the_nak_is_confirmed(quiet_stack, unique_name, monkeypatch):
    """On the last receive the message will not come back whatever the nak's confirmation says, so
    the SDK tells the mover as soon as the nak is on its way: here the confirmations are never
    heard (the broker answers, the session listens for another token), and the message is moved
    while ``nack()`` still waits for its confirmation."""
    creds, _ = source_and_dlq(quiet_stack, unique_name, max_receives=1)
    async with connect(creds) as queue:
        await queue.send("unconfirmed")
        async with advisories_held(quiet_stack):
            (message,) = await queue.receive(wait=3)

            def unheard(self):
                return self.token(), asyncio.get_running_loop().create_future()

            monkeypatch.setattr(Session, "new_waiter", unheard)
            nacking = asyncio.create_task(message.nack())
            try:
                (letter,) = await eventually(lambda: letters(quiet_stack, f"{unique_name}-dlq"), timeout=4)
                assert not nacking.done()
            finally:
                nacking.cancel()
                with contextlib.suppress(asyncio.CancelledError, EnclaveError):
                    await nacking
    assert letter["body"] == "unconfirmed"


async def test_a_reject_with_numbers_the_mover_cannot_use_is_refused_naming_the_field(quiet_stack, unique_name):
    """A reject asked on a plain connection, with a sequence or an id int() would bend (a fraction
    of the app's own message, an infinity) or an error that is not text: each answered with an error
    naming the field, and nothing moved. Then a real reject moves."""
    creds, _ = source_and_dlq(quiet_stack, unique_name, max_receives=1)
    async with connect(creds) as queue:
        mine = await queue.send("mine")
    nc = await raw(creds)
    try:
        # Infinity and NaN are not JSON at all: the request is refused as such
        for asked, field in (({"seq": mine + 0.4}, "seq"), ({"seq": float("inf")}, "Infinity is not JSON"),
                             ({"seq": "1e3"}, "seq"), ({"seq": -mine}, "seq"), ({"seq": mine, "id": 1.5}, "id"),
                             ({"seq": mine, "receive_count": float("nan")}, "NaN is not JSON"),
                             ({"seq": mine, "error": {"not": "text"}}, "error")):
            answer = json.loads((await nc.request(REJECT_SUBJECT, json.dumps(asked).encode(), timeout=5)).data)
            assert field in answer["error"], (asked, answer)
        for sent, says in ((b"[" * 5000 + b"]" * 5000, "nested too deeply"), (b"[1]", "JSON object")):
            answer = json.loads((await nc.request(REJECT_SUBJECT, sent, timeout=5)).data)
            assert says in answer["error"]
    finally:
        await nc.close()
    assert letters(quiet_stack, f"{unique_name}-dlq") == []
    async with connect(creds) as queue:
        (message,) = await queue.receive(wait=3)
        assert await message.reject("no good") == "moved"
    (letter,) = letters(quiet_stack, f"{unique_name}-dlq")
    assert (letter["body"], letter["last_error"]) == ("mine", "no good")


async def test_moves_waiting_for_room_on_their_dlq_hold_no_advisory_back(quiet_stack, unique_name, monkeypatch):
    """A move its DLQ refused (full) had its advisory nakked to come again every 2 s, for ever: each
    held a place of the advisory consumer's 4,096, so one queue with thousands of messages waiting
    for room stopped every other queue's advisories, and each logged a warning every 2 s. Now this
    process tries them again itself, and the advisories are done with."""
    monkeypatch.setattr(Session, "tell_dead", lambda self, sequence, receive_count: asyncio.sleep(0))
    monkeypatch.setattr(envelope, "DEAD_GRACE", 1.0)
    dlq = make_queue(quiet_stack, f"{unique_name}-dlq", max_messages=25)
    creds = make_queue(quiet_stack, unique_name, max_receives=1, dead_letter_queue=f"{unique_name}-dlq")
    before = quiet_stack.log_path.read_text()
    async with connect(dlq) as letters_queue, connect(creds) as queue:
        await letters_queue.send_batch([f"filler-{i}" for i in range(25)])  # the DLQ is full
        await queue.send_batch([f"m{i}" for i in range(20)])
        taken = []
        while len(taken) < 20:
            taken += await queue.receive(batch=20, wait=3)
        for message in taken:
            await message.nack()
        assert await queue.receive(wait=3) == []  # a pull waits past the grace: the broker retires them
        await advisories_handled(quiet_stack)  # none held for a retry, none to come again
        assert await queue.len() == 20  # they wait for room, on their queue
        fillers = []
        while len(fillers) < 25:  # room (the fillers only: the letters may come meanwhile)
            batch = await letters_queue.receive(batch=25 - len(fillers), wait=1)
            assert all(m.body.startswith("filler-") for m in batch)
            await letters_queue.delete_many(batch)
            fillers += batch
    moved = await eventually(lambda: (lambda found: found if len(found) == 20 else None)(
        letters(quiet_stack, f"{unique_name}-dlq")), timeout=15)
    assert sorted(m["body"] for m in moved) == sorted(f"m{i}" for i in range(20))
    waiting = [line for line in quiet_stack.log_path.read_text()[len(before):].splitlines()
               if "not moved yet" in line]
    assert 1 <= len(waiting) <= 3, waiting  # a queue's, once a minute at most: not one a message every 2 s
