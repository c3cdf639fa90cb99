"""Operator-facing behaviour: token rotation, a wrong master key, a broker configuration edited
behind the controller's back, and the CLI ignoring a dead server's runtime file."""

import base64
import json
import os
import signal

import httpx
import pytest

from enclave_queue.client import connect
from enclave_queue.errors import Unauthorized
from enclave_queue.settings import ClientSettings
from tests.helpers import eventually, make_queue


def test_deleting_the_admin_token_file_rotates_the_token(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    old = first.token
    first.stop()
    (home / "admin-token").unlink()
    second = enclave_stack_factory(home=home)
    assert second.token != old
    url = second.api_url + "/v1/projects/default/queues"
    assert httpx.get(url, headers={"Authorization": f"Bearer {old}"}).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {second.token}"}).status_code == 200


def test_a_master_key_that_does_not_open_the_data_dir_stops_the_start(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    make_queue(first, "sealed")
    first.stop()
    other_key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    with pytest.raises(RuntimeError, match="The master key does not open this data directory's secrets"):
        enclave_stack_factory(home=home, env={"ENCLAVE_MASTER_KEY": other_key})


async def test_a_user_removed_from_the_broker_config_comes_back(enclave_stack_factory):
    # repairs come with the resync: a few seconds apart, so the broken state is seen before it
    stack = enclave_stack_factory(env={"ENCLAVE_RESYNC_SECONDS": "4"})
    creds = make_queue(stack, "tampered")
    conf = stack.home / "broker" / "nats.conf"
    config = json.loads(conf.read_text())
    config["accounts"][creds["username"]]["users"] = []  # the queue user, gone
    conf.write_text(json.dumps(config))
    os.kill(stack.broker_pid, signal.SIGHUP)

    async def refused():
        try:
            queue = await connect(creds)
        except Unauthorized:
            return True
        await queue.close()
        return False

    await eventually(refused, timeout=4, interval=0.02)  # the broker applies the change at its reload

    async def works():
        try:
            async with connect(creds) as queue:
                await queue.send("back")
                return True
        except Unauthorized:
            return False

    await eventually(works, timeout=15)  # the next resync rewrites the configuration


def test_the_cli_ignores_the_runtime_file_of_a_dead_server(tmp_path):
    (tmp_path / "enclave.json").write_text(json.dumps({"pid": 2**22 + 12345, "api_url": "http://127.0.0.1:1"}))
    settings = ClientSettings.from_env({"ENCLAVE_HOME": str(tmp_path)})
    assert settings.url == "http://127.0.0.1:7780"
    (tmp_path / "enclave.json").write_text(json.dumps({"pid": os.getpid(), "api_url": "http://127.0.0.1:9"}))
    assert ClientSettings.from_env({"ENCLAVE_HOME": str(tmp_path)}).url == "http://127.0.0.1:9"


def test_a_stack_that_has_run_a_while_stops_cleanly_on_sigterm(enclave_stack_factory):
    """Regression: an undrained pull subscription of the dead-letter mover once held SIGTERM up
    for 30 s, past the harness's grace, so the stop ended in SIGKILL (exit code -9)."""
    import time

    stack = enclave_stack_factory()
    make_queue(stack, "idle")
    time.sleep(6)  # past the mover's 5 s fetch cycle
    assert stack.stop() == 0
    assert "Stopping" in stack.log_path.read_text()
