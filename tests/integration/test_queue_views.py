"""The queue's views and operator verbs an app may use on its own queue: outcome metrics after a
scripted run, its dead letters with retry and discard, and its depth history."""

import json

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import NotFound, SpecError
from tests.helpers import eventually, make_queue, publish_as_an_app


async def test_metrics_add_up_after_a_scripted_run(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, visibility_timeout_seconds=30, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        await queue.put("stale", ttl_s=1)

        async def one_expired() -> bool:
            return (await queue.metrics())["expired"] == 1

        await eventually(one_expired, timeout=10)
        await queue.put_many(["a", "b", "c", "d", "e"])
        got = {}

        async def take() -> None:
            message = await queue.get(timeout_s=2)
            assert message is not None
            got[message.body] = message

        for _ in range(5):
            await take()
        await got["a"].ack()  # succeeded at once
        await got["b"].nack()  # fails once …
        await got["c"].reject("bad input")  # dead-lettered at once
        await got["d"].release()  # not tried: no attempt spent
        await got["e"].nack(error="flaky")  # fails twice, then it is out of receives
        for _ in range(3):
            await take()  # b, d and e again
        await got["b"].ack()  # … then succeeds
        await got["d"].ack()
        await got["e"].nack(error="flaky again")
        await queue.put("z", delay_s=1)
        await take()  # z, when due (the pull also lets the broker retire e)
        await got["z"].ack()

        expected = {"processed": 8, "succeeded": 4, "failed": 4, "retried": 3, "expired": 1, "dead_lettered": 2,
                    "discarded": 0}

        async def added_up() -> bool:
            return await queue.metrics() == expected

        await eventually(added_up, timeout=15)
        assert await queue.len() == 0


async def test_dead_letters_of_the_queue_with_retry_and_discard(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=1, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        assert await queue.dead_letters() == []
        ids = await queue.put_many([{"n": 1}, {"n": 2}])
        for _ in ids:
            message = await queue.get(timeout_s=2)
            await message.reject(f"bad {message.body['n']}")
        letters = await queue.dead_letters(limit=10)
        assert [(letter.body, letter.attempts, letter.last_error) for letter in letters] == [
            ({"n": 1}, 1, "bad 1"), ({"n": 2}, 1, "bad 2")]
        await letters[1].discard()
        new_sequence = await letters[0].retry()
        assert await queue.dead_letters() == []
        back = await queue.get(timeout_s=2)
        assert back is not None and back.body == {"n": 1} and back.sequence == new_sequence
        assert back.attempts == 1  # a retry starts over
        await back.ack()
        with pytest.raises(NotFound):
            await letters[1].discard()  # gone already
        with pytest.raises(SpecError, match=r"limit must be an integer from 1 to 100"):
            await queue.dead_letters(limit=0)


async def test_a_dead_letter_labelled_json_that_is_not_is_listed_with_its_text(stack, unique_name):
    """A body any NATS client labelled JSON and did not write as JSON (or nested past what a parser
    reads) is listed with its text, and does not fail the listing of the others."""
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=1, dead_letter_queue=dlq)
    deep = "[" * 5000 + "]" * 5000
    await publish_as_an_app(creds, ["not json", deep, '{"n": 3}'], lambda _: {"Content-Type": "application/json"})
    async with connect(creds) as queue:
        for _ in range(3):
            message = await queue.get(timeout_s=2)
            await message.reject("bad")
        assert [letter.body for letter in await queue.dead_letters(limit=10)] == ["not json", deep, {"n": 3}]


async def test_depth_history_follows_the_queue(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b", "c"])

        async def sampled_three() -> bool:
            return any(point["waiting"] == 3 for point in await queue.depth_history(hours=1))

        await eventually(sampled_three, timeout=10)
        points = await queue.depth_history()
        assert [p["t"] for p in points] == sorted(p["t"] for p in points)
        with pytest.raises(SpecError, match=r"hours must be an integer from 1 to 168"):
            await queue.depth_history(hours=0)


async def test_export_from_the_sdk_lists_every_status_and_clear_leaves_in_flight_ones_to_finish(stack, unique_name,
                                                                                                tmp_path):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=60, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        dead_id, flying_id, waiting_id = await queue.put_many(["dead", "flying", "waiting"])
        delayed_id = await queue.put("later", delay_s=600)
        dead = await queue.get(timeout_s=2)
        await dead.nack(error="broken")
        dead = await queue.get(timeout_s=2)
        await dead.reject()  # its last error: the nack's note
        flying = await queue.get(timeout_s=2)
        counts = await queue.export(tmp_path / "all.jsonl")
        lines = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
        by_id = {line["id"]: line for line in lines if line["status"] != "dead"}
        assert counts == {"waiting": 1, "delayed": 1, "in_flight": 1, "dead": 1}
        assert (by_id[waiting_id]["status"], by_id[waiting_id]["attempts"], by_id[waiting_id]["body"]) == (
            "waiting", 0, "waiting")
        assert (by_id[flying_id]["status"], by_id[flying_id]["attempts"]) == ("in_flight", 1)
        assert (by_id[delayed_id]["status"], by_id[delayed_id]["body"]) == ("delayed", "later")
        (letter,) = [line for line in lines if line["status"] == "dead"]
        assert (letter["body"], letter["attempts"], letter["last_error"]) == ("dead", 2, "broken")
        assert dead_id not in by_id
        assert await queue.len() == 2  # export took nothing: waiting + delayed, as before

        assert await queue.clear() == {"waiting": 1, "delayed": 1, "dead": 1}
        assert await queue.len() == 0 and await queue.dead_letters() == []
        await flying.ack()  # the in-flight one finishes
        assert await queue.get(timeout_s=0.5) is None
