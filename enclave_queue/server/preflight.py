"""What ``enclave up`` makes sure of before it starts anything: settings that cannot work
(``check_before_start``, called by cli/server.py before even the data dir is made), the data
dir's lock (one ``enclave up`` per data dir), room on its filesystem, and free ports, each refused
with a sentence naming the data dir, the port or the setting.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
from pathlib import Path
from typing import Optional

from ..auth.secrets import check_master_key
from ..broker.storage import START_ROOM, free_bytes
from ..errors import Conflict, EnclaveError, SpecError, StorageFull
from ..settings import ADMIN_TOKEN_FILE, HOST_NAME, MASTER_KEY_FILE, RUNTIME_FILE, EnclaveSettings
from ..spec import shown
from ..web.proxies import TrustedProxies

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
        if (holder := self._unlinked_holder()) is not None:
            os.close(fd)
            raise AlreadyRunning(f"Enclave is already running on {self.home} (pid {holder}), though its lock file "
                                 f"{self.path} was removed; stop it first.")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def _unlinked_holder(self) -> Optional[int]:
        """The running ``enclave up`` whose lock file was deleted under it (a clean-up script, a hand):
        the file this process just locked is a new one, and two would run on one data dir (the second
        stopped the first's broker and rewrote its configuration). Linux: the process the runtime
        file names still holds the lock's path open, shown as deleted."""
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            pid = int(json.loads((self.home / RUNTIME_FILE).read_text()).get("pid"))
            if pid != os.getpid():
                fds = Path(f"/proc/{pid}/fd")
                for fd in fds.iterdir():
                    with contextlib.suppress(OSError):
                        if os.readlink(fd).removesuffix(" (deleted)") == os.path.realpath(self.path):
                            return pid
        return None

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


#: a host to listen on: an IPv4 address or a DNS name (the broker's and the API's listeners take no IPv6 here)
HOST = re.compile(HOST_NAME)


def check_before_start(settings: EnclaveSettings, log_levels: tuple[str, ...]) -> None:
    """What the settings can be refused for before anything starts (exit 2): each error names the
    setting and its rule, where the same mistake would otherwise surface from the broker, the HTTP
    server or the console once the broker is up and the admin token written."""
    if settings.log_level not in log_levels:  # uvicorn takes these five (Python's logging takes more)
        raise SpecError(f"ENCLAVE_LOG_LEVEL must be one of {', '.join(log_levels)} (got {shown(settings.log_level)}).")
    for name, host in (("ENCLAVE_API_HOST", settings.api_host), ("ENCLAVE_BROKER_HOST", settings.broker_host)):
        octets = host.split(".")
        if not HOST.fullmatch(host) or (len(octets) == 4 and all(o.isdigit() for o in octets)
                                        and any(int(o) > 255 for o in octets)):
            raise SpecError(f"{name} must be an IPv4 address or a host name such as 127.0.0.1 (got {shown(host)}).")
    if settings.api_port and settings.api_port == settings.broker_port:
        raise SpecError(f"ENCLAVE_API_PORT and ENCLAVE_BROKER_PORT must differ (both {settings.api_port}).")
    if settings.cluster_port and not settings.routes:
        raise SpecError("ENCLAVE_CLUSTER_PORT (--cluster-port) needs ENCLAVE_ROUTES (--routes): the other nodes' "
                        "cluster ports; a cluster node cannot start alone.")
    if settings.cluster_port and settings.cluster_port in (settings.api_port, settings.broker_port):
        raise SpecError(f"ENCLAVE_CLUSTER_PORT must differ from the API and broker ports (got {settings.cluster_port}).")
    TrustedProxies.from_env()  # SpecError naming ENCLAVE_TRUSTED_PROXIES
    for name in (ADMIN_TOKEN_FILE, MASTER_KEY_FILE):
        path = settings.home / name
        if path.exists() and not path.is_file():
            raise SpecError(f"{path} must be a file (the data dir's {name}); move what is there away.")
    if settings.master_key is not None:
        check_master_key(settings.master_key)
