"""A broker killed while ``enclave up`` starts: while it checks its configuration, as it first
spawns, and at moments through the control plane's own start (the state store, the accounts, the
callout, the HTTP API). The stack comes up healthy all the same, on a broker the supervisor
restarted, and a queue made on it sends and receives."""

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from enclave_queue.broker.process import nats_server_binary
from enclave_queue.client import connect
from enclave_queue.testing import EnclaveStack
from tests.helpers import eventually, make_queue

pytestmark = pytest.mark.slow


def broker_children(parent: int) -> list[tuple[int, list[str]]]:
    """The nats-server processes whose parent is ``parent``: (pid, command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and cmdline and cmdline[0].endswith(b"nats-server"):
            found.append((int(entry.name), [part.decode() for part in cmdline if part]))
    return found


def streams(home: Path, name: str) -> bool:
    """Whether the broker has begun storing a stream called ``name`` (in any account)."""
    return any((home / "broker" / "jetstream").glob(f"*/streams/{name}"))


#: the moments to kill the serving broker at: (False: not a check, what must be on disk first)
MOMENTS = {
    "just spawned": (False, lambda home: True),
    "opening the state store": (False, lambda home: streams(home, "KV_enclave-queues")),
    "the admin token written": (False, lambda home: (home / "admin-token").exists()),
    "the error notes starting": (False, lambda home: streams(home, "ENCLAVE_ERRORS")),
    "the mover starting": (False, lambda home: streams(home, "ENCLAVE_ADVISORIES")),
    "the sampler starting": (False, lambda home: streams(home, "ENCLAVE_SAMPLES")),
}


def kill_broker_when(stack: EnclaveStack, checking: bool, moment: Callable[[Path], bool]) -> int:
    """SIGKILL the first nats-server child that serves (not a ``-t`` check) as soon as
    ``moment(home)`` holds; returns its PID."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert stack.proc.poll() is None, stack.log_path.read_text()[-3000:]
        for pid, cmdline in broker_children(stack.pid):
            if ("-t" in cmdline) == checking and moment(stack.home):
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.001)
    raise AssertionError("the moment to kill the broker at did not come")


def pausing_check(root: Path) -> tuple[Path, Path]:
    """A nats-server (for ``ENCLAVE_NATS_SERVER``) whose first configuration check stops itself
    (SIGSTOP) after writing its PID to a file, so the test can kill it mid-check however short a
    real check is; every later run is the real nats-server. Returns (the executable, the PID file)."""
    root.mkdir()
    binary, marker = root / "nats-server", root / "checking.pid"
    binary.write_text(f"""#!/bin/sh
if [ "$1" = "-t" ] && [ ! -e '{marker}' ]; then
  echo $$ > '{marker}.new' && mv '{marker}.new' '{marker}'
  kill -STOP $$
fi
exec '{nats_server_binary()}' "$@"
""")
    binary.chmod(0o700)
    return binary, marker


@pytest.mark.parametrize("moment", ["checking its configuration", *MOMENTS])
async def test_a_broker_killed_during_start_is_ridden_out(tmp_path, moment):
    binary, marker = pausing_check(tmp_path / "bin")
    checking = moment == "checking its configuration"
    stack = EnclaveStack.launch(tmp_path / "home", {"ENCLAVE_NATS_SERVER": str(binary)} if checking else {})
    try:
        if checking:
            await eventually(marker.exists, timeout=20)
            killed = int(marker.read_text())
            await eventually(lambda: "\tT (stopped)" in Path(f"/proc/{killed}/status").read_text())  # mid-check
            os.kill(killed, signal.SIGKILL)
        else:
            killed = kill_broker_when(stack, *MOMENTS[moment])
        stack.wait_ready()
        assert stack.broker_pid not in (None, killed)
        await sends_and_receives(make_queue(stack, "jobs"))
    finally:
        stack.stop()


async def test_a_broker_killed_while_a_restart_pushes_the_accounts_is_ridden_out(tmp_path):
    home = tmp_path / "home"
    first = EnclaveStack.start(home)
    try:
        for n in range(5):
            make_queue(first, f"queue-{n}")
    finally:
        assert first.stop() == 0
    second = EnclaveStack.launch(home)
    try:
        kill_broker_when(second, False, lambda home: True)  # its store is there: the kill lands as it loads
        second.wait_ready()
        with second.admin() as admin:
            assert sorted(q["name"] for q in admin.list_queues("default")) == [f"queue-{n}" for n in range(5)]
            creds = admin.credentials("default", "queue-3")
        await sends_and_receives(creds)
    finally:
        second.stop()


async def sends_and_receives(creds: dict) -> None:
    async with connect(creds) as queue:
        await queue.send({"n": 1})
        [message] = await queue.receive(wait=5)
        assert message.body == {"n": 1}
        await message.delete()
