"""With queue A's credentials, nothing can be done to queue B — in the same project or another.

Each queue is its own broker account; A's user is allowed only its own queue's operations.
Every attempt below is refused (a permissions violation, or a request nobody answers) and B's
stream and consumer are exactly as they were.
"""

import json

import nats
import nats.errors
import pytest

from enclave_queue.client import connect
from enclave_queue.retry import retry_unavailable
from tests.helpers import RawClient, make_queue


async def state_of(creds):
    """B's stream and consumer as B's own user sees them."""
    client = RawClient()
    nc = await client.connect(creds)
    try:
        js = nc.jetstream()
        # retried: a just-made account's JetStream may not answer for a moment
        stream = await retry_unavailable(lambda: js.stream_info(creds["stream"]))
        consumer = await retry_unavailable(lambda: js.consumer_info(creds["stream"], creds["consumer"]))
        return (stream.state.messages, stream.state.last_seq, stream.state.consumer_count,
                consumer.num_pending, consumer.num_ack_pending, consumer.delivered.stream_seq)
    finally:
        await client.close()


@pytest.mark.parametrize("a_first", [True, False], ids=["a-older", "a-newer"])
@pytest.mark.parametrize("b_project", ["default", "iso-other"], ids=["same-project", "other-project"])
async def test_queue_a_can_do_nothing_to_queue_b(stack, unique_name, b_project, a_first):
    """Both directions: the attacker's queue made before the victim's, and after it (accounts come
    from a pool, so a newer queue's account can be older than an older queue's)."""
    if a_first:
        a = make_queue(stack, f"{unique_name}-a")
        b = make_queue(stack, f"{unique_name}-b", project=b_project)
    else:
        b = make_queue(stack, f"{unique_name}-b", project=b_project)
        a = make_queue(stack, f"{unique_name}-a")
    async with connect(b) as queue_b:
        await queue_b.send("b1")
        await queue_b.send("b2")
        (leased,) = await queue_b.receive(wait=2)  # a live ack subject of B's, for A to try
        b_ack_subject = leased._reply
        before = await state_of(b)

        client = RawClient()
        nc = await client.connect(a)
        js = nc.jetstream(timeout=0.5)
        try:
            # publish to B's subject: inside A's account nothing stores it
            with pytest.raises(nats.errors.NoRespondersError):
                await nc.request(b["subject"], b"from a", timeout=1)

            # pull from B's consumer
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{b['stream']}.worker", b'{"batch": 10}',
                             reply=f"{a['inbox_prefix']}.steal")
            await client.wait_error(f"publish to \"$js.api.consumer.msg.next.{b['stream'].lower()}")

            # acknowledge (delete) B's leased message
            await nc.publish(b_ack_subject, b"+ACK")
            await client.wait_error(f"publish to \"{b_ack_subject.lower()}")

            # stream info, list, create, delete, purge; consumer create and delete
            attempts = [
                js.stream_info(b["stream"]),
                js.streams_info(),
                js.add_stream(name="EVIL", subjects=["evil"]),
                js.delete_stream(b["stream"]),
                js.purge_stream(b["stream"]),
                js.add_consumer(b["stream"], durable_name="evil"),
                js.delete_consumer(b["stream"], "worker"),
            ]
            for attempt in attempts:
                with pytest.raises(nats.errors.TimeoutError):
                    await attempt
            await client.wait_error("$js.api.stream.purge")

            # subscribe to B's inbox, or to everyone's
            for subject in (f"{b['inbox_prefix']}.>", "_INBOX.>", ">"):
                await nc.subscribe(subject)
                await client.wait_error(f"subscription to \"{subject.lower()}\"")

            # reply-subject injection: the server answers A's own requests onto B's subject
            await nc.publish(a["subject"], b"inject", reply=b["subject"])
            await nc.publish(f"$JS.API.STREAM.INFO.{a['stream']}", b"", reply=b["subject"])
            await nc.publish(f"$JS.API.CONSUMER.INFO.{a['stream']}.worker", b"", reply=b["subject"])
            await nc.flush()
        finally:
            await client.close()

        assert await state_of(b) == before
        await leased.delete()


async def test_a_users_own_operations_work_and_nothing_else_is_allowed(stack, unique_name):
    a = make_queue(stack, unique_name)
    client = RawClient()
    nc = await client.connect(a)
    try:
        js = nc.jetstream(timeout=1)
        ack = await js.publish(a["subject"], b"mine")
        assert ack.stream == a["stream"]
        # retried: the broker may still be loading the just-made account's JetStream
        info = await retry_unavailable(lambda: js.stream_info(a["stream"]))
        assert info.state.messages == 1
        # even its own stream cannot be purged or deleted by the app user
        with pytest.raises(nats.errors.TimeoutError):
            await js.purge_stream(a["stream"])
        await client.wait_error("permissions violation")
        raw = await nc.request(f"$JS.API.CONSUMER.INFO.{a['stream']}.worker", b"", timeout=1)
        assert json.loads(raw.data)["num_pending"] == 1
    finally:
        await client.close()


@pytest.mark.parametrize("a_first", [True, False], ids=["a-older", "a-newer"])
async def test_the_control_planes_desk_acts_on_the_asking_queue_only(stack, unique_name, a_first):
    """An app reaches the desk as ``enclave.desk.<verb>`` in its own account; the queue it acts on
    comes from that account's import, so A's clear, metrics or dead letters never touch B, and the
    control account's own desk subjects are out of A's reach. Both directions: A made before B, and
    after it."""
    names = [f"{unique_name}-a", f"{unique_name}-b"]
    made = {name: make_queue(stack, name) for name in (names if a_first else names[::-1])}
    a, b = made[names[0]], made[names[1]]
    with stack.admin() as admin:
        b_id = admin.get_queue("default", f"{unique_name}-b")["id"]
    async with connect(a) as queue_a, connect(b) as queue_b:
        await queue_b.put_many(["b1", "b2"])
        await queue_b.put("b3", delay_s=600)
        await queue_a.put("a1")
        before = await state_of(b)
        assert await queue_a.clear() == {"waiting": 1, "delayed": 0, "dead": 0}
        assert (await queue_a.metrics())["succeeded"] == 0
        assert await state_of(b) == before and await queue_b.len() == 3

        client = RawClient()
        nc = await client.connect(a)
        try:  # the control account's name for B's desk, tried from A's account
            await nc.publish(f"desk.{b_id}.clear", b"{}", reply=f"{a['inbox_prefix']}.x")
            await client.wait_error(f"publish to \"desk.{b_id}.clear\"")
        finally:
            await client.close()
        assert await queue_b.len() == 3
