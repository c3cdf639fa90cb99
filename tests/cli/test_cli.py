"""The ``enclave`` CLI as a user runs it: the five-minute tour, and every error as one
``error: …`` line on stderr with its exit code."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import nats
import pytest

from enclave_queue.client import Credentials, connect
from enclave_queue.spec import LIMITS

ENCLAVE = str(Path(sys.executable).parent / "enclave")


def run(stack, *args, env=None, input=None):
    return subprocess.run([ENCLAVE, *args], env={**stack.env, **(env or {})}, capture_output=True, text=True,
                          timeout=60, input=input)


def ok(stack, *args, **kwargs):
    result = run(stack, *args, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


async def test_the_five_minute_tour(stack, unique_name):
    # 5 s: the receipt must outlive two more CLI runs (about 0.5 s each, more on a loaded machine)
    created = ok(stack, "queue", "create", unique_name, "--wait", "--visibility-timeout-seconds", "5")
    for output in ("subject", "username", "password_secret", "broker_url", f"queue.default.{unique_name}"):
        assert output in created.stdout

    creds = json.loads(ok(stack, "queue", "credentials", unique_name, "--json").stdout)
    assert set(creds) == {"broker_url", "broker_urls", "username", "password", "subject", "inbox_prefix", "stream",
                          "consumer", "password_version", "previous_password_valid_until"}

    # any NATS client: plain nats-py with the queue's username, password and inbox prefix
    nc = await nats.connect(creds["broker_url"], user=creds["username"], password=creds["password"],
                            inbox_prefix=creds["inbox_prefix"])
    try:
        ack = await nc.jetstream().publish(creds["subject"], b"hello from nats-py")
        assert ack.stream == creds["stream"]
    finally:
        await nc.close()

    (message,) = json.loads(ok(stack, "queue", "receive", unique_name, "--json").stdout)
    assert message["body"] == "hello from nats-py" and message["receive_count"] == 1
    assert json.loads(ok(stack, "queue", "receive", unique_name, "--wait", "0.2", "--json").stdout) == []
    ok(stack, "queue", "delete-message", unique_name, message["receipt"])
    stats = json.loads(ok(stack, "queue", "len", unique_name, "--json").stdout)
    assert (stats["waiting"], stats["in_flight"], stats["removed"]) == (0, 0, 1)  # gone, not just hidden

    # the environment that --env prints is enough for the SDK
    exports = ok(stack, "queue", "credentials", unique_name, "--env").stdout.splitlines()
    env = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in exports)
    async with connect(Credentials.from_env(env)) as queue:
        await queue.send("via the SDK")
    sent = ok(stack, "queue", "send", unique_name, "by hand")
    assert sent.stdout.startswith("Sent message 3 ")
    human = ok(stack, "queue", "receive", unique_name, "--max", "10")
    assert "via the SDK" in human.stdout and "by hand" in human.stdout and "receipt:" in human.stdout


def test_list_get_update_status_and_delete(stack, unique_name):
    ok(stack, "queue", "create", unique_name, "--project", "cli-proj", "--json")
    listed = json.loads(ok(stack, "queue", "list", "--project", "cli-proj", "--json").stdout)
    assert unique_name in [q["name"] for q in listed]
    assert unique_name in ok(stack, "queue", "list", "--project", "cli-proj").stdout
    updated = json.loads(ok(stack, "queue", "update", unique_name, "--project", "cli-proj", "--max-receives", "7",
                            "--wait", "--json").stdout)
    assert updated["max_receives"] == 7
    got = json.loads(ok(stack, "queue", "get", unique_name, "--json", env={"ENCLAVE_PROJECT": "cli-proj"}).stdout)
    assert got == updated
    assert "Ready" in ok(stack, "queue", "status", unique_name, "-p", "cli-proj").stdout
    refused = run(stack, "queue", "delete", unique_name, "-p", "cli-proj", input="n\n")
    assert refused.returncode == 1 and refused.stderr.endswith("error: aborted.\n")
    ok(stack, "queue", "delete", unique_name, "-p", "cli-proj", "--yes")
    gone = run(stack, "queue", "get", unique_name, "-p", "cli-proj")
    assert gone.returncode == 4
    assert gone.stderr == f"error: Queue '{unique_name}' does not exist in project 'cli-proj'.\n"


@pytest.mark.parametrize("field", sorted(LIMITS))
def test_each_setting_out_of_range_is_one_error_line_and_exit_2(stack, unique_name, field):
    low, _, high = LIMITS[field]
    result = run(stack, "queue", "create", unique_name, f"--{field.replace('_', '-')}", str(high + 1))
    assert result.returncode == 2
    assert result.stderr == f"error: {field} must be an integer from {low} to {high} (got {high + 1}).\n"
    assert result.stdout == ""


def test_error_lines_and_exit_codes(stack, unique_name, tmp_path):
    ok(stack, "queue", "create", unique_name, "--max-message-bytes", "1024")
    cases = [
        (("queue", "create", unique_name), {}, 5, f"error: Queue '{unique_name}' already exists in project 'default'."),
        (("queue", "create", "No"), {}, 2,
         "error: name must be 3–40 lowercase letters, digits or hyphens, starting with a letter (got 'No')."),
        (("queue", "create", f"{unique_name}-x", "--dead-letter-queue", "nope"), {}, 2,
         "error: dead_letter_queue names queue 'nope', which does not exist in project 'default'."),
        (("queue", "send", unique_name, "x" * 1025), {}, 2,
         f"error: The message is 1025 bytes; queue '{unique_name}' accepts at most 1024 (max_message_bytes)."),
        (("queue", "list"), {"ENCLAVE_TOKEN": "enq_wrong"}, 7, "error: The API token is not valid."),
        (("queue", "list"), {"ENCLAVE_TOKEN": "", "ENCLAVE_HOME": str(tmp_path)}, 7,
         f"error: The Enclave API at {stack.api_url} needs a token, and none was found: set ENCLAVE_TOKEN, or "
         "ENCLAVE_HOME to the data directory of the running 'enclave up' (its admin-token file is read)."),
        (("queue", "create", unique_name, "--max-receives", "abc"), {}, 2,
         "error: Invalid value for '--max-receives': must be a whole number such as 30 (got 'abc')."),
    ]
    for args, env, code, line in cases:
        result = run(stack, *args, env=env)
        assert (result.returncode, result.stderr) == (code, line + "\n"), args


def test_an_unreachable_api_is_a_clear_error(stack):
    from enclave_queue.broker.process import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = run(stack, "queue", "list", env={"ENCLAVE_URL": url})
    assert result.returncode == 3
    assert result.stderr.startswith(f"error: Cannot reach the Enclave API at {url} (ConnectError)")


def test_traceback_only_on_request(stack):
    result = run(stack, "queue", "get", "no-such-queue", env={"ENCLAVE_TRACEBACK": "1"})
    assert result.returncode == 4 and "Traceback" in result.stderr


def test_retry_backoff_from_the_cli_and_dead_letter_paging(stack, unique_name):
    created = json.loads(ok(stack, "queue", "create", unique_name, "--max-receives", "4",
                            "--retry-backoff-seconds", "5, 30,120", "--json").stdout)
    assert created["retry_backoff_seconds"] == [5, 30, 120]
    bad = run(stack, "queue", "update", unique_name, "--retry-backoff-seconds", "5,x")
    assert (bad.returncode, bad.stderr) == (2, "error: Invalid value for '--retry-backoff-seconds': must be whole "
                                                "seconds separated by commas, such as 5,30,120 (got '5,x').\n")
    cleared = json.loads(ok(stack, "queue", "update", unique_name, "--no-retry-backoff", "--json").stdout)
    assert cleared["retry_backoff_seconds"] is None
    for i in range(3):
        ok(stack, "queue", "send", unique_name, f"m{i}")
    page = json.loads(ok(stack, "queue", "dead-letters", unique_name, "--limit", "2", "--json").stdout)
    assert [letter["body"] for letter in page["dead_letters"]] == ["m0", "m1"]
    rest = json.loads(ok(stack, "queue", "dead-letters", unique_name, "--after", str(page["next_after"]),
                         "--json").stdout)
    assert [letter["body"] for letter in rest["dead_letters"]] == ["m2"] and rest["next_after"] is None


def test_priorities_from_the_cli(stack, unique_name):
    created = ok(stack, "queue", "create", unique_name, "--priorities", "--wait")
    assert re.search(r"^priorities\s+True\s*$", created.stdout, re.MULTILINE), created.stdout
    listed = json.loads(ok(stack, "queue", "list", "--json").stdout)
    assert next(queue for queue in listed if queue["name"] == unique_name)["priorities"] is True

    plain = json.loads(ok(stack, "queue", "create", f"{unique_name}-b", "--json").stdout)
    assert plain["priorities"] is False
    updated = json.loads(ok(stack, "queue", "update", f"{unique_name}-b", "--priorities", "--json").stdout)
    assert updated["priorities"] is True
    assert json.loads(ok(stack, "queue", "get", f"{unique_name}-b", "--json").stdout)["priorities"] is True
    help_text = " ".join(ok(stack, "queue", "update", "--help").stdout.replace("│", " ").split())
    assert "--priorities" in help_text and "cannot be turned off" in help_text
    assert run(stack, "queue", "update", unique_name, "--no-priorities").returncode == 2  # no way to turn it off


def test_no_receipt_begins_with_a_dash_so_none_reads_as_an_option(stack, unique_name):
    # base64url begins with "-" once in 64: of 300 receipts, all but surely one would, and
    # `delete-message q -pX…` would read it as the --project option
    ok(stack, "queue", "create", unique_name, "--wait")
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as http:
        for n in range(300):
            assert http.post(base, json={"body": f"m{n}"}).status_code == 201
    received = [m for _ in range(3)
                for m in json.loads(ok(stack, "queue", "receive", unique_name, "--max", "100", "--json").stdout)]
    assert len(received) == 300
    assert [m["receipt"] for m in received if m["receipt"].startswith("-")] == []
    for message in received[:3]:
        ok(stack, "queue", "delete-message", unique_name, message["receipt"])
    assert json.loads(ok(stack, "queue", "len", unique_name, "--json").stdout)["in_flight"] == 297

    dashed = run(stack, "queue", "delete-message", unique_name, "--", "-Sdq0" + "A" * 40)  # one not ours
    assert dashed.returncode == 2 and "receipt must be" in dashed.stderr and "starting with a letter" in dashed.stderr, \
        dashed.stderr
    unknown = run(stack, "queue", "delete-message", unique_name, received[3]["receipt"], "--projekt", "x")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: "), unknown.stderr
    ok(stack, "queue", "send", unique_name, "--", "-p is the body")  # a body that begins with '-', as --help says
    (sent,) = json.loads(ok(stack, "queue", "receive", unique_name, "--json").stdout)  # the others are in flight
    assert sent["body"] == "-p is the body"


def test_a_stdout_closed_early_is_exit_1(stack, unique_name):
    """``enclave queue peek … | head -c1``: the output did not all arrive, so the command did not
    succeed. It exited 0: CPython's buffered stdout takes a write the kernel cut short at a closed
    pipe for done, and drops the rest without an error (cli/main.py writes stdout in full)."""
    import os

    make = run(stack, "queue", "create", unique_name, "--wait")
    assert make.returncode == 0, make.stderr
    with stack.admin() as admin:  # more than a pipe holds (64 KiB): the command writes after the reader left
        for _ in range(20):
            admin.send("default", unique_name, "x" * 10_000)
    for args in (["queue", "peek", unique_name, "--limit", "20", "--json"], ["queue", "export", unique_name]):
        read, write = os.pipe()
        command = subprocess.Popen([ENCLAVE, *args], stdout=write, stderr=subprocess.PIPE, env=stack.env)
        os.close(write)
        os.read(read, 1)
        os.close(read)
        _, err = command.communicate(timeout=30)
        assert command.returncode == 1, (args, err)
        assert b"Traceback" not in err
