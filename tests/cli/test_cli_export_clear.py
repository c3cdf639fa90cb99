"""``enclave queue send --delay``, ``export`` and ``clear`` as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import make_queue

ENCLAVE = str(Path(sys.executable).parent / "enclave")


def run(stack, *args):
    return subprocess.run([ENCLAVE, *args], env=stack.env, capture_output=True, text=True, timeout=60)


def ok(stack, *args):
    result = run(stack, *args)
    assert result.returncode == 0, result.stderr
    return result


def test_send_with_a_delay_then_export_to_a_file_and_to_stdout(stack, unique_name, tmp_path):
    make_queue(stack, unique_name)
    ok(stack, "queue", "send", unique_name, "now")
    delayed = ok(stack, "queue", "send", unique_name, "later", "--delay", "600")
    assert delayed.stdout.startswith("Sent message 2 ") and "delayed until" in delayed.stdout

    target = tmp_path / "messages.jsonl"
    exported = ok(stack, "queue", "export", unique_name, "--output", str(target))
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [(m["status"], m["body"]) for m in lines] == [("waiting", "now"), ("delayed", "later")]
    assert exported.stdout == ""
    assert exported.stderr == (f"Exported 2 message(s) of '{unique_name}': 1 waiting, 0 in flight, 1 delayed, "
                               "0 dead.\n")
    assert ok(stack, "queue", "export", unique_name).stdout == target.read_text()


def test_clear_needs_yes_and_then_prints_the_counts(stack, unique_name):
    make_queue(stack, unique_name)
    ok(stack, "queue", "send", unique_name, "now")
    ok(stack, "queue", "send", unique_name, "later", "--delay", "600")

    refused = run(stack, "queue", "clear", unique_name)
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: ") and "--yes" in refused.stderr
    assert len(ok(stack, "queue", "export", unique_name).stdout.splitlines()) == 2  # nothing removed

    cleared = ok(stack, "queue", "clear", unique_name, "--yes")
    assert cleared.stdout == f"Cleared '{unique_name}': 1 waiting, 1 delayed, 0 dead message(s) removed.\n"
    assert json.loads(ok(stack, "queue", "clear", unique_name, "--yes", "--json").stdout) == {
        "waiting": 0, "delayed": 0, "dead": 0}


def test_export_and_clear_of_a_missing_queue_fail_with_exit_code_4(stack, tmp_path):
    target = tmp_path / "none.jsonl"
    for args in (("export", "no-such-queue", "--output", str(target)), ("clear", "no-such-queue", "--yes")):
        result = run(stack, "queue", *args)
        assert result.returncode == 4
        assert result.stderr == "error: Queue 'no-such-queue' does not exist in project 'default'.\n"
    assert not target.exists()
