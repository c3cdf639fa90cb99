"""Dead letters moved in batches against the real broker: many at once from many queues through the
advisories, concurrent rejects, discards, and the sweep after a queue sat quiet: each message on
its DLQ once, counted once, with its own headers."""

import asyncio

from enclave_queue.client import connect
from tests.helpers import eventually, make_queue
from tests.integration.test_deadletters import advisories_handled, advisories_held, drain, letters


def status(stack, name):
    with stack.admin() as admin:
        return admin.queue_status("default", name)


async def fail_all(creds, count):
    """Send ``count`` messages and nack each on its only receive, a pull waiting meanwhile."""
    async with connect(creds) as queue:
        await queue.send_batch([f"m{i}" for i in range(count)])
        nacked = 0
        while nacked < count:
            for message in await queue.receive(batch=100, wait=2):
                await message.nack(error=f"failed {message.body}")
                nacked += 1
        assert await queue.receive(wait=1) == []  # a pull waiting past the last receive: the advisories come


async def test_many_queues_failing_at_once_move_each_message_once_through_the_advisories(enclave_stack_factory):
    """No sweep runs: every move comes from an advisory, five queues' worth arriving together."""
    stack = enclave_stack_factory(env={"ENCLAVE_SWEEP_SECONDS": "86400"})
    sources = {}
    for i in range(5):
        make_queue(stack, f"dead-{i}")
        sources[f"source-{i}"] = make_queue(stack, f"source-{i}", max_receives=1, visibility_timeout_seconds=30,
                                            dead_letter_queue=f"dead-{i}")
    await asyncio.gather(*(fail_all(creds, 30) for creds in sources.values()))
    for i in range(5):
        found = await eventually(lambda i=i: len(letters(stack, f"dead-{i}")) >= 30 and letters(stack, f"dead-{i}"),
                                 timeout=30)
        assert sorted(letter["body"] for letter in found) == sorted(f"m{n}" for n in range(30))
        assert {letter["source_queue"] for letter in found} == {f"source-{i}"}
        assert len({letter["source_sequence"] for letter in found}) == 30
        assert all(letter["receive_count"] == 1 for letter in found)
        assert all(letter["last_error"] == f"failed {letter['body']}" for letter in found)
    await advisories_handled(stack)
    for i in range(5):
        assert len(letters(stack, f"dead-{i}")) == 30
        assert status(stack, f"source-{i}")["dead_lettered"] == 30
        assert await drain(sources[f"source-{i}"]) == []


async def test_concurrent_rejects_of_one_queue_each_move_once(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=5, visibility_timeout_seconds=30, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        await queue.send_batch([f"m{i}" for i in range(40)])
        got = []
        while len(got) < 40:
            got += await queue.receive(batch=100, wait=2)
        outcomes = await asyncio.gather(*(message.reject(error=f"bad {message.body}") for message in got))
    assert outcomes == ["moved"] * 40
    found = letters(stack, dlq)
    assert sorted(letter["body"] for letter in found) == sorted(f"m{i}" for i in range(40))
    assert all(letter["last_error"] == f"bad {letter['body']}" and letter["receive_count"] == 1 for letter in found)
    assert status(stack, unique_name)["dead_lettered"] == 40


async def test_many_dead_messages_without_a_dlq_are_discarded_and_counted_once(stack, unique_name):
    creds = make_queue(stack, unique_name, max_receives=1, visibility_timeout_seconds=30)
    await fail_all(creds, 50)
    await eventually(lambda: status(stack, unique_name)["discarded"] == 50, timeout=20)
    await advisories_handled(stack)
    assert status(stack, unique_name)["discarded"] == 50
    assert await drain(creds) == []


async def test_the_sweep_still_finds_a_dead_message_on_a_queue_that_sat_quiet(stack, unique_name):
    """A sweep that finds nothing to do on a queue skips it while its consumer reads the same; a
    receive afterwards changes what it reads, so the next sweep looks again (advisories held: only
    the sweep can move the message)."""
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=1, visibility_timeout_seconds=1, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        await queue.send("first")
        (message,) = await queue.receive(wait=3)
        await message.delete()
    await asyncio.sleep(3)  # sweeps (every second) pass over the queue, now quiet
    async with advisories_held(stack):
        async with connect(creds) as queue:
            await queue.send("second")
            assert await queue.receive(wait=3)  # its only receive; its lease runs out
        (letter,) = await eventually(lambda: letters(stack, dlq), timeout=15)
        assert letter["body"] == "second"
    await advisories_handled(stack)
    assert len(letters(stack, dlq)) == 1
    assert status(stack, unique_name)["dead_lettered"] == 1


async def test_a_released_copy_dead_letters_with_the_note_left_for_its_original(stack, unique_name):
    """A release replaces the message with a copy stored at a new sequence that keeps the original's
    id, and notes are kept by id: the mover, which reads a batch's notes by sequence first, reads a
    copy's again by its id. Mixed in one batch with messages that are no copies."""
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, visibility_timeout_seconds=30, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        await queue.send_batch(["plain-1", "copied", "plain-2"])
        first = await queue.receive(batch=10, wait=2)
        assert sorted(m.body for m in first) == ["copied", "plain-1", "plain-2"]
        for message in first:
            if message.body == "copied":
                await message.release()  # not tried: stored again, its receive not spent
            else:
                await message.nack(error=f"{message.body} try 1")
        tries = {"plain-1": 1, "plain-2": 1, "copied": 0}
        while tries != {"plain-1": 2, "plain-2": 2, "copied": 2}:  # each nacked until out of receives
            for message in await queue.receive(batch=10, wait=2):
                tries[message.body] += 1
                await message.nack(error=f"{message.body} try {tries[message.body]}")
        assert await queue.receive(wait=1) == []  # a pull waiting past the last receive: the advisories come
    found = await eventually(lambda: len(letters(stack, dlq)) == 3 and letters(stack, dlq), timeout=15)
    assert {letter["body"]: letter["last_error"] for letter in found} == {
        "plain-1": "plain-1 try 2", "plain-2": "plain-2 try 2", "copied": "copied try 2"}
    assert status(stack, unique_name)["dead_lettered"] == 3
