"""The README's five-minute tour, run as written: every ``sh`` and ``python`` block of it, in order,
against a real ``enclave up`` that the CLI finds through ``ENCLAVE_HOME`` alone (as the tour says).
Only ``make up`` is not run: the test starts the stack itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BIN = Path(sys.executable).parent
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```$", re.M | re.S)


def tour_steps(text: str) -> list[tuple[str, str]]:
    """The tour's steps in order: ("sh", one command line) or ("python", a whole script)."""
    tour = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    steps: list[tuple[str, str]] = []
    for kind, body in BLOCK.findall(tour):
        if kind == "python":
            steps.append((kind, body))
            continue
        for line in body.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#") and not command.startswith("make "):
                steps.append((kind, command))
    return steps


def test_the_tour_lists_the_steps_a_reader_follows():
    steps = tour_steps(README.read_text())
    commands = [step for kind, step in steps if kind == "sh"]
    assert commands[0] == "enclave queue create emails --visibility-timeout-seconds 3 --wait"
    assert commands.index("enclave queue create emails-dlq --wait") < commands.index("enclave queue dead-letters emails-dlq")
    assert commands[-2:] == ["enclave queue delete emails --yes", "enclave queue delete emails-dlq --yes"]
    assert sum(kind == "python" for kind, _ in steps) == 3
    assert not any("<" in step for kind, step in steps if kind == "sh")  # nothing to fill in by hand


def test_the_tour_runs_top_to_bottom_as_written(enclave_stack, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("ENCLAVE_")}
    env.update({"ENCLAVE_HOME": str(enclave_stack.home), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"})
    ran: list[tuple[str, subprocess.CompletedProcess[str]]] = []
    for number, (kind, step) in enumerate(tour_steps(README.read_text())):
        if kind == "sh":
            args = ["bash", "-c", step]
        else:
            script = tmp_path / f"step{number}.py"
            script.write_text(step)
            args = [sys.executable, str(script)]
        done = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, f"{step}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        ran.append((step, done))

    said = {step: done for step, done in ran}
    receives = [done for step, done in ran if step.startswith("enclave queue receive emails")]
    assert "receive 1," in receives[0].stdout and '{"to": "a@b.c"}' in receives[0].stdout
    assert "receive 2," in receives[1].stdout  # its lease ran out: the same message again
    assert said["enclave queue delete-message emails 1"].stderr == "Message 1 deleted.\n"
    assert receives[2].stderr == "No messages.\n"
    update = next(done for step, done in ran if step.startswith("enclave queue update emails"))
    assert "Note: with a retry backoff, each receive is leased for its entry (1 s, then 2 s" in update.stderr
    worker = next(done for step, done in ran if "nobody" in step)
    assert worker.stdout.splitlines() == ["try 1 failed", "try 2 failed", "try 3 failed"]
    letters = said["enclave queue dead-letters emails-dlq"].stdout
    assert "emails" in letters and "no @ in 'nobody'" in letters and '{"to":"nobody"}' in letters
    assert said["enclave queue redrive emails-dlq"].stderr.startswith("Moved 1 dead letter(s) from 'emails-dlq'")
    listed = said["enclave queue list"].stdout.split()
    assert listed[:8] == ["NAME", "STATE", "WAITING", "IN", "FLIGHT", "DELAYED", "DEAD", "OLDEST"]
    assert "Ready" in said["enclave queue status emails"].stdout
    with enclave_stack.admin() as admin:
        assert admin.list_queues("default") == []
