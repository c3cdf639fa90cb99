"""A message whose sender gave it a header named ``Status`` (any NATS client may: it is an ordinary
header name) is a message like any other. nats-py reads a broker's status reply (the end of a pull
or of a direct get) into a ``Status`` header too; such messages used to be taken for the end of a
read: left out of peek, export and clear, and leased by every receive but given to nobody until
they were dead-lettered unseen."""

from __future__ import annotations

from enclave_queue import envelope
from enclave_queue.client import connect
from tests.helpers import eventually, make_queue, publish_as_an_app

BODIES = ["plain", "says 404", "says 408", "says 503", "says 100"]


def _headers(body: str) -> dict[str, str]:
    text = {"Content-Type": envelope.TEXT}
    return text if body == "plain" else {**text, "Status": body.split()[1], "Description": "the sender's own"}


async def test_a_message_with_a_status_header_is_seen_by_every_read(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    dead_creds = make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, dead_letter_queue=dlq)
    await publish_as_an_app(creds, BODIES, _headers)
    with stack.admin() as admin:
        assert [m["body"] for m in admin.peek("default", unique_name, limit=10)] == BODIES
        assert sorted(line["body"] for line in admin.export("default", unique_name)) == sorted(BODIES)
        async with connect(creds) as queue:
            assert [m.body for m in await queue.peek(limit=10)] == BODIES
            taken = await queue.receive(batch=10, wait=2)
            assert sorted(m.body for m in taken) == sorted(BODIES)
            assert {m.body: m.headers.get("Status") for m in taken}["says 404"] == "404"
            for message in taken:
                await message.nack()
        # the API's receive (the console's and the CLI's too): the last receive of each
        again = admin.receive("default", unique_name, max_messages=10, wait=2)
        assert sorted(m["body"] for m in again) == sorted(BODIES)
        for message in again:
            admin.nack_message("default", unique_name, message["receipt"])
        letters = await eventually(lambda: len(found := admin.list_dead_letters("default", dlq)["dead_letters"])
                                   == len(BODIES) and found)
        assert sorted(letter["body"] for letter in letters) == sorted(BODIES)
        # the copies keep what their senders wrote
        async with connect(dead_creds) as dead:
            copies = await dead.receive(batch=10, wait=2)
            assert {m.body: m.headers.get("Status") for m in copies}["says 408"] == "408"


async def test_clear_removes_messages_with_a_status_header(stack, unique_name):
    creds = make_queue(stack, unique_name)
    await publish_as_an_app(creds, BODIES, _headers)
    with stack.admin() as admin:
        assert admin.clear("default", unique_name)["waiting"] == len(BODIES)
        assert admin.stats("default", unique_name)["waiting"] == 0
        assert list(admin.export("default", unique_name)) == []
