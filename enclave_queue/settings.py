"""Settings of the control process and its clients, read from ``ENCLAVE_*`` environment variables.

Server side (``enclave up``): where data lives, which ports to bind, how durable the broker is.
Client side (CLI, SDK admin calls): where the API is and which token to present.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from .errors import SpecError

SyncMode = Literal["always", "interval"]

DEFAULT_API_PORT = 7780
DEFAULT_BROKER_PORT = 4222
DEFAULT_INTERNAL_BROKER_URL = "nats://es-system-broker:4222"

#: file names inside ENCLAVE_HOME
ADMIN_TOKEN_FILE = "admin-token"
MASTER_KEY_FILE = "master.key"
RUNTIME_FILE = "enclave.json"  #: URLs and PID of the running `enclave up`, removed when it stops

MIN_METRICS_TOKEN = 16  #: characters; a metrics token is a secret too

#: share of the data dir's filesystem the broker's store may take unless ENCLAVE_MAX_FILE_STORE says
STORE_SHARE = 0.8
#: bytes; the control state's reservation on a store this small (20 MiB: broker/config.py
#: ``control_reserve``) fits with room for queues
MIN_FILE_STORE = 64 << 20
SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
              "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
MAX_SIZE = 1 << 50  #: bytes: 1024 TiB, past any disk this runs on (nats-server refuses a number past int64)
#: how a number is written in a setting or on the command line: ASCII digits, a minus sign, a
#: point (int() also takes '1_0', ' 5' and other scripts' digits, and float() 'nan' and '1e400')
WHOLE = re.compile(r"-?[0-9]+")
DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
SIZE_RULE = "a size in bytes, optionally with a unit (K, M, G, T: powers of 1024), such as 20G"


def parse_size(name: str, raw: str) -> int:
    """A size such as ``20G`` or ``512MiB`` in bytes; SpecError naming ``name`` otherwise."""
    text = raw.strip().lower()
    digits = text.rstrip("kmgtib")
    unit = text[len(digits):]
    if not WHOLE.fullmatch(digits) or digits.startswith("-") or unit not in SIZE_UNITS or int(digits) * SIZE_UNITS[unit] > MAX_SIZE:
        raise SpecError(f"{name} must be {SIZE_RULE}, at most 1024T (got {raw!r}).")
    return int(digits) * SIZE_UNITS[unit]


def default_file_store(home: Path) -> int:
    """STORE_SHARE of the size of the filesystem ``home`` is on (its total, not what is free now:
    queues reserve their max_bytes out of this, so it must not shrink as the disk fills)."""
    probe = home
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return max(int(shutil.disk_usage(probe).total * STORE_SHARE), MIN_FILE_STORE)


def _file_store(env: Mapping[str, str]) -> int:
    raw = env.get("ENCLAVE_MAX_FILE_STORE")
    if not raw:
        return 0
    size = parse_size("ENCLAVE_MAX_FILE_STORE", raw)
    if size < MIN_FILE_STORE:
        raise SpecError(f"ENCLAVE_MAX_FILE_STORE must be at least {MIN_FILE_STORE >> 20}MiB (got {raw!r}).")
    return size


#: bytes of memory the broker is held to by default (its Go runtime's GOMEMLIMIT)
DEFAULT_BROKER_MEMORY = 512 << 20
MIN_BROKER_MEMORY = 64 << 20


def _broker_memory(env: Mapping[str, str]) -> int:
    raw = env.get("ENCLAVE_BROKER_MEMORY")
    if not raw:
        return DEFAULT_BROKER_MEMORY
    size = parse_size("ENCLAVE_BROKER_MEMORY", raw)
    if size < MIN_BROKER_MEMORY:
        raise SpecError(f"ENCLAVE_BROKER_MEMORY must be at least {MIN_BROKER_MEMORY >> 20}MiB (got {raw!r}).")
    return size


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("ENCLAVE_HOME") or Path.home() / ".enclave").expanduser()


def _int(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    if not WHOLE.fullmatch(raw):
        raise SpecError(f"{name} must be an integer from {low} to {high} (got {raw!r}).")
    value = int(raw)
    if not low <= value <= high:
        raise SpecError(f"{name} must be an integer from {low} to {high} (got {value}).")
    return value


def _float(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    if not DECIMAL.fullmatch(raw):
        raise SpecError(f"{name} must be a number from {low} to {high} (got {raw!r}).")
    value = float(raw)
    if not low <= value <= high:
        raise SpecError(f"{name} must be a number from {low} to {high} (got {value}).")
    return value


#: a node's name: what the broker calls its server (unique in a cluster)
NODE_NAME_RULE = "1-32 letters, digits, '-' or '_'"
ROUTE_RULE = ("a comma-separated list of host:port (or nats-route://host:port) of the other nodes' cluster ports, "
              "each host a DNS name, an IPv4 address or a bracketed IPv6 address")
#: a DNS name (labels of letters, digits and inner hyphens), which an IPv4 address is written as too
HOST_NAME = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#: a host name or an IPv4 address; or [an IPv6 address]
ROUTE_HOST = re.compile(HOST_NAME + r"|\[[0-9A-Fa-f:.]+\]")


def check_node_name(name: str, source: str = "ENCLAVE_NODE_NAME") -> str:
    """``name`` if it is a node's name; SpecError naming ``source`` and the rule."""
    if not (1 <= len(name) <= 32 and all(c.isascii() and (c.isalnum() or c in "-_") for c in name)):
        raise SpecError(f"{source} must be {NODE_NAME_RULE} (got {name!r}).")
    return name


def _node_name(env: Mapping[str, str]) -> str:
    return check_node_name(env.get("ENCLAVE_NODE_NAME") or "enclave")


def parse_routes(raw: str, source: str = "ENCLAVE_ROUTES") -> tuple[str, ...]:
    """The other nodes' cluster addresses as ``host:port``; SpecError naming ``source`` and the rule."""
    routes = []
    for part in raw.split(","):
        text = part.strip().removeprefix("nats-route://")
        host, sep, port = text.rpartition(":")
        if not sep or not ROUTE_HOST.fullmatch(host) or len(host) > 253 or not port.isascii() or not port.isdigit() \
                or not 0 < int(port) < 65536:
            raise SpecError(f"{source} must be {ROUTE_RULE} (got {part.strip()!r}).")
        routes.append(f"{host}:{int(port)}")
    if len(set(routes)) != len(routes):
        raise SpecError(f"{source} names a node twice.")
    return tuple(routes)


def _metrics_token(env: Mapping[str, str]) -> str | None:
    token = env.get("ENCLAVE_METRICS_TOKEN") or None
    if token is not None and (len(token) < MIN_METRICS_TOKEN or any(c.isspace() for c in token)):
        raise SpecError(f"ENCLAVE_METRICS_TOKEN must be at least {MIN_METRICS_TOKEN} characters without spaces.")
    return token


@dataclass(frozen=True)
class EnclaveSettings:
    """Everything ``enclave up`` needs. Build with ``from_env`` and override with ``replace``."""

    home: Path
    api_host: str = "127.0.0.1"
    api_port: int = DEFAULT_API_PORT  #: 0 = any free port
    broker_host: str = "127.0.0.1"
    broker_port: int = DEFAULT_BROKER_PORT  #: 0 = any free port
    sync: SyncMode = "always"
    internal_broker_url: str = DEFAULT_INTERNAL_BROKER_URL
    master_key: str | None = field(default=None, repr=False)
    resync_seconds: float = 30.0  #: seconds between full reconciles (jittered ±20%)
    sweep_seconds: float = 15.0  #: seconds between dead-letter sweeps (for messages whose advisory never came)
    sample_seconds: float = 60.0  #: seconds between depth samples of every queue
    metrics_token: str | None = field(default=None, repr=False)  #: a bearer token good for /metrics only
    log_level: str = "info"
    #: bytes of disk the broker's JetStream store may hold: the control state's reservation plus
    #: every queue's max_bytes must fit (a create that does not is refused with StorageFull);
    #: 0 = STORE_SHARE of the data dir's filesystem (``file_store``)
    max_file_store: int = 0
    #: bytes of memory the broker aims to stay under (GOMEMLIMIT; its memory store gets a quarter)
    broker_memory: int = DEFAULT_BROKER_MEMORY
    node_name: str = "enclave"  #: the broker's server name: unique among a cluster's nodes
    cluster_port: int = 0  #: the port the broker's cluster routes listen on (0: not a cluster)
    routes: tuple[str, ...] = ()  #: the other nodes' cluster addresses, host:port

    @property
    def clustered(self) -> bool:
        return bool(self.cluster_port or self.routes)

    @property
    def nodes(self) -> int:
        """The nodes of the cluster this node is one of (1 alone)."""
        return 1 + len(self.routes) if self.clustered else 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> EnclaveSettings:
        env = os.environ if env is None else env
        routes = parse_routes(env["ENCLAVE_ROUTES"]) if env.get("ENCLAVE_ROUTES") else ()
        cluster_port = _int(env, "ENCLAVE_CLUSTER_PORT", 0, 0, 65535)
        # on a cluster, acknowledged means stored on a majority of the nodes, fsynced or not
        sync = env.get("ENCLAVE_SYNC") or ("interval" if routes or cluster_port else "always")
        if sync not in ("always", "interval"):
            raise SpecError(f"ENCLAVE_SYNC must be 'always' or 'interval' (got {sync!r}).")
        settings = cls(
            home=default_home(env),
            api_host=env.get("ENCLAVE_API_HOST") or "127.0.0.1",
            api_port=_int(env, "ENCLAVE_API_PORT", DEFAULT_API_PORT, 0, 65535),
            broker_host=env.get("ENCLAVE_BROKER_HOST") or "127.0.0.1",
            broker_port=_int(env, "ENCLAVE_BROKER_PORT", DEFAULT_BROKER_PORT, 0, 65535),
            sync=sync,  # type: ignore[arg-type]
            internal_broker_url=env.get("ENCLAVE_INTERNAL_BROKER_URL") or DEFAULT_INTERNAL_BROKER_URL,
            master_key=env.get("ENCLAVE_MASTER_KEY") or None,
            resync_seconds=_float(env, "ENCLAVE_RESYNC_SECONDS", 30.0, 0.2, 86400.0),
            sweep_seconds=_float(env, "ENCLAVE_SWEEP_SECONDS", 15.0, 0.2, 86400.0),
            sample_seconds=_float(env, "ENCLAVE_SAMPLE_SECONDS", 60.0, 0.2, 86400.0),
            metrics_token=_metrics_token(env),
            log_level=(env.get("ENCLAVE_LOG_LEVEL") or "info").lower(),
            max_file_store=_file_store(env),
            broker_memory=_broker_memory(env),
            node_name=_node_name(env),
            cluster_port=cluster_port,
            routes=routes,
        )
        return replace(settings, **overrides) if overrides else settings  # type: ignore[arg-type]

    @property
    def file_store(self) -> int:
        """``max_file_store``, or the default for the data dir's filesystem."""
        return self.max_file_store or default_file_store(self.home)

    @property
    def broker_dir(self) -> Path:
        return self.home / "broker"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"


@dataclass(frozen=True)
class ClientSettings:
    """Where the API is and which token to use: for the CLI and the SDK's admin half."""

    url: str
    token: str | None = field(default=None, repr=False)
    project: str = "default"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSettings:
        """``ENCLAVE_URL``, else the running server's URL from ``ENCLAVE_HOME``, else port 7780;
        ``ENCLAVE_TOKEN``, else the admin token file in ``ENCLAVE_HOME``, but only for the server
        of that home or ENCLAVE_URL: with no server running there, whatever listens on port 7780
        is not sent the home's admin token."""
        env = os.environ if env is None else env
        home = default_home(env)
        url = env.get("ENCLAVE_URL") or _running_api_url(home)
        token = env.get("ENCLAVE_TOKEN") or (_read_token(home / ADMIN_TOKEN_FILE) if url else None)
        url = url or f"http://127.0.0.1:{DEFAULT_API_PORT}"
        return cls(url=url.rstrip("/"), token=token, project=env.get("ENCLAVE_PROJECT") or "default")


def _running_api_url(home: Path) -> str | None:
    """The API URL of the ``enclave up`` running on ``home``, if its process is alive."""
    try:
        data = json.loads((home / RUNTIME_FILE).read_text())
        os.kill(int(data["pid"]), 0)
        return data["api_url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_token(path: Path) -> str | None:
    """The file's token, as text (bytes that are not UTF-8 as U+FFFD: the CLI then says the token is
    not one, rather than fail on decoding it)."""
    try:
        return path.read_bytes().decode("utf-8", "replace").strip() or None
    except OSError:
        return None
