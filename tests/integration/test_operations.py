"""Operator-facing behaviour: token rotation, a wrong master key, a broker configuration edited
behind the controller's back, and the CLI ignoring a dead server's runtime file."""

import base64
import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from enclave_queue.auth import jwt
from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.client import connect
from enclave_queue.errors import BrokerUnavailable, SpecError, Unauthorized
from enclave_queue.names import ADVISORY_STREAM, MOVER
from enclave_queue.settings import ClientSettings, EnclaveSettings
from tests.helpers import account_refuses_logins, control_connection, eventually, make_queue, system_connection


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


async def test_an_account_removed_from_the_broker_comes_back(enclave_stack_factory):
    """The account is removed while the control process is stopped (SIGSTOP), so no resync can
    repair it before the test has seen it broken; let go, its next resync (every second in a test
    stack) gives the broker the account's claims again."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "tampered")
    queue_id = creds["username"]  # a queue's user is named by its id
    keys = OperatorKeys(MasterKey.load_or_create(stack.home))
    gone = jwt.encode({"sub": keys.public(keys.operator), "nats": {
        "type": "generic", "version": 2, "accounts": [keys.public(keys.queue_account(queue_id))]}},
        keys.operator)
    os.kill(stack.pid, signal.SIGSTOP)
    try:
        async with system_connection(stack) as nc:  # the account, gone from the broker
            answer = json.loads((await nc.request("$SYS.REQ.CLAIMS.DELETE", gone.encode(), timeout=2)).data)
        assert "error" not in answer, answer
        await eventually(lambda: account_refuses_logins(stack, queue_id), timeout=10)  # broken, and seen so
    finally:
        os.kill(stack.pid, signal.SIGCONT)

    async def works():
        try:
            async with connect(creds) as queue:
                await queue.send("back")
                return True
        except (Unauthorized, BrokerUnavailable):  # refused; or the callout, busy catching up, too late
            return False

    await eventually(works, timeout=15)  # the next resync gives the broker the account's claims again
    assert not await account_refuses_logins(stack, queue_id)


def test_the_cli_ignores_the_runtime_file_of_a_dead_server(tmp_path):
    (tmp_path / "admin-token").write_text("the-home-s-token\n")
    (tmp_path / "enclave.json").write_text(json.dumps({"pid": 2**22 + 12345, "api_url": "http://127.0.0.1:1"}))
    settings = ClientSettings.from_env({"ENCLAVE_HOME": str(tmp_path)})
    # the default port, and not the home's token: whatever listens there is not this home's server
    assert (settings.url, settings.token) == ("http://127.0.0.1:7780", None)
    named = ClientSettings.from_env({"ENCLAVE_HOME": str(tmp_path), "ENCLAVE_URL": "http://127.0.0.1:8"})
    assert (named.url, named.token) == ("http://127.0.0.1:8", "the-home-s-token")
    (tmp_path / "enclave.json").write_text(json.dumps({"pid": os.getpid(), "api_url": "http://127.0.0.1:9"}))
    running = ClientSettings.from_env({"ENCLAVE_HOME": str(tmp_path)})
    assert (running.url, running.token) == ("http://127.0.0.1:9", "the-home-s-token")


async def test_a_stack_that_has_run_a_while_stops_cleanly_on_sigterm(enclave_stack_factory):
    """Regression: an undrained pull subscription of the dead-letter mover once held SIGTERM up
    for 30 s, past the harness's grace, so the stop ended in SIGKILL (exit code -9). The stop
    comes once the mover has ended a pull request for advisories and made another, both seen
    here on the control account's subject."""
    stack = enclave_stack_factory()
    make_queue(stack, "idle")
    fetches = 0

    async def on_pull(msg) -> None:
        nonlocal fetches
        fetches += "batch" in json.loads(msg.data)

    async with control_connection(stack) as nc:
        sub = await nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{ADVISORY_STREAM}.{MOVER}", cb=on_pull)
        await eventually(lambda: fetches >= 2, timeout=30)  # one pull request has ended
        await sub.unsubscribe()
    assert stack.stop() == 0
    assert "Stopping" in stack.log_path.read_text()


async def test_the_broker_runs_under_the_memory_setting(enclave_stack_factory):
    stack = enclave_stack_factory(env={"ENCLAVE_BROKER_MEMORY": "256MiB"})
    raw = Path(f"/proc/{stack.broker_pid}/environ").read_text()
    environ = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
    assert environ["GOMEMLIMIT"] == f"{256 << 20}B"
    async with system_connection(stack) as nc:
        reply = await nc.request("$SYS.REQ.SERVER.PING.JSZ", b"{}", timeout=2)
    assert json.loads(reply.data)["data"]["config"]["max_memory"] == 64 << 20  # a quarter of it


def test_a_broker_memory_below_the_least_is_refused():
    with pytest.raises(SpecError, match="ENCLAVE_BROKER_MEMORY must be at least 64MiB"):
        EnclaveSettings.from_env({"ENCLAVE_BROKER_MEMORY": "10MiB"})


async def test_a_start_revokes_an_admin_token_a_crashed_rotation_left_valid(runtime):
    # a rotation writes the new token's file, then revokes the old one: killed between the two, the
    # old token stayed valid through every later start (the file's token was valid: nothing was done)
    from enclave_queue.auth.tokens import generate_token, token_digest
    from enclave_queue.state.records import TokenRecord

    current = (runtime.settings.home / "admin-token").read_text().strip()
    replaced = generate_token()
    await runtime.store.tokens.create(token_digest(replaced), TokenRecord(name="admin"))
    await runtime._ensure_admin_token()  # what every start does
    assert await runtime.store.tokens.get(token_digest(replaced)) is None
    assert await runtime.store.tokens.get(token_digest(current)) is not None
    assert (runtime.settings.home / "admin-token").read_text().strip() == current


async def test_a_restart_removes_an_interrupted_create_s_account_from_the_broker_too(runtime):
    # a create cut off after its account was claimed and pushed, before its queue record: the start's
    # clean-up dropped the account's record, and its claims stayed on the broker for good
    accounts = runtime.accounts
    orphan = await accounts.claim("default.never-made")
    claims = Path(accounts.base.resolver_dir) / f"{accounts.keys.queue_account_public(orphan.id)}.jwt"
    assert claims.exists() and orphan.id in accounts.applied
    await accounts.clean_up()  # what a start does
    assert await runtime.store.accounts.get(orphan.id) is None
    assert orphan.id not in accounts.applied
    await eventually(lambda: not claims.exists(), timeout=10)  # the broker deleted the account


def test_a_wait_rides_out_the_broker_restarting_under_it(enclave_stack_factory, tmp_path):
    # the status answers 503 while the supervisor starts the broker again: --wait had given up on the
    # first one, saying the change had failed when it was applied
    stack = enclave_stack_factory(home=tmp_path / "home")
    make_queue(stack, "riding")
    with stack.admin() as admin:
        admin.update_queue("default", "riding", {"max_receives": 7})
        os.kill(stack.broker_pid, signal.SIGKILL)
        assert admin.wait_ready("default", "riding", timeout=60)["max_receives"] == 7
        admin.delete_queue("default", "riding")
        os.kill(_broker_pid(stack), signal.SIGKILL)
        admin.wait_deleted("default", "riding", timeout=60)


def _broker_pid(stack) -> int:
    return json.loads((stack.home / "enclave.json").read_text())["broker_pid"]


def test_a_token_checked_while_the_broker_does_not_answer_is_a_503_not_a_500(enclave_stack_factory, tmp_path):
    stack = enclave_stack_factory(home=tmp_path / "home")
    url = f"{stack.api_url}/v1/projects/default/queues"
    os.kill(stack.broker_pid, signal.SIGSTOP)
    try:
        for token in ("not-a-token", stack.token):  # neither looked up yet: both ask the broker
            answer = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            assert (answer.status_code, answer.json()["title"]) == (503, "Broker unavailable"), answer.text
            assert answer.headers["retry-after"] == "1"
    finally:
        os.kill(stack.broker_pid, signal.SIGCONT)
    assert httpx.get(url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30).status_code == 200
