"""Dedupe keys: ``send(body, dedupe_key=…)`` (and ``"dedupe_key"`` by hand) sets ``Nats-Msg-Id``;
within the queue's ``dedupe_window_seconds`` a repeated key stores nothing and answers with the
first message's sequence; after the window it adds a new message."""

import httpx
import pytest

from enclave_queue.client import connect
from enclave_queue.errors import SpecError
from tests.cli.test_cli import run
from tests.helpers import eventually, make_queue


async def test_a_repeated_dedupe_key_adds_nothing_within_the_window_and_a_new_message_after_it(stack, unique_name):
    creds = make_queue(stack, unique_name, dedupe_window_seconds=1)
    async with connect(creds) as queue:
        first = await queue.send("first", dedupe_key="order-42")
        assert await queue.send("again", dedupe_key="order-42") == first
        other = await queue.send("other", dedupe_key="order-43")
        assert other != first
        received = await queue.receive(batch=10, wait=1)
        assert [(m.sequence, m.body) for m in received] == [(first, "first"), (other, "other")]
        await queue.delete_many(received)

        async def added_anew() -> int:  # every try inside the window is answered with the first
            sequence = await queue.send("later", dedupe_key="order-42")
            return sequence if sequence != first else 0

        later = await eventually(added_anew, timeout=10, interval=0.2)
        assert later > other
        (message,) = await queue.receive(batch=10, wait=1)
        assert (message.sequence, message.body) == (later, "later")
        await message.delete()


async def test_a_dedupe_key_over_128_characters_is_refused_and_sends_nothing(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        with pytest.raises(SpecError, match=r"^dedupe_key must be a text of 1 to 128 printable characters, "
                                            r"not beginning or ending with a space \(got 129 characters\)\.$"):
            await queue.send("x", dedupe_key="k" * 129)
        with pytest.raises(SpecError, match="dedupe_key must be"):
            await queue.send("x", dedupe_key="a\r\nNats-Expected-Stream: OTHER")
        assert await queue.send("y", dedupe_key="k" * 128) == 1
        assert len(await queue.receive(batch=10, wait=0.5)) == 1


def test_dedupe_by_hand_returns_the_first_sequence_and_says_duplicate(stack, unique_name):
    make_queue(stack, unique_name)
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as http:
        first = http.post(base, json={"body": "one", "dedupe_key": "k1"})
        assert first.status_code == 201 and first.json() == {"sequence": 1, "duplicate": False}
        again = http.post(base, json={"body": "two", "dedupe_key": "k1"})
        assert again.status_code == 201 and again.json() == {"sequence": 1, "duplicate": True}
        refused = http.post(base, json={"body": "three", "dedupe_key": "k" * 129})
        assert refused.status_code == 422
        assert refused.json()["errors"] == [
            {"field": "dedupe_key", "message": "must be a text of 1 to 128 printable characters, not beginning "
                                               f"or ending with a space (got {'k' * 40!r}… (129 characters))"}]
        assert [m["body"] for m in http.get(base).json()["messages"]] == ["one"]
    sent = run(stack, "queue", "send", unique_name, "four", "--dedupe-key", "k1")
    assert sent.returncode == 0
    assert sent.stdout == f"Duplicate of message 1 in '{unique_name}' (dedupe key already sent); nothing added.\n"
    sent = run(stack, "queue", "send", unique_name, "five", "--dedupe-key", "k2")
    assert sent.stdout.startswith("Sent message 2 ")
