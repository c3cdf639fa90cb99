"""Retries and dead letters against the real broker: exactly-once moves with their headers, the
sweep, lowered limits, discards, errors carried along, backoff, and dead letters by hand."""

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import nats.js.errors
import psutil
import pytest

from enclave_queue.client import connect
from enclave_queue.errors import NotFound, SpecError
from enclave_queue.names import ADVISORY_STREAM, MOVER, stream_name
from tests.helpers import control_connection, eventually, make_queue, queue_account_connection

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


async def mover_backlog(stack) -> tuple[int, int, int]:
    """(advisories stored, not yet delivered to the mover, delivered but not acked) of the
    mover's advisory consumer."""
    async with control_connection(stack) as nc:
        js = nc.jetstream()
        info = await js.consumer_info(ADVISORY_STREAM, MOVER)
        stored = (await js.stream_info(ADVISORY_STREAM)).state.messages
    return stored, info.num_pending, info.num_ack_pending


async def advisories_handled(stack) -> None:
    """Wait until the mover has handled every advisory stored so far (each one a move, or found
    its message gone)."""
    async def idle() -> bool:
        _, pending, in_flight = await mover_backlog(stack)
        return pending == in_flight == 0

    await eventually(idle, timeout=15)


@contextlib.asynccontextmanager
async def advisories_held(stack):
    """The mover's advisory consumer paused (a JetStream consumer pause): advisories are stored
    but none reaches the mover until the block ends, so only the sweep can move a message."""
    async with control_connection(stack) as nc:
        subject = f"$JS.API.CONSUMER.PAUSE.{ADVISORY_STREAM}.{MOVER}"
        until = (datetime.now(UTC) + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
        answer = json.loads((await nc.request(subject, json.dumps({"pause_until": until}).encode(), timeout=2)).data)
        assert answer.get("paused") is True, answer
        try:
            yield
        finally:
            answer = json.loads((await nc.request(subject, b"{}", timeout=2)).data)
            assert answer.get("paused") is False, answer


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
    await advisories_handled(stack)  # its advisory too, if one came: still one copy
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


async def test_the_sweep_moves_messages_whose_advisory_never_reached_the_mover(stack, queues):
    """Nobody pulls after the last receive, so the server emits no advisory by itself; the sweep's
    probe makes it emit them, but they are held back from the mover here: the sweep's own move is
    what brings the letters over. Let through afterwards, the advisories find them gone."""
    name, creds, dlq, _ = queues
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b", "c"])
    async with advisories_held(stack):
        stored_before, _, _ = await mover_backlog(stack)
        await let_die(creds, 2)
        found = await eventually(lambda: len(letters(stack, dlq)) == 3 and letters(stack, dlq), timeout=10)
        assert sorted(letter["body"] for letter in found) == ["a", "b", "c"]
        stored, pending, _ = await mover_backlog(stack)
        assert stored >= stored_before + 3 and pending >= 3  # the advisories came, and waited
    await advisories_handled(stack)
    assert sorted(letter["body"] for letter in letters(stack, dlq)) == ["a", "b", "c"]  # not moved twice


async def test_the_advisory_moves_a_message_when_no_sweep_runs(enclave_stack_factory):
    """A stack whose sweep does not run within the test: a pull waiting after the last receive
    makes the server emit the MAX_DELIVERIES advisory, and the mover moves the message from it."""
    stack = enclave_stack_factory(env={"ENCLAVE_SWEEP_SECONDS": "86400"})
    make_queue(stack, "dead")
    creds = make_queue(stack, "source", max_receives=2, visibility_timeout_seconds=1, dead_letter_queue="dead")
    async with connect(creds) as queue:
        await queue.send("out of receives")
        for receive in (1, 2):
            (message,) = await queue.receive(wait=3)
            assert message.receive_count == receive
        assert await queue.receive(wait=3) == []  # waiting past its last lease: the server retires it
    (letter,) = await eventually(lambda: letters(stack, "dead"), timeout=10)
    assert (letter["body"], letter["receive_count"]) == ("out of receives", 2)
    assert (await mover_backlog(stack))[0] == 1  # one advisory came, and it was the way in
    await advisories_handled(stack)


@pytest.mark.parametrize("gone", ["stream", "consumer"])
async def test_the_advisories_stream_or_consumer_deleted_behind_its_back_is_made_again(enclave_stack_factory, gone):
    """Deleted by hand (or lost): the mover's next pull finds nobody, it makes them again, and the
    next message out of receives is moved by its advisory (no sweep runs within the test)."""
    stack = enclave_stack_factory(env={"ENCLAVE_SWEEP_SECONDS": "86400"})
    make_queue(stack, "dead")
    creds = make_queue(stack, "source", max_receives=1, visibility_timeout_seconds=1, dead_letter_queue="dead")
    async with control_connection(stack) as nc:
        js = nc.jetstream()
        if gone == "stream":
            await js.delete_stream(ADVISORY_STREAM)
        else:
            await js.delete_consumer(ADVISORY_STREAM, MOVER)

        async def made_again() -> bool:
            try:
                await js.consumer_info(ADVISORY_STREAM, MOVER)
            except nats.js.errors.NotFoundError:
                return False
            return True

        await eventually(made_again, timeout=15)
    async with connect(creds) as queue:
        await queue.send("out of receives")
        assert len(await queue.receive(wait=3)) == 1
        assert await queue.receive(wait=3) == []  # waiting past its last lease: the server retires it
    (letter,) = await eventually(lambda: letters(stack, "dead"), timeout=10)
    assert letter["body"] == "out of receives"


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
        source_id = admin.get_queue("default", "source")["id"]

    async def settled():  # the copy on the DLQ, the source's stream empty: the move was finished
        found = letters(second, "dead")
        return found if found and (await stream_counts(second, source_id))[0] == 0 else None

    (letter,) = await eventually(settled, timeout=15)
    assert letter["body"] == "only once"
    # gone from the source, so no later sweep or advisory can move it again (an advisory the killed
    # process had taken comes back after the mover's 30 s ack wait, and finds it gone)
    assert len(letters(second, "dead")) == 1
    with second.admin() as admin:  # counted once, whether the crash came before the count or after it
        assert admin.queue_status("default", "source")["dead_lettered"] == 1


EARLY, LATE = 0.1, 1.0  #: seconds a receive may seem early (the clock starts late) or come late on a busy machine


async def test_backoff_schedule_spaces_timeouts_and_plain_nacks(stack, unique_name):
    """Schedule [1, 3]: the 2nd receive 1 s after the 1st, the 3rd 3 s after that, whether the
    lease ran out or the message was nacked without a delay (the visibility timeout, 30 s, and an
    immediate nack are both far outside the bounds)."""
    creds = make_queue(stack, unique_name, retry_backoff_seconds=[1, 3])
    async with connect(creds) as queue:
        await queue.send("times out")
        times = []
        for _ in range(3):
            (message,) = await queue.receive(wait=6)
            times.append(time.monotonic())
        await message.delete()
        timed_out = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]

        await queue.send("nacked")
        times = []
        for _ in range(3):
            (message,) = await queue.receive(wait=6)
            times.append(time.monotonic())
            await message.nack()  # no delay given: the queue's schedule applies
        nacked = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]
        (message,) = await queue.receive(wait=6)  # the last step repeats
        assert message.receive_count == 4
        await message.delete()
    for gaps in (timed_out, nacked):
        assert all(step - EARLY <= gap <= step + LATE for step, gap in zip([1, 3], gaps, strict=True)), gaps


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

    with stack.admin() as admin:  # rate=2: never ahead of one letter now and two a second after
        started = time.monotonic()
        task = admin.start_redrive("default", dlq, rate=2)
        while task["state"] == "running":
            assert task["moved"] <= 1 + 2 * (time.monotonic() - started), task
            time.sleep(0.05)
            task = admin.redrive_status("default", dlq, task["id"])
    assert task["moved"] <= 1 + 2 * (time.monotonic() - started), task
    assert (task["state"], task["moved"]) == ("done", 2)
    assert letters(stack, dlq) == []
    assert sorted(asyncio.run(drain(creds))) == sorted(f"m{i}" for i in range(10))


def test_a_slow_redrive_ends_with_its_last_letter_not_a_pace_later(stack, queues):
    # one letter every 1000 s: the first goes at once, and nothing is left to wait for after it
    name, creds, dlq, _ = queues
    dead_letters_via_reject(stack, name, dlq, ["e"])
    with stack.admin() as admin:
        task = admin.start_redrive("default", dlq, rate=0.001)
        done = asyncio.run(eventually(lambda: (t := admin.redrive_status("default", dlq, task["id"]))["state"] != "running"
                                      and t, timeout=20))
    assert (done["state"], done["moved"]) == ("done", 1)
    assert asyncio.run(drain(creds)) == ["m0"]


def test_a_cancelled_redrive_run_again_moves_the_rest_once(stack, queues):
    name, creds, dlq, _ = queues
    dead_letters_via_reject(stack, name, dlq, ["e"] * 12)
    with stack.admin() as admin:
        task = admin.start_redrive("default", dlq, rate=10)  # one letter a chunk, ten a second
        while task["moved"] == 0:  # cancelled once it is under way
            time.sleep(0.02)
            task = admin.redrive_status("default", dlq, task["id"])
        task = admin.cancel_redrive("default", dlq, task["id"])
    first = task["moved"]
    assert task["state"] == "cancelled" and 0 < first < 12
    assert redrive(stack, dlq)["moved"] == 12 - first
    bodies = asyncio.run(drain(creds))
    assert sorted(bodies) == sorted(f"m{i}" for i in range(12))  # each once: nothing lost or doubled
    assert letters(stack, dlq) == []


def test_two_redrives_of_one_dlq_at_once_count_each_letter_once(stack, queues):
    """Both publish the same letters (stored once, by their Nats-Msg-Id) and both counted them as
    moved: 590 moved of 300 letters."""
    name, creds, dlq, _ = queues
    dead_letters_via_reject(stack, name, dlq, ["e"] * 30)
    with stack.admin() as admin:
        tasks = [admin.start_redrive("default", dlq, rate=20) for _ in range(2)]
        done = [asyncio.run(eventually(lambda t=t: (s := admin.redrive_status("default", dlq, t["id"]))["state"]
                                       != "running" and s, timeout=30)) for t in tasks]
    assert sum(t["moved"] for t in done) == 30, done
    assert sorted(asyncio.run(drain(creds))) == sorted(f"m{i}" for i in range(30))
    assert letters(stack, dlq) == []


async def stream_counts(stack, queue_id):
    """(messages, last sequence) of a queue's stream, read with the control plane's own user of its
    account (no auth callout: it works while the control process is stopped)."""
    async with queue_account_connection(stack, queue_id) as nc:
        state = (await nc.jetstream().stream_info(stream_name(queue_id))).state
        return state.messages, state.last_seq


async def test_a_redrive_killed_between_publish_and_delete_run_again_stores_each_letter_once(
        enclave_stack_factory, tmp_path):
    """The control process is stopped by the fault right after a chunk's letters were published
    back (and confirmed) and before they were deleted from the dead-letter queue, then killed with
    SIGKILL: the letters are in both queues. Run again, the redrive publishes them again with the
    same Nats-Msg-Id, which the source queue takes as duplicates, and deletes them."""
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home, env={"ENCLAVE_FAULT": "stop-after-redrive-publish"})
    make_queue(first, "dead")
    creds = make_queue(first, "source", max_receives=2, visibility_timeout_seconds=1, dead_letter_queue="dead")
    with first.admin() as admin:
        ids = {name: admin.get_queue("default", name)["id"] for name in ("source", "dead")}
    async with connect(creds) as queue:
        await queue.send_batch([f"m{i}" for i in range(12)])
        got = []
        while len(got) < 12:
            got += await queue.receive(batch=100, wait=2)
        for message in got:
            await message.reject(error="e")
    assert len(letters(first, "dead")) == 12

    with contextlib.suppress(httpx.TimeoutException):  # the process may stop before it answers
        httpx.post(f"{first.api_url}/v1/projects/default/queues/dead/redrives", json={},
                   headers={"Authorization": f"Bearer {first.token}"}, timeout=3)
    await eventually(lambda: psutil.Process(first.pid).status() == psutil.STATUS_STOPPED, timeout=15)
    # the crash window: every letter published back to the source, none deleted from the DLQ
    assert await stream_counts(first, ids["source"]) == (12, 12 + 12)  # 12 sent, 12 moved out, 12 back
    assert (await stream_counts(first, ids["dead"]))[0] == 12
    first.kill()

    second = enclave_stack_factory(home=home)
    task = redrive(second, "dead")
    assert (task["state"], task["moved"], task["failed"]) == ("done", 12, 0)
    assert await stream_counts(second, ids["source"]) == (12, 24)  # the second publishes stored nothing
    with second.admin() as admin:
        creds = admin.credentials("default", "source")
    assert sorted(await drain(creds)) == sorted(f"m{i}" for i in range(12))
    assert letters(second, "dead") == []


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


def test_a_dead_letter_discarded_twice_is_not_found_the_second_time_wherever_it_stood(stack, queues):
    """A sequence deleted already answers differently by where it stood: the first of the stream
    (the test above) or one with letters before it (nats-server: "sequence N not found")."""
    name, _, dlq, _ = queues
    dead_letters_via_reject(stack, name, dlq, ["first", "middle", "last"])
    first, middle, last = letters(stack, dlq)
    with stack.admin() as admin:
        for letter in (middle, last):
            admin.discard_dead_letter("default", dlq, letter["sequence"])
            with pytest.raises(NotFound):
                admin.discard_dead_letter("default", dlq, letter["sequence"])
    assert letters(stack, dlq) == [first]


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


def test_a_queue_made_again_under_a_deleted_one_s_name_has_none_of_its_letters(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    make_queue(stack, unique_name, dead_letter_queue=dlq)
    dead_letters_via_reject(stack, unique_name, dlq, ["old failure"])
    with stack.admin() as admin:
        admin.delete_queue("default", unique_name)
    asyncio.run(eventually(lambda: _gone(stack, unique_name), timeout=20))
    creds = make_queue(stack, unique_name, dead_letter_queue=dlq)
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["dead"] == 0
        assert [m for m in admin.export("default", unique_name) if m["status"] == "dead"] == []
        assert admin.clear("default", unique_name)["dead"] == 0

    async def own_letters():
        async with connect(creds) as queue:
            return await queue.dead_letters(limit=50)

    assert asyncio.run(own_letters()) == []
    (kept,) = letters(stack, dlq)  # the DLQ still holds it, named for the queue it came from
    assert (kept["source_queue"], kept["last_error"]) == (unique_name, "old failure")


    async def fail_one():
        async with connect(creds) as queue:
            await queue.send("new")
            await (await queue.get(timeout_s=5)).reject(error="new failure")

    asyncio.run(fail_one())  # the new queue's own letters count
    assert len(letters(stack, dlq)) == 2
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["dead"] == 1


def _gone(stack, name) -> bool:
    with stack.admin() as admin:
        return name not in {q["name"] for q in admin.list_queues("default")}


async def test_the_largest_message_with_the_most_headers_fits_a_dlq_of_its_size(stack, unique_name):
    # the sender's headers had taken the room the dead letter's own need: it stayed stuck on its queue
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq, max_message_bytes=1024)
    creds = make_queue(stack, unique_name, max_message_bytes=1024, dead_letter_queue=dlq)
    most = {"X-Big": "v" * (2048 - len("X-Big") - 4)}  # SENDER_HEADER_BYTES, just
    async with connect(creds) as queue:
        with pytest.raises(SpecError, match=r"^headers must be .*at most 2048 bytes together \(got 2049 bytes\)"):
            await queue.put("b", headers={**most, "X-Big": most["X-Big"] + "v"})
        await queue.put("b" * 1024, headers=most)
        message = await queue.get(timeout_s=5)
        assert await message.reject(error="e" * 5000) is not None  # cut to 1 KiB
    (letter,) = await eventually(lambda: letters(stack, dlq), timeout=10)
    assert (letter["source_queue"], len(letter["body"]), letter["last_error"]) == (unique_name, 1024, "e" * 1024)
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as http:
        refused = http.post(f"/v1/projects/default/queues/{unique_name}/messages",
                            json={"body": "b", "headers": {f"X-{i}": "v" * 1000 for i in range(3)}})
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "headers"
    assert "2048 bytes together" in refused.json()["errors"][0]["message"]
