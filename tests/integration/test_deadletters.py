"""Retries and dead letters against the real broker: exactly-once moves with their headers, the
sweep, lowered limits, discards, errors carried along, backoff, and dead letters by hand."""

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import NotFound, SpecError
from tests.helpers import eventually, make_queue

ENCLAVE = str(Path(sys.executable).parent / "enclave")


def letters(stack, name, project="default"):
    with stack.admin() as admin:
        return admin.list_dead_letters(project, name, limit=500)["dead_letters"]


async def drain(creds, wait=0.5):
    """Every message now on a queue (received and deleted)."""
    bodies = []
    async with connect(creds) as queue:
        while batch := await queue.receive(batch=100, wait=wait):
            bodies += [m.body for m in batch]
            await queue.delete_many(batch)
    return bodies


async def let_die(creds, times, wait=3.0):
    """Receive the queue's messages ``times`` times without deleting them."""
    async with connect(creds) as queue:
        for _ in range(times):
            assert await queue.receive(batch=100, wait=wait)


@pytest.fixture
def queues(stack, unique_name):
    """A source queue (2 receives, 1 s visibility) with a dead-letter queue."""
    dlq = f"{unique_name}-dlq"
    dlq_creds = make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, visibility_timeout_seconds=1, dead_letter_queue=dlq)
    return unique_name, creds, dlq, dlq_creds


async def test_a_message_out_of_receives_lands_on_the_dlq_once_with_its_headers(stack, queues):
    name, creds, dlq, dlq_creds = queues
    async with connect(creds) as queue:
        sequence = await queue.send({"order": 7})
    sent = time.time()
    await let_die(creds, 2)
    (letter,) = await eventually(lambda: letters(stack, dlq), timeout=10)
    assert letter["source_queue"] == name and letter["source_project"] == "default"
    assert letter["source_sequence"] == sequence
    assert letter["receive_count"] == 2
    assert abs(datetime.fromisoformat(letter["first_enqueued_at"]).timestamp() - sent) < 2
    assert datetime.fromisoformat(letter["dead_lettered_at"]) >= datetime.fromisoformat(letter["first_enqueued_at"])
    assert letter["last_error"] is None
    assert json.loads(letter["body"]) == {"order": 7} and letter["content_type"] == "application/json"
    await asyncio.sleep(2.5)  # more sweeps and advisories: still one copy
    assert len(letters(stack, dlq)) == 1
    assert await drain(creds) == []
    with stack.admin() as admin:
        assert admin.queue_status("default", name)["dead_lettered"] == 1
    (received,) = await drain(dlq_creds)
    assert received == {"order": 7}


async def test_nack_error_and_reject_error_travel_with_the_dead_letter(stack, queues):
    name, creds, dlq, _ = queues
    async with connect(creds) as queue:
        await queue.send("flaky")
        await queue.send("poison")
        for receive in range(2):
            for message in await queue.receive(batch=10, wait=3):
                if message.body == "flaky":
                    await message.nack(error=f"SMTP 451 on try {receive + 1}")
                else:
                    assert await message.reject(error="cannot parse\nline 2") == "moved"
    found = await eventually(lambda: len(letters(stack, dlq)) == 2 and letters(stack, dlq), timeout=10)
    errors = {letter["body"]: letter["last_error"] for letter in found}
    assert errors == {"flaky": "SMTP 451 on try 2", "poison": "cannot parse line 2"}
    receive_counts = {letter["body"]: letter["receive_count"] for letter in found}
    assert receive_counts == {"flaky": 2, "poison": 1}


async def test_the_sweep_moves_messages_whose_advisory_never_came(stack, queues):
    """Nobody pulls after the last receive, so the server emits no advisory by itself."""
    name, creds, dlq, _ = queues
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b", "c"])
    await let_die(creds, 2)
    found = await eventually(lambda: len(letters(stack, dlq)) == 3 and letters(stack, dlq), timeout=10)
    assert sorted(letter["body"] for letter in found) == ["a", "b", "c"]


async def test_lowering_max_receives_dead_letters_messages_already_past_it(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=6, visibility_timeout_seconds=1, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        await queue.send("tried three times")
        for receive in range(1, 4):
            (message,) = await queue.receive(wait=3)
            assert message.receive_count == receive
        await queue.send("never tried")
    with stack.admin() as admin:
        admin.update_queue("default", unique_name, {"max_receives": 2})
        admin.wait_ready("default", unique_name)
    (letter,) = await eventually(lambda: letters(stack, dlq), timeout=10)
    assert letter["body"] == "tried three times"
    assert await drain(creds) == ["never tried"]


async def test_without_a_dlq_the_message_is_discarded_and_counted(stack, unique_name):
    creds = make_queue(stack, unique_name, max_receives=1, visibility_timeout_seconds=1)
    async with connect(creds) as queue:
        await queue.send_batch(["x", "y"])
    await let_die(creds, 1)

    def discarded():
        with stack.admin() as admin:
            return admin.queue_status("default", unique_name)["discarded"] == 2

    await eventually(discarded, timeout=10)
    assert await drain(creds) == []


@pytest.mark.parametrize("fault", ["exit-after-dlq-publish", "exit-after-dead-letter-count"])
async def test_the_mover_killed_between_copy_and_delete_leaves_exactly_one_copy_counted_once(
        enclave_stack_factory, tmp_path, fault):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home, env={"ENCLAVE_FAULT": fault})
    make_queue(first, "dead")
    creds = make_queue(first, "source", max_receives=1, visibility_timeout_seconds=1, dead_letter_queue="dead")
    async with connect(creds) as queue:
        await queue.send("only once")
        assert await queue.receive(wait=2)
    await eventually(lambda: first.proc.poll() is not None, timeout=15)
    assert first.proc.returncode == 70  # the fault: died right after copying to the DLQ
    first.stop()

    second = enclave_stack_factory(home=home)
    with second.admin() as admin:
        creds = admin.credentials("default", "source")

    async def settled():
        found = letters(second, "dead")
        return found if found and not await drain(creds, wait=0.2) else None

    (letter,) = await eventually(settled, timeout=15)
    assert letter["body"] == "only once"
    await asyncio.sleep(2)
    assert len(letters(second, "dead")) == 1
    with second.admin() as admin:  # counted once, whether the crash came before the count or after it
        assert admin.queue_status("default", "source")["dead_lettered"] == 1


async def test_backoff_schedule_spaces_timeouts_and_plain_nacks(stack, unique_name):
    creds = make_queue(stack, unique_name, retry_backoff_seconds=[1, 2])
    async with connect(creds) as queue:
        await queue.send("times out")
        times = []
        for _ in range(3):
            (message,) = await queue.receive(wait=5)
            times.append(time.monotonic())
        await message.delete()
        assert [round(b - a, 1) for a, b in zip(times, times[1:], strict=False)] == pytest.approx([1, 2], abs=0.5)

        await queue.send("nacked")
        times = []
        for _ in range(3):
            (message,) = await queue.receive(wait=5)
            times.append(time.monotonic())
            await message.nack()  # no delay given: the queue's schedule applies
        assert [round(b - a, 1) for a, b in zip(times, times[1:], strict=False)] == pytest.approx([1, 2], abs=0.5)
        await asyncio.sleep(2.2)
        (message,) = await queue.receive(wait=3)
        await message.delete()


def dead_letters_via_reject(stack, name, dlq, errors):
    """Dead letters fast: send one message per error and reject it with that error."""

    with stack.admin() as admin:
        creds = admin.credentials("default", name)

    async def run():
        async with connect(creds) as queue:
            await queue.send_batch([f"m{i}" for i in range(len(errors))])
            got = []
            while len(got) < len(errors):
                got += await queue.receive(batch=100, wait=2)
            for message in got:
                await message.reject(error=errors[int(message.body[1:])])

    asyncio.run(run())
    assert len(letters(stack, dlq)) == len(errors)


def redrive(stack, dlq, **options):
    with stack.admin() as admin:
        task = admin.start_redrive("default", dlq, **options)
        while task["state"] == "running":
            time.sleep(0.05)
            task = admin.redrive_status("default", dlq, task["id"])
    return task


def test_redrive_dry_run_filter_max_rate_and_the_rest(stack, queues):
    name, creds, dlq, _ = queues
    errors = ["timeout"] * 6 + ["bad data"] * 4
    dead_letters_via_reject(stack, name, dlq, errors)

    task = redrive(stack, dlq, dry_run=True)
    assert (task["state"], task["moved"]) == ("done", 10)
    assert len(letters(stack, dlq)) == 10

    task = redrive(stack, dlq, filter_error="TIMEOUT")
    assert task["moved"] == 6 and task["failed"] == 0
    assert {letter["last_error"] for letter in letters(stack, dlq)} == {"bad data"}

    task = redrive(stack, dlq, max=2)
    assert task["moved"] == 2 and len(letters(stack, dlq)) == 2

    started = time.monotonic()
    task = redrive(stack, dlq, rate=2)
    assert task["moved"] == 2 and time.monotonic() - started >= 0.9
    assert letters(stack, dlq) == []
    assert sorted(asyncio.run(drain(creds))) == sorted(f"m{i}" for i in range(10))


def test_an_interrupted_redrive_run_again_moves_the_rest_once(stack, queues):
    name, creds, dlq, _ = queues
    dead_letters_via_reject(stack, name, dlq, ["e"] * 12)
    with stack.admin() as admin:
        task = admin.start_redrive("default", dlq, rate=10)
        time.sleep(0.5)
        task = admin.cancel_redrive("default", dlq, task["id"])
    first = task["moved"]
    assert task["state"] == "cancelled" and 0 < first < 12
    assert redrive(stack, dlq)["moved"] == 12 - first
    bodies = asyncio.run(drain(creds))
    assert sorted(bodies) == sorted(f"m{i}" for i in range(12))  # each once: nothing lost or doubled
    assert letters(stack, dlq) == []


def test_the_cli_redrive_shows_a_summary(stack, queues):
    name, creds, dlq, _ = queues
    dead_letters_via_reject(stack, name, dlq, ["x", "y", "x"])
    run = subprocess.run([ENCLAVE, "queue", "redrive", dlq, "--filter-error", "x"], env=stack.env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip().endswith(f"Moved 2 dead letter(s) from '{dlq}' to their source queues.")
    listed = subprocess.run([ENCLAVE, "queue", "dead-letters", dlq, "--json"], env=stack.env,
                            capture_output=True, text=True, timeout=60)
    assert [letter["last_error"] for letter in json.loads(listed.stdout)["dead_letters"]] == ["y"]
    wrong = subprocess.run([ENCLAVE, "queue", "redrive", name], env=stack.env, capture_output=True, text=True,
                           timeout=60)
    assert wrong.returncode == 2
    assert wrong.stderr == (f"error: Queue '{name}' is not the dead-letter queue of any queue in project "
                            "'default'; name a destination with 'to'.\n")


def test_retry_and_discard_single_dead_letters(stack, queues):
    name, creds, dlq, _ = queues
    dead_letters_via_reject(stack, name, dlq, ["first", "second"])
    one, two = letters(stack, dlq)
    with stack.admin() as admin:
        assert admin.retry_dead_letter("default", dlq, one["sequence"])["queue"] == name
        admin.discard_dead_letter("default", dlq, two["sequence"])
        with pytest.raises(NotFound):
            admin.discard_dead_letter("default", dlq, two["sequence"])
        with pytest.raises(NotFound):
            admin.retry_dead_letter("default", dlq, 999_999)
    assert letters(stack, dlq) == []

    async def received_again():
        async with connect(creds) as queue:
            (message,) = await queue.receive(wait=2)
            assert message.receive_count == 1  # a new message: its count starts over
            await message.delete()
            return message.body

    assert asyncio.run(received_again()) == one["body"]


def test_bad_dead_letter_and_backoff_input(stack, unique_name):
    with stack.admin() as admin:
        with pytest.raises(SpecError, match="retry_backoff_seconds must have fewer entries than max_receives"):
            admin.create_queue("default", {"name": unique_name, "max_receives": 2, "retry_backoff_seconds": [1, 2]})
        with pytest.raises(SpecError, match=r"retry_backoff_seconds must be a list of 1–20 whole seconds"):
            admin.create_queue("default", {"name": unique_name, "retry_backoff_seconds": [0]})
        make_queue(stack, unique_name)
        with pytest.raises(SpecError, match="to names queue 'nowhere'"):
            admin.start_redrive("default", unique_name, to="nowhere")
        with pytest.raises(SpecError, match="rate must be"):
            admin.start_redrive("default", unique_name, to=unique_name + "x", rate=0)
