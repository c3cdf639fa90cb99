"""``Queue.len()`` and ``Queue.peek(limit)``: reading a queue without taking from it, as the
queue's own user (STREAM.INFO, CONSUMER.INFO and STREAM.MSG.GET of its own stream), and the
operator's ``enclave queue len`` / ``peek`` through the HTTP API."""

import json
from datetime import UTC, datetime

import pytest

from enclave_queue.client import PeekedMessage, connect, connect_sync
from enclave_queue.errors import SpecError
from tests.cli.test_cli import run
from tests.helpers import eventually, make_queue


async def test_len_counts_waiting_messages_not_in_flight_and_peek_leases_nothing(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        assert (await queue.len(), await queue.peek()) == (0, [])
        ids = await queue.put_many([{"n": 1}, "two", b"\x03"])
        peeked = await queue.peek(10)
        assert all(isinstance(p, PeekedMessage) for p in peeked)
        assert [(p.id, p.sequence, p.body) for p in peeked] == [(ids[0], ids[0], {"n": 1}), (ids[1], ids[1], "two"),
                                                                (ids[2], ids[2], b"\x03")]
        assert peeked[0].headers["Content-Type"] == "application/json"
        # the broker stores a batch's headers with each message (a receive shows them too)
        assert [p.headers.get("Nats-Batch-Sequence") for p in peeked] == ["1", "2", "3"]
        assert "Nats-Sequence" not in peeked[0].headers  # the sender's headers only
        assert peeked[0].enqueued_at.tzinfo is not None and peeked[0].enqueued_at <= datetime.now(UTC)
        assert [p.id for p in await queue.peek(2)] == ids[:2]  # the oldest first
        assert await queue.len() == 3

        (first,) = await queue.receive(batch=1, wait=1)
        assert (first.sequence, first.receive_count) == (ids[0], 1)  # peeking counted no receive
        assert await queue.len() == 2  # in flight: not counted
        assert [p.id for p in await queue.peek(10)] == ids  # in flight: still shown

        rest = await queue.receive(batch=10, wait=1)
        assert [(m.sequence, m.receive_count) for m in rest] == [(ids[1], 1), (ids[2], 1)]
        assert await queue.len() == 0
        await queue.delete_many([first, *rest])
        assert await queue.peek(10) == []


async def test_len_counts_a_message_whose_lease_ran_out_as_waiting(stack, unique_name):
    # as the API's depth does: it had stayed "in flight" (uncounted) until a receive took it again
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1)
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b"])
        taken = await queue.receive(batch=2, wait=1)
        assert (len(taken), await queue.len()) == (2, 0)
        assert await eventually(queue.len, timeout=10) == 2  # both leases ran out
        again = await queue.receive(batch=2, wait=5)
        assert sorted(m.body for m in again) == ["a", "b"]
        await queue.delete_many(again)
        assert await queue.len() == 0


async def test_peek_refuses_a_limit_outside_1_to_100(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        with pytest.raises(SpecError, match=r"^limit must be an integer from 1 to 100 \(got 0\)\.$"):
            await queue.peek(0)
        with pytest.raises(SpecError, match=r"\(got 101\)"):
            await queue.peek(101)
    with connect_sync(creds) as queue:  # the blocking twins
        queue.send("x")
        assert (queue.len(), [p.body for p in queue.peek(5)]) == (1, ["x"])


async def test_cli_len_and_peek_show_the_queue_without_taking_from_it(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.put_many(["hello", {"k": 1}, "third"])
        (taken,) = await queue.receive(batch=1, wait=1)

        counted = run(stack, "queue", "len", unique_name)
        assert (counted.returncode, counted.stdout) == (0, f"Waiting in '{unique_name}': 2 (0 delayed). In flight: 1.\n")
        stats = json.loads(run(stack, "queue", "len", unique_name, "--json").stdout)
        assert (stats["waiting"], stats["delayed"], stats["in_flight"]) == (2, 0, 1)

        shown = run(stack, "queue", "peek", unique_name, "--limit", "2")
        assert shown.returncode == 0, shown.stderr
        header, *rows = shown.stdout.splitlines()
        assert header.split() == ["SEQ", "SENT", "TYPE", "BODY"]
        assert [(row.split()[0], row.split()[-1]) for row in rows] == [("1", "hello"), ("2", '{"k":1}')]
        page = json.loads(run(stack, "queue", "peek", unique_name, "--json").stdout)
        assert [(m["sequence"], m["body"]) for m in page["messages"]] == [(1, "hello"), (2, '{"k":1}'), (3, "third")]

        refused = run(stack, "queue", "peek", unique_name, "--limit", "0")
        assert (refused.returncode, refused.stderr) == (2, "error: limit must be an integer from 1 to 100 (got '0').\n")
        rest = await queue.receive(batch=10, wait=1)
        assert [(m.sequence, m.receive_count) for m in rest] == [(2, 1), (3, 1)]  # the CLI took nothing
        await queue.delete_many([taken, *rest])  # still this worker's lease: the CLI took it from no one
    empty = run(stack, "queue", "peek", unique_name)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", f"No messages in '{unique_name}'.\n")
