"""The official Node.js NATS client (npm ``@nats-io/transport-node`` and ``@nats-io/jetstream``)
works against a queue as its users run it: the credentials from ``enclave queue credentials``,
the inbox prefix, publishes with PubAcks, ``consumers.get`` + ``fetch``/``next`` + ack,
redelivery after the visibility timeout; a wrong password and another queue's stream are refused.

``tests/node/client.mjs`` runs one scenario per process and prints its result as JSON; each test
checks it, and checks it against the Python SDK on the same queue (what Node sent, Python reads,
and the other way round). Skipped only where ``node`` is not installed; the pinned packages are
installed with ``npm ci`` on first use.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from enclave_queue.broker.connection import retry_unavailable
from enclave_queue.client import connect
from enclave_queue.errors import Unauthorized
from tests.helpers import RawClient, make_queue

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
CLIENT = NODE_DIR / "client.mjs"
NODE = shutil.which("node")
SCENARIO_TIMEOUT = 30  #: seconds, one node process; every scenario uses short timeouts inside
NPM_CI_TIMEOUT = 100  #: seconds
VISIBILITY = 2  #: seconds, the queues' visibility timeout

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (needed for the Node.js client tests)")


def _installed() -> bool:
    """The packages package.json pins are in node_modules, at those versions."""
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    for name, version in pinned.items():
        installed = NODE_DIR / "node_modules" / name / "package.json"
        if not installed.is_file() or json.loads(installed.read_text())["version"] != version:
            return False
    return True


@pytest.fixture(scope="module", autouse=True)
def node_modules() -> None:
    """``npm ci`` in tests/node once, when the pinned packages are not installed (a fresh clone)."""
    if _installed():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("node is installed but npm is not: cannot install tests/node's packages")
    done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
                          text=True, timeout=NPM_CI_TIMEOUT, check=False)
    assert done.returncode == 0, f"npm ci failed in {NODE_DIR}:\n{done.stdout}\n{done.stderr}"
    assert _installed(), "npm ci did not install the pinned packages"


def _run_node(scenario: str, payload: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(  # killed by run() on timeout
        [NODE, str(CLIENT), scenario], input=json.dumps(payload), capture_output=True, text=True,
        timeout=SCENARIO_TIMEOUT, cwd=NODE_DIR, check=False,
    )
    assert done.returncode == 0, f"node {scenario} exited {done.returncode}:\n{done.stderr}"
    return json.loads(done.stdout)


async def state_of(creds: dict[str, Any]) -> tuple[int, ...]:
    """A queue's stream and consumer counters as its own user sees them (from nats-py)."""
    client = RawClient()
    nc = await client.connect(creds)
    try:
        js = nc.jetstream()
        stream = await retry_unavailable(lambda: js.stream_info(creds["stream"]))
        consumer = await retry_unavailable(lambda: js.consumer_info(creds["stream"], creds["consumer"]))
        return (stream.state.messages, stream.state.last_seq, consumer.num_pending,
                consumer.num_ack_pending, consumer.delivered.stream_seq)
    finally:
        await client.close()


async def node(scenario: str, creds: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Run one scenario of client.mjs as the queue with ``creds``; its JSON result."""
    return await asyncio.to_thread(_run_node, scenario, {"creds": creds, **options})


async def test_node_publishes_and_gets_pubacks_and_python_receives_them(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=VISIBILITY)
    result = await node("publish", creds, messages=[
        {"data": "plain bytes"},
        {"data": "once", "msg_id": "order-7"},
        {"data": "once", "msg_id": "order-7"},  # the same Nats-Msg-Id: stored once
        {"data": json.dumps({"n": 1}), "headers": {"Content-Type": "application/json"}},
        {"data": "text", "headers": {"Content-Type": "text/plain; charset=utf-8"}},
    ])
    acks = result["acks"]
    assert {ack["stream"] for ack in acks} == {creds["stream"]}
    assert [ack["duplicate"] for ack in acks] == [False, False, True, False, False]
    assert acks[2]["seq"] == acks[1]["seq"]
    seqs = [ack["seq"] for i, ack in enumerate(acks) if i != 2]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4

    async with connect(creds) as queue:
        assert await queue.len() == 4
        received = await queue.receive(batch=10, wait=2)
        assert [(m.id, m.body, m.attempts) for m in received] == [
            (seqs[0], b"plain bytes", 1), (seqs[1], b"once", 1), (seqs[2], {"n": 1}, 1), (seqs[3], "text", 1),
        ]
        assert received[1].headers["Nats-Msg-Id"] == "order-7"
        await queue.delete_many(received)
        assert await queue.len() == 0


async def test_node_fetches_from_the_queues_consumer_what_python_sent_and_acks_it(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=VISIBILITY)
    async with connect(creds) as queue:
        ids = [await queue.put("hello"), await queue.put({"n": 2}), await queue.put(b"raw")]

        result = await node("fetch", creds, max=10, expires_ms=1000)
        assert result["before"] == {"num_pending": 3, "num_ack_pending": 0}
        messages = result["messages"]
        assert [(m["seq"], m["data"], m["headers"].get("Content-Type")) for m in messages] == [
            (ids[0], "hello", "text/plain; charset=utf-8"), (ids[1], '{"n":2}', "application/json"),
            (ids[2], "raw", None),
        ]
        assert {m["subject"] for m in messages} == {creds["subject"]}
        assert all(m["delivery_count"] == 1 and not m["redelivered"] and m["acked"] for m in messages)
        assert [m["pending"] for m in messages] == [2, 1, 0]
        assert result["after"] == {"num_pending": 0, "num_ack_pending": 0}  # acked: gone

        assert await queue.len() == 0
        assert await queue.receive(wait=VISIBILITY + 0.5) == []  # acked, so never back


async def test_node_next_takes_one_message_and_returns_null_when_the_queue_is_empty(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=VISIBILITY)
    async with connect(creds) as queue:
        first, second = await queue.put("first"), await queue.put("second")

        one = await node("next", creds, expires_ms=1000)
        assert (one["message"]["seq"], one["message"]["data"], one["message"]["acked"]) == (first, "first", True)
        assert one["after"] == {"num_pending": 1, "num_ack_pending": 0}

        unacked = await node("next", creds, expires_ms=1000, ack=False)
        assert unacked["message"]["seq"] == second
        assert unacked["after"] == {"num_pending": 0, "num_ack_pending": 1}  # leased, not acked

        empty = await node("next", creds, expires_ms=1000)
        assert empty["message"] is None

        # Node's lease ran out unacked: Python gets the message as its second receive
        (back,) = await queue.receive(wait=VISIBILITY + 2)
        assert (back.id, back.body, back.receive_count) == (second, "second", 2)
        await back.delete()


async def test_a_message_node_does_not_ack_comes_back_after_the_visibility_timeout(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=VISIBILITY)
    async with connect(creds) as queue:
        sent = await queue.put("again")

        result = await node("redelivery", creds, visibility_timeout_seconds=VISIBILITY)
        assert result["first"]["seq"] == sent
        assert (result["first"]["delivery_count"], result["first"]["redelivered"]) == (1, False)
        assert result["while_leased"] is None  # hidden from every receiver while leased
        assert result["state_while_leased"] == {"num_pending": 0, "num_ack_pending": 1}
        second = result["second"]
        assert (second["seq"], second["data"]) == (sent, "again")
        assert (second["delivery_count"], second["redelivered"], second["acked"]) == (2, True, True)
        assert result["after"] == {"num_pending": 0, "num_ack_pending": 0}

        assert await queue.len() == 0


async def test_a_message_python_does_not_delete_comes_back_to_node(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=VISIBILITY)
    async with connect(creds) as queue:
        sent = await queue.put({"job": 1})
        (leased,) = await queue.receive(wait=2)
        assert leased.id == sent  # and never deleted

        result = await node("next", creds, expires_ms=VISIBILITY * 1000 + 2000)
        message = result["message"]
        assert (message["seq"], message["data"]) == (sent, '{"job":1}')
        assert (message["delivery_count"], message["redelivered"], message["acked"]) == (2, True, True)
        assert await queue.len() == 0


async def test_node_is_refused_with_a_wrong_password_and_so_is_python(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=VISIBILITY)
    result = await node("wrong-password", creds)
    assert result["refused"] is True
    assert result["error"]["name"] == "AuthorizationError"
    assert "authorization violation" in result["error"]["message"].lower()
    assert result["elapsed_ms"] < 3000  # refused at once, not after a timeout

    with pytest.raises(Unauthorized):
        await connect({**creds, "password": creds["password"] + "x"})
    async with connect(creds) as queue:  # the right password still connects
        assert await queue.len() == 0


async def test_node_without_the_inbox_prefix_is_refused_its_replies(stack, unique_name):
    """Why the inbox prefix is required: nats.js subscribes for replies under ``_INBOX.``, which
    the queue user may not; the publish fails at once, though the message was stored."""
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=VISIBILITY)
    result = await node("no-inbox-prefix", creds)
    assert result["refused"] is True
    assert result["error"]["name"] == "RequestError"
    assert 'permissions violation for subscription to "_inbox.' in result["error"]["message"].lower()
    async with connect(creds) as queue:
        (stored,) = await queue.receive(wait=2)  # the reply was lost, not the message
        assert stored.body == b"without an inbox prefix"
        await stored.delete()


async def test_node_cannot_read_another_queues_stream_or_consumer(stack, unique_name):
    a = make_queue(stack, f"{unique_name}-a", visibility_timeout_seconds=VISIBILITY)
    b = make_queue(stack, f"{unique_name}-b", visibility_timeout_seconds=VISIBILITY)
    async with connect(b) as queue_b:
        ids = [await queue_b.put("b1"), await queue_b.put("b2")]
        before = await state_of(b)

        result = await node("other-queue", a, other=b)
        attempts = result["attempts"]
        assert set(attempts) == {"consumers.get", "consumers.info", "streams.info", "pull", "publish", "subscribe"}
        assert all(attempt["refused"] for attempt in attempts.values()), attempts
        refused_api = {
            "consumers.get": f"$JS.API.CONSUMER.INFO.{b['stream']}.{b['consumer']}",
            "consumers.info": f"$JS.API.CONSUMER.INFO.{b['stream']}.{b['consumer']}",
            "streams.info": f"$JS.API.STREAM.INFO.{b['stream']}",
            "pull": f"$JS.API.CONSUMER.MSG.NEXT.{b['stream']}.{b['consumer']}",
        }
        for name, subject in refused_api.items():
            assert attempts[name]["error"]["message"] == f'Permissions Violation for Publish to "{subject}"'
        assert attempts["subscribe"]["error"] == {
            "name": "PermissionViolationError",
            "message": f'Permissions Violation for Subscription to "{b["inbox_prefix"]}.>"',
        }
        # inside A's account no stream stores B's subject, so nobody answers the publish
        assert "no responders" in json.dumps(attempts["publish"]["error"]).lower()

        assert await state_of(b) == before
        received = await queue_b.receive(batch=10, wait=2)
        assert [(m.id, m.body, m.attempts) for m in received] == [(ids[0], "b1", 1), (ids[1], "b2", 1)]
        await queue_b.delete_many(received)
