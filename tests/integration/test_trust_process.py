"""What the processes of ``enclave up`` may trust: the broker gets no secret in its environment;
one ``enclave up`` per data dir, so a second one refuses and touches nothing, a taken port is
named, and only a broker whose owner is provably dead is stopped."""

import base64
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from enclave_queue import server
from enclave_queue.client import connect
from enclave_queue.settings import EnclaveSettings
from enclave_queue.testing import EnclaveStack
from tests.helpers import eventually, make_queue

pytestmark = pytest.mark.slow

REFUSE_TIMEOUT = 20.0  #: seconds for a refused `enclave up` to exit (mostly Python's imports)


def run_up(home: Path, *args: str) -> tuple[int, str, float]:
    """Run ``enclave up`` on ``home`` until it exits; returns its exit code, stderr and run time.
    Killed by its PID if it is still running after REFUSE_TIMEOUT."""
    env = {**os.environ, "ENCLAVE_HOME": str(home)}
    env.pop("ENCLAVE_URL", None)
    env.pop("ENCLAVE_TOKEN", None)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "enclave_cli.main", "up", *args], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=REFUSE_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"enclave up on {home} was still running after {REFUSE_TIMEOUT:g} s")
    return proc.returncode, err.decode(), time.monotonic() - started


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for init to reap it has finished)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def processes_naming(path: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(path) in cmdline and alive(proc.info["pid"]):
            found.append(f"{proc.info['pid']} {cmdline}")
    return found


def the_broker_child(stack: EnclaveStack) -> psutil.Process:
    """The stack's nats-server, found as its control process's child (not a `-t` config check)."""
    brokers = [child for child in psutil.Process(stack.pid).children()
               if child.name() == "nats-server" and "-t" not in child.cmdline()]
    assert len(brokers) == 1, brokers
    return brokers[0]


def test_the_broker_inherits_no_secret_from_the_control_process(enclave_stack_factory):
    leaked = {
        "ENCLAVE_MASTER_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode(),
        "ENCLAVE_METRICS_TOKEN": "metrics-" + secrets.token_hex(16),
        "PAYMENTS_API_SECRET": "payments-" + secrets.token_hex(16),
        "GITHUB_TOKEN": "ghp_" + secrets.token_hex(16),
        "DB_PASSWORD": "db-" + secrets.token_hex(16),
    }
    stack = enclave_stack_factory(env=leaked)
    broker = the_broker_child(stack)
    assert broker.pid == stack.broker_pid
    environ = Path(f"/proc/{broker.pid}/environ").read_bytes()
    names = {entry.partition(b"=")[0].decode() for entry in environ.split(b"\0") if entry}
    for name, value in leaked.items():
        assert name not in names
        assert value.encode() not in environ, f"the value of {name} is in the broker's environment"
    assert not [name for name in names if name.startswith("ENCLAVE_")]
    assert "PATH" in names  # a minimal environment, not an empty one
    assert names <= {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "GOMEMLIMIT", "GOGC", "GOMAXPROCS",
                     "GODEBUG"} | {name for name in names if name.startswith("LC_")}
    # the stack really runs on these settings
    assert not (stack.home / "master.key").exists()
    metrics = httpx.get(stack.api_url + "/metrics", headers={"Authorization": f"Bearer {leaked['ENCLAVE_METRICS_TOKEN']}"})
    assert metrics.status_code == 200


async def test_a_second_enclave_up_on_the_same_data_dir_refuses_and_touches_nothing(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    creds = make_queue(first, "precious")
    async with connect(creds) as queue:
        await queue.send({"n": 1})
    watched = ["enclave.json", "enclave.lock", "admin-token", "master.key", "broker/nats-server.pid"]
    before = {name: (home / name).read_bytes() for name in watched}
    stamps = {name: (home / name).stat().st_mtime_ns for name in watched}
    top_level = sorted(p.name for p in home.iterdir())
    broker_pid = first.broker_pid

    # the same ports as the running stack, as a plain second `enclave up` would have
    api_port, broker_port = first.api_url.rsplit(":", 1)[1], first.broker_url.rsplit(":", 1)[1]
    code, err, took = run_up(home, "--api-port", api_port, "--broker-port", broker_port)

    assert code != 0
    assert err.strip().splitlines()[-1] == f"error: Enclave is already running on {home} at {first.api_url} (pid {first.pid})."
    assert "Traceback" not in err
    assert took < REFUSE_TIMEOUT
    assert first.proc.poll() is None
    assert httpx.get(first.api_url + "/healthz", timeout=5).status_code == 200
    assert first.refresh()["broker_pid"] == broker_pid and alive(broker_pid)
    assert {name: (home / name).read_bytes() for name in watched} == before
    assert {name: (home / name).stat().st_mtime_ns for name in watched} == stamps
    assert sorted(p.name for p in home.iterdir()) == top_level
    async with connect(creds) as queue:
        messages = await queue.receive(batch=10, wait=5)
        assert [m.body for m in messages] == [{"n": 1}]
        await queue.delete_many(messages)


async def test_a_second_enclave_up_refuses_even_with_the_lock_file_removed(enclave_stack_factory, tmp_path):
    """The lock file deleted under a running stack (a clean-up script): the second took a new one,
    stopped the first's broker and rewrote its configuration, and both were broken."""
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    creds = make_queue(first, "precious")
    broker_pid = first.broker_pid
    config = (home / "broker" / "nats.conf").read_bytes()
    (home / "enclave.lock").unlink()

    code, err, _ = run_up(home, "--api-port", "0", "--broker-port", "0")

    assert code != 0 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"error: Enclave is already running on {home} (pid {first.pid}), though "
                                            f"its lock file {home / 'enclave.lock'} was removed; stop it first.")
    assert first.refresh()["broker_pid"] == broker_pid and alive(broker_pid)
    assert (home / "broker" / "nats.conf").read_bytes() == config
    assert httpx.get(first.api_url + "/healthz", timeout=5).status_code == 200
    async with connect(creds) as queue:
        await queue.send("still served")
        assert [m.body for m in await queue.receive(wait=5)] == ["still served"]


def test_a_log_directory_that_is_a_file_is_named_at_start(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "logs").write_text("not a directory")
    code, err, _ = run_up(home, "--api-port", "0", "--broker-port", "0")
    assert code != 0 and "Traceback" not in err and "unexpected" not in err
    assert err.strip().splitlines()[-1] == (f"error: {home / 'logs'} must be a directory (the broker's logs go "
                                            "there); it is a file: move it away.")


def test_a_taken_port_is_named_and_nothing_is_left_running(enclave_stack_factory, tmp_path):
    first = enclave_stack_factory()
    api_port = int(first.api_url.rsplit(":", 1)[1])
    broker_port = int(first.broker_url.rsplit(":", 1)[1])
    for args, port, setting in ((("--api-port", str(api_port), "--broker-port", "0"), api_port, "ENCLAVE_API_PORT"),
                                (("--api-port", "0", "--broker-port", str(broker_port)), broker_port, "ENCLAVE_BROKER_PORT")):
        home = tmp_path / setting.lower()
        code, err, _ = run_up(home, *args)
        assert code != 0
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"error: port 127.0.0.1:{port} is already in use ({setting}); "), err
        assert "Traceback" not in err
        assert processes_naming(home) == []
        assert not (home / "broker" / "nats-server.pid").exists()
        assert not (home / "enclave.json").exists()
    assert httpx.get(first.api_url + "/healthz", timeout=5).status_code == 200


async def test_a_port_taken_after_the_check_is_named_and_the_started_broker_is_stopped(tmp_path, monkeypatch):
    """The race the early check can't see: the API port is taken once the broker runs."""
    home = tmp_path / "home"
    monkeypatch.setattr(server.runtime, "check_ports", lambda settings: None)  # as if taken just after the check
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = EnclaveSettings.from_env({"ENCLAVE_HOME": str(home), "ENCLAVE_API_PORT": str(port),
                                             "ENCLAVE_BROKER_PORT": "0"})
        with pytest.raises(server.PortInUse, match=rf"^port 127\.0\.0\.1:{port} is already in use \(ENCLAVE_API_PORT\); "):
            await server.serve(settings, announce=lambda line: None)
    assert (home / "admin-token").exists()  # it got as far as a running broker and the state store
    assert [c.pid for c in psutil.Process().children() if c.name() == "nats-server" and alive(c.pid)] == []
    assert processes_naming(home) == []
    assert not (home / "enclave.json").exists()
    lock = server.DataDirLock(home)
    lock.acquire()  # released
    lock.release()


async def test_a_broker_left_by_a_killed_stack_is_stopped_and_a_new_stack_comes_up(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    async with connect(make_queue(first, "survivor")) as queue:
        await queue.send({"n": 7})
    stale = first.broker_pid
    # stopped, the broker can't act on the SIGTERM its parent's death sends it: it outlives the
    # control process, as a broker busy shutting down (or one whose parent-death signal was lost) does
    os.kill(stale, signal.SIGSTOP)
    try:
        first.proc.kill()  # kill -9 the control process only (EnclaveStack.kill would reap the broker)
        first.proc.wait(10)
        assert alive(stale) and psutil.Process(stale).ppid() != first.pid

        second = enclave_stack_factory(home=home)

        await eventually(lambda: not alive(stale), timeout=10)
        assert second.broker_pid not in (None, stale)
        assert f"stopping a nats-server left running by an earlier process (pid {stale})" in second.log_path.read_text()
        with second.admin() as admin:
            creds = admin.credentials("default", "survivor")
        async with connect(creds) as queue:
            messages = await queue.receive(batch=10, wait=5)
            assert [m.body for m in messages] == [{"n": 7}]
            await queue.delete_many(messages)
    finally:
        if alive(stale):
            os.kill(stale, signal.SIGKILL)
            os.kill(stale, signal.SIGCONT)


def test_a_recorded_pid_that_is_not_this_data_dirs_broker_is_left_alone(enclave_stack_factory, nats_server, tmp_path):
    """No lock holder, but the PID file names another data dir's nats-server: not ours to stop."""
    home = tmp_path / "home"
    (home / "broker").mkdir(parents=True)
    (home / "broker" / "nats-server.pid").write_text(f"{nats_server.pid}\n")
    stack = enclave_stack_factory(home=home)
    assert nats_server.proc.poll() is None
    assert stack.broker_pid != nats_server.pid
    assert "left running by an earlier process" not in stack.log_path.read_text()
