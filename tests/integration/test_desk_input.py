"""The control plane's desk (an app's requests about its own queue, over NATS) answers bad input from
any client on the queue's own user as an error naming what is wrong, the same as the SDK would
raise for it, and keeps answering: not a failure of the control plane, and nothing done."""

from __future__ import annotations

import json

from enclave_queue.client import connect
from enclave_queue.names import DESK_SUBJECT, REJECT_SUBJECT
from tests.helpers import app_connection, make_queue


async def test_bad_requests_are_answered_as_bad_requests_and_the_desk_goes_on(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.send("kept")
    async with app_connection(creds) as nc:
        for verb, body, says in (
                ("history", b"[" * 5000 + b"]" * 5000, "nested too deeply"),
                ("history", b"[]", "JSON object"),
                ("history", b"not json", "Bad request"),
                ("history", b'{"hours": Infinity}', "Infinity is not JSON"),
                ("history", b'{"hours": 2.5}', "hours"),
                ("dead_letters", b'{"limit": 1e400}', "too large a number"),
                ("discard", b'{"seq": 1.5}', "seq"),
                ("release", b'{"seq": 1, "receive_count": NaN, "delay_s": 0}', "NaN is not JSON")):
            answer = json.loads((await nc.request(f"{DESK_SUBJECT}.{verb}", body, timeout=5)).data)
            problem = answer["error"]
            assert problem["status"] in (400, 422) and says in problem["detail"], (verb, body[:40], problem)
    async with connect(creds) as queue:  # nothing was done, and the desk still answers
        assert [m.body for m in await queue.peek()] == ["kept"]
        assert isinstance(await queue.depth_history(hours=1), list)


async def test_numbers_past_what_a_sequence_or_a_receive_count_can_be_are_refused_naming_them(stack, unique_name):
    """2**70 in a desk list was a 500, 10**30 as a reject's seq reached the broker as a malformed
    request, and 2**64 + 5 as its receive count was signed into the dead letter."""
    make_queue(stack, f"{unique_name}-dlq")
    creds = make_queue(stack, unique_name, dead_letter_queue=f"{unique_name}-dlq")
    async with connect(creds) as queue:
        await queue.send("kept")
        [message] = await queue.receive(wait=5)
    async with app_connection(creds) as nc:
        answer = json.loads((await nc.request(f"{DESK_SUBJECT}.expire", b'{"seqs": [%d]}' % 2**70, timeout=5)).data)
        assert answer["error"]["status"] == 422 and "integers from 1 to 9223372036854775807" in answer["error"]["detail"]
        for body, says in ((b'{"seq": %d}' % 10**30, "seq must be a whole number from 1 to 9223372036854775807"),
                           (b'{"seq": 1e308}', "seq must be a whole number from 1 to"),
                           (b'{"seq": %d, "receive_count": %d}' % (message.sequence, 2**64 + 5),
                            "receive_count must be a whole number from 1 to 1000000")):
            answer = json.loads((await nc.request(REJECT_SUBJECT, body, timeout=5)).data)
            assert says in answer.get("error", ""), (body, answer)
    async with connect(creds) as queue:
        assert await queue.dead_letters(limit=10) == []
