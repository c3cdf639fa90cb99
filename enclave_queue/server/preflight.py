"""What ``enclave up`` makes sure of before it starts anything: the data dir's lock (one ``enclave
up`` per data dir), room on its filesystem, and free ports, each refused with a sentence naming
the data dir, the port or the setting.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Optional

from ..broker.storage import START_ROOM, free_bytes
from ..errors import Conflict, EnclaveError, StorageFull
from ..settings import RUNTIME_FILE, EnclaveSettings

LOCK_FILE = "enclave.lock"  #: in ENCLAVE_HOME: flock-ed by the running `enclave up`, holds its PID
_MIB = 1 << 20


class AlreadyRunning(Conflict):
    """Another ``enclave up`` holds the data dir's lock."""


class PortInUse(Conflict):
    """A port ``enclave up`` is to listen on is taken."""


class DataDirLock:
    """An exclusive ``flock`` on ``ENCLAVE_HOME/enclave.lock``, held for the life of the process;
    the OS drops it when the process dies, even by kill -9. While it is free, nobody runs on the
    data dir: anything recorded there as running (a broker's PID) was left by a dead process."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / LOCK_FILE
        self._fd: Optional[int] = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise AlreadyRunning naming the holder. Writes nothing unless taken."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise EnclaveError(f"cannot open the data dir's lock file {self.path}: {exc.strerror or exc}.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(self._holder()) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def _holder(self) -> str:
        """The sentence for a lock held by another process: its PID and API URL, when known."""
        try:
            pid: Optional[int] = int(self.path.read_text())
        except (OSError, ValueError):
            pid = None  # the holder has not written its PID yet
        url = None
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            data = json.loads((self.home / RUNTIME_FILE).read_text())
            if pid is None or data.get("pid") == pid:
                url, pid = data.get("api_url"), data.get("pid")
        if pid is None:
            return f"Enclave is already running on {self.home}."
        if not url:
            return f"Enclave is already running on {self.home} (pid {pid}); it is still starting."
        return f"Enclave is already running on {self.home} at {url} (pid {pid})."


def bind(sock: socket.socket, host: str, port: int, setting: str, option: str) -> None:
    """``sock.bind((host, port))``, with an error naming the port and the setting if it fails."""
    try:
        sock.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {host}:{port} is already in use ({setting}); stop what listens there, or "
                            f"choose another port with {setting} or {option} (0 = any free port).") from None
        raise EnclaveError(f"cannot listen on {host}:{port} ({setting}): {exc.strerror or exc}.") from None


def no_room(home: Path) -> StorageFull:
    """The error for a data dir whose filesystem has too little room to start on."""
    try:
        free = f"{free_bytes(home) / _MIB:.1f} MiB"
    except OSError:
        free = "too little space"
    return StorageFull(
        f"the data dir's filesystem has {free} free; Enclave needs at least {START_ROOM // _MIB} MiB to start "
        f"(its configuration, logs and first records, and a reserve for writing its configuration when the disk "
        f"fills). Free some space on the filesystem of {home}, or choose another data dir (ENCLAVE_HOME or --data-dir).")


def check_room(home: Path) -> None:
    """Raise StorageFull (exit 9) if the data dir's filesystem has less than START_ROOM free."""
    if free_bytes(home) < START_ROOM:
        raise no_room(home)


def check_ports(settings: EnclaveSettings) -> None:
    """Raise PortInUse if a port to listen on is taken now, before anything is started (the bind
    itself, later, says the same if it was taken in between)."""
    for host, port, setting, option in ((settings.api_host, settings.api_port, "ENCLAVE_API_PORT", "--api-port"),
                                        (settings.broker_host, settings.broker_port, "ENCLAVE_BROKER_PORT", "--broker-port")):
        if port:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the listeners do
                bind(probe, host, port, setting, option)
