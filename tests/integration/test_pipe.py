"""The pipelined send_batch's writer (client/pipe.py) against ``nc.publish``, on a bare nats-server:
it writes nats-py's internal buffer, so these pin that it queues the very bytes ``publish`` queues
(nats-py 2.16.0), that a subscriber gets the same messages, and that it refuses what ``publish``
refuses."""

import nats
import nats.errors
import pytest

from enclave_queue import envelope
from enclave_queue.client.pipe import PIPE_CHUNK, Pipe
from tests.helpers import eventually

BODIES = [b"raw", b"", "text, \u00e9t\u00e9", {"n": 1, "s": "x"}, [1, 2], "x" * 70_000]


async def queued_by_publish(nc, subject: str, reply: str, data: bytes, headers) -> bytes:
    """The command ``nc.publish`` queues for one message: it appends to the buffer and only kicks
    the writer, which runs once the loop does, after this returns."""
    before = len(nc._pending)
    await nc.publish(subject, data, reply=reply, headers=headers)
    return b"".join(nc._pending[before:])


async def test_a_pipe_queues_the_bytes_nc_publish_queues(nats_server):
    nc = await nats.connect(nats_server.url)
    try:
        for data, headers in map(envelope.encode, BODIES):
            expected = await queued_by_publish(nc, "q.a", "_INBOX.x.batch.b1", data, headers)
            pipe = Pipe(nc, "q.a", "_INBOX.x.batch.b1")
            pipe.add(data, headers)
            before = len(nc._pending)
            await pipe.flush()
            assert b"".join(nc._pending[before:]) == expected
    finally:
        await nc.close()


async def test_a_subscriber_gets_from_a_pipe_what_nc_publish_sends_across_chunks(nats_server):
    nc = await nats.connect(nats_server.url)
    try:
        got = {"published": [], "piped": []}
        subs = [await nc.subscribe(f"q.{kind}", cb=_keeper(got[kind])) for kind in got]
        encoded = [envelope.encode(BODIES[n % len(BODIES)]) for n in range(2 * PIPE_CHUNK + 7)]
        stats = dict(nc.stats)
        for data, headers in encoded:
            await nc.publish("q.published", data, reply="r.1", headers=headers)
        published = {k: nc.stats[k] - stats[k] for k in ("out_msgs", "out_bytes")}
        stats = dict(nc.stats)
        pipe = Pipe(nc, "q.piped", "r.1")
        for data, headers in encoded:
            pipe.add(data, headers)
            if pipe.full:
                await pipe.flush()
        await pipe.flush()
        assert {k: nc.stats[k] - stats[k] for k in ("out_msgs", "out_bytes")} == published
        await eventually(lambda: len(got["piped"]) == len(got["published"]) == len(encoded))
        assert got["piped"] == got["published"]
        for sub in subs:
            await sub.unsubscribe()
    finally:
        await nc.close()


def _keeper(into: list):
    async def keep(msg) -> None:
        into.append((msg.reply, msg.data, msg.headers))
    return keep


async def test_a_pipe_refuses_what_nc_publish_refuses(nats_server):
    with pytest.raises(nats.errors.BadSubjectError):
        Pipe(None, "q a", "r.1")  # type: ignore[arg-type]
    nc = await nats.connect(nats_server.url)
    pipe = Pipe(nc, "q", "r.1")
    with pytest.raises(nats.errors.MaxPayloadError):
        pipe.add(b"x" * (nc.max_payload + 1), None)
    pipe.add(b"x", None)
    await nc.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await pipe.flush()
