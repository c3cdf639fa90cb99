"""A reply subject is a way into the JetStream API of the queue's own account (auth/users.py): what
the stream or a consumer sends to it is taken there as a request of the account's. An app that
holds a queue's credentials may not send direct gets, whose answers carry a body it chose; every
read it may ask for is answered by the API itself, which no request can be made of. And whatever
it changes behind the controller's back is repaired, or reported when it cannot be."""

import asyncio
import json

import nats.errors
import pytest

from enclave_queue.client import connect
from enclave_queue.errors import SpecError
from enclave_queue.names import stream_name
from enclave_queue.retry import retry_unavailable
from tests.helpers import (
    app_connection,
    eventually,
    make_queue,
    queue_account_connection,
    runtime_queue,
    stream_config,
)


def _id(creds):
    return creds["stream"].lower()


async def _state(nc, creds):
    reply = await nc.request(f"$JS.API.STREAM.INFO.{creds['stream']}", b"", timeout=5)
    return json.loads(reply.data)


async def test_a_direct_get_is_refused_to_the_app(stack, unique_name):
    creds = make_queue(stack, unique_name)
    refused = []

    async def seen(error):
        refused.append(str(error))

    async with app_connection(creds) as nc:
        nc._error_cb = seen
        ack = await nc.jetstream().publish(creds["subject"], b"kept")
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request(f"$JS.API.DIRECT.GET.{creds['stream']}", json.dumps({"seq": ack.seq}).encode(), timeout=1)
        assert any("permissions violation" in e.lower() and "direct.get" in e.lower() for e in refused), refused
        # what it may use instead: the API's own message get
        reply = await nc.request(f"$JS.API.STREAM.MSG.GET.{creds['stream']}", json.dumps({"seq": ack.seq}).encode(),
                                 timeout=5)
        assert json.loads(reply.data)["message"]["seq"] == ack.seq


async def test_no_answer_the_app_can_ask_for_changes_its_stream(stack, unique_name):
    """Each read the app may send, with its reply subject on the API's update, purge and delete:
    the answers (a stored message whose body is a stream configuration, a miss, an info, a
    PubAck, a delivery) change nothing."""
    creds = make_queue(stack, unique_name)
    stream = creds["stream"]
    before = await stream_config(stack, _id(creds))
    async with app_connection(creds) as nc:
        js = nc.jetstream()
        sealed = {**json.loads(json.dumps(before.as_dict())), "sealed": True, "max_msgs_per_subject": 1}
        body = (await js.publish(creds["subject"], json.dumps(sealed).encode())).seq
        await js.publish(creds["subject"], b"two")
        targets = [f"$JS.API.STREAM.UPDATE.{stream}", f"$JS.API.STREAM.PURGE.{stream}",
                   f"$JS.API.STREAM.DELETE.{stream}", f"$JS.API.CONSUMER.DELETE.{stream}.worker"]
        for target in targets:
            await nc.publish(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps({"seq": body}).encode(), reply=target)
            await nc.publish(f"$JS.API.STREAM.MSG.GET.{stream}", b'{"seq": 999999}', reply=target)
            await nc.publish(f"$JS.API.STREAM.INFO.{stream}", b"", reply=target)
            await nc.publish(f"$JS.API.CONSUMER.INFO.{stream}.worker", b"", reply=target)
            await nc.publish(creds["subject"], b"three", reply=target)  # its PubAck
        # a delivery: the consumer sends the stored configuration to the update
        await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.worker", b'{"batch": 1, "expires": 1000000000}',
                         reply=f"$JS.API.STREAM.UPDATE.{stream}")
        await nc.flush()
        await asyncio.sleep(1.5)
        state = await _state(nc, creds)
    assert "error" not in state
    assert (state["config"]["sealed"], state["config"]["max_msgs_per_subject"]) == (False, -1)
    assert state["state"]["messages"] >= 2 + len(targets) - 1  # the delivered one may be gone
    after = await stream_config(stack, _id(creds))
    assert after.as_dict() == before.as_dict()


async def test_a_stream_setting_changed_behind_the_controllers_back_is_put_back(stack, unique_name):
    """max_msgs_per_subject = 1 keeps one message and drops the rest, every put acknowledged: a
    field Enclave never sets is drift too, repaired by the next resync (every second here)."""
    creds = make_queue(stack, unique_name)
    queue_id = _id(creds)
    async with queue_account_connection(stack, queue_id) as nc:
        js = nc.jetstream()
        config = (await retry_unavailable(lambda: js.stream_info(stream_name(queue_id)))).config
        config.max_msgs_per_subject = 1
        config.allow_rollup_hdrs = True
        await js.update_stream(config)

        async def repaired():
            now = (await js.stream_info(stream_name(queue_id))).config
            return now.max_msgs_per_subject == -1 and not now.allow_rollup_hdrs

        assert await eventually(repaired, timeout=15)
    async with app_connection(creds) as app:
        for n in range(3):
            await app.jetstream().publish(creds["subject"], b"m%d" % n)
        assert (await _state(app, creds))["state"]["messages"] == 3


async def test_a_sealed_stream_is_reported_as_drift_that_cannot_be_repaired(stack, unique_name):
    creds = make_queue(stack, unique_name)
    queue_id = _id(creds)
    async with queue_account_connection(stack, queue_id) as nc:
        js = nc.jetstream()
        config = (await retry_unavailable(lambda: js.stream_info(stream_name(queue_id)))).config
        config.sealed = True
        await js.update_stream(config)
    with stack.admin() as admin:

        async def errored():
            status = admin.queue_status("default", unique_name)
            return status if status["state"] == "Errored" else None

        status = await eventually(errored, timeout=15)
        assert "was changed outside Enclave (deny_delete, deny_purge, sealed) and cannot be repaired in place" in \
            status["message"], status
        admin.delete_queue("default", unique_name)  # a sealed stream can still be deleted
        admin.wait_deleted("default", unique_name, timeout=20)


async def test_a_queue_with_delayed_messages_is_in_step_and_refuses_a_roll_up_from_the_sdk(runtime):
    """nats-server turns roll-ups on with schedules and will not turn them off: that is the desired
    configuration, not drift to 'repair' every resync. A Nats-Rollup header would delete every
    message of the queue: the SDK refuses the broker's own headers (the API always did)."""
    creds = await runtime_queue(runtime, "rolls")
    async with connect(creds) as queue:
        await queue.put("now")
        await queue.put("later", delay_s=30)  # schedules on, and with them roll-ups
        for name in ("Nats-Rollup", "nats-rollup", "Nats-Schedule", "Nats-TTL"):
            with pytest.raises(SpecError, match="none of the broker's own but Nats-Msg-Id"):
                await queue.put("x", headers={name: "sub"})
        await queue.put("keyed", headers={"Nats-Msg-Id": "k-1"})
    info = await runtime.conn.queue_js(creds["stream"].lower()).stream_info(creds["stream"])
    assert (info.config.allow_msg_schedules, info.config.allow_rollup_hdrs) == (True, True)
    await asyncio.sleep(1.2)  # resyncs every 0.5 s here
    assert await runtime.reconciler.out_of_step() == []
