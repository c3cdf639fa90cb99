"""Capacity (``max_messages``): a full queue refuses new messages at once, as ``QueueFull`` in
the SDK, a 409 problem in the API and ``error: …`` in the CLI, and takes them again once a
message is deleted. On the broker: the stream's ``max_msgs`` with ``discard: new`` (err_code 10077)."""

import httpx
import pytest

from enclave_queue.client import connect
from enclave_queue.errors import Conflict, QueueFull, SpecError
from tests.cli.test_cli import run
from tests.helpers import make_queue, stream_config


async def test_a_full_queue_raises_queue_full_and_takes_messages_again_after_a_delete(stack, unique_name):
    creds = make_queue(stack, unique_name, max_messages=2)
    async with connect(creds) as queue:
        first = await queue.send("one")
        await queue.send("two")
        with pytest.raises(QueueFull, match=r"is full \(max_messages\); the message was not stored\.$"):
            await queue.send("three")
        with pytest.raises(QueueFull, match=r"^0 of 2 messages were sent; the first failure: "):
            await queue.send_batch(["four", "five"])
        (message, other) = await queue.receive(batch=5, wait=1)  # in flight still counts: still full
        assert (message.body, message.sequence) == ("one", first)
        with pytest.raises(QueueFull):
            await queue.send("three")
        await message.delete()
        assert await queue.send("three") > first
        with pytest.raises(QueueFull):
            await queue.send("four")
        await other.delete()


def test_a_full_queue_by_hand_is_a_409_problem_and_takes_messages_again_after_a_delete(stack, unique_name):
    make_queue(stack, unique_name, max_messages=1)
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as http:
        assert http.post(base, json={"body": "one"}).status_code == 201
        response = http.post(base, json={"body": "two"})
        assert response.status_code == 409
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json() == {
            "type": "about:blank", "title": "Queue full", "status": 409,
            "detail": f"Queue '{unique_name}' in project 'default' is full (max_messages 1); "
                      "the message was not stored."}
        with stack.admin() as admin:  # the admin client rebuilds the specific error from the problem
            with pytest.raises(QueueFull) as caught:
                admin.send("default", unique_name, "two")
            assert isinstance(caught.value, Conflict) and caught.value.exit_code == 8
            (message,) = admin.receive("default", unique_name, wait=1)
            admin.delete_message("default", unique_name, message["receipt"])
            assert admin.send("default", unique_name, "two")["duplicate"] is False


def test_a_full_queue_from_the_cli_is_one_error_line_and_exit_8(stack, unique_name):
    make_queue(stack, unique_name, max_messages=1)
    assert run(stack, "queue", "send", unique_name, "one").returncode == 0
    refused = run(stack, "queue", "send", unique_name, "two")
    assert refused.returncode == 8
    assert refused.stderr == (f"error: Queue '{unique_name}' in project 'default' is full (max_messages 1); "
                              "the message was not stored.\n")


async def test_capacity_and_dedupe_window_change_in_place_on_the_broker(stack, unique_name):
    creds = make_queue(stack, unique_name, retention_hours=2, max_messages=50)
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", unique_name)["id"]
    config = await stream_config(stack, queue_id)
    assert (config.max_msgs, config.duplicate_window) == (50, 3600)  # the default window
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b", "c"])
        with stack.admin() as admin:
            admin.update_queue("default", unique_name, {"max_messages": 2, "dedupe_window_seconds": 7200})
            updated = admin.wait_ready("default", unique_name)
        assert (updated["id"], updated["max_messages"], updated["dedupe_window_seconds"]) == (queue_id, 2, 7200)
        config = await stream_config(stack, queue_id)
        assert (config.max_msgs, config.duplicate_window) == (2, 7200)
        # lowering the capacity below the depth drops nothing (discard new); new messages wait for room
        assert len(await queue.receive(batch=10, wait=1)) == 3
        with pytest.raises(QueueFull):
            await queue.send("d")
        with stack.admin() as admin:
            admin.update_queue("default", unique_name, {"max_messages": 0, "dedupe_window_seconds": 3600})
            admin.wait_ready("default", unique_name)
        config = await stream_config(stack, queue_id)
        # without a limit it can take delayed messages; their schedules come with the first one
        assert (config.max_msgs, config.duplicate_window, bool(config.allow_msg_schedules)) == (-1, 3600, False)
        await queue.send("d")
        await queue.put("e", delay_s=60)  # without a limit it takes delayed messages …
        assert (await stream_config(stack, queue_id)).allow_msg_schedules is True
        with stack.admin() as admin, pytest.raises(SpecError) as refused:
            admin.update_queue("default", unique_name, {"max_messages": 2})  # … so no limit comes back
        assert refused.value.errors[0]["field"] == "max_messages"
        assert "cannot be set in place" in refused.value.errors[0]["message"]


def test_capacity_and_dedupe_window_from_the_cli_and_the_cross_field_rule(stack, unique_name):
    created = run(stack, "queue", "create", unique_name, "--max-messages", "5", "--dedupe-window-seconds", "60",
                  "--retention-hours", "1", "--wait", "--json")
    assert created.returncode == 0, created.stderr
    assert '"max_messages": 5' in created.stdout and '"dedupe_window_seconds": 60' in created.stdout
    refused = run(stack, "queue", "update", unique_name, "--dedupe-window-seconds", "3601")
    assert refused.returncode == 2
    assert refused.stderr == ("error: dedupe_window_seconds (3601) must not exceed retention_hours (1 h = 3600 s): "
                              "a key cannot outlive the messages it guards.\n")
    updated = run(stack, "queue", "update", unique_name, "--retention-hours", "2", "--dedupe-window-seconds", "7200",
                  "--max-messages", "0", "--wait", "--json")
    assert updated.returncode == 0, updated.stderr
    assert '"max_messages": 0' in updated.stdout and '"dedupe_window_seconds": 7200' in updated.stdout
