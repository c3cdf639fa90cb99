"""nats-server's configuration: the operator-mode file and the sizes of the control state's
streams (pure functions).

The file names the operator, the system account and the full account resolver (the directory
where the broker keeps every account JWT pushed to it), and preloads the platform's three
accounts (broker/claims.py); every queue account arrives later as a pushed JWT, so the file
never changes while the broker runs and is never reloaded. ``default_sentinel`` sends every
login without a JWT (a queue's username and password) to the AUTH account's auth callout
(controller/callout.py). The file holds public keys and signed claims only, no seed.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..auth import jwt
from ..auth.keys import OperatorKeys
from ..auth.secrets import MasterKey
from ..names import ADVISORY_STREAM, ERRORS_STREAM, NOTES_STREAM, SAMPLES_STREAM
from ..spec import LIMITS, default_max_bytes
from .claims import auth_account, control_account, sentinel_user, system_account

MAX_MEMORY_STORE = 512 * 1024 * 1024  #: bytes

#: bytes each control-account stream may hold (its max_bytes, which JetStream reserves: no queue can
#: take that room) on a store of FULL_CONTROL_STORE or more. The KV buckets hold little (a record
#: a queue) and get KV_ROOM of the reservation besides. A smaller store gives each less
#: (``control_stream_bytes``), at least MIN_CONTROL_BYTES
FULL_CONTROL_BYTES = {
    ADVISORY_STREAM: 16 << 20,
    ERRORS_STREAM: 64 << 20,
    NOTES_STREAM: 64 << 20,
    SAMPLES_STREAM: 256 << 20,
}
KV_ROOM = 64 << 20  #: bytes, on a store of FULL_CONTROL_STORE or more
FULL_CONTROL_STORE = 1 << 30  #: bytes of store from which the control state has its full sizes (464 MiB)
MIN_CONTROL_BYTES = 4 << 20  #: bytes: the least each control stream (and the KV room) is given
_MIB = 1 << 20


def _share(full: int, max_file_store: int) -> int:
    """``full`` on a store of ``max_file_store`` bytes: itself from FULL_CONTROL_STORE up (or for 0,
    the server's default store); below, ``full`` × (store / FULL_CONTROL_STORE)², in whole MiB and
    at least MIN_CONTROL_BYTES. Squared, so that a small store keeps most of itself for queues
    (a quarter of 1 GiB gives the control state a sixteenth of its full sizes) while the sizes
    still grow smoothly into the full ones."""
    if not max_file_store or max_file_store >= FULL_CONTROL_STORE:
        return full
    scaled = full * max_file_store // FULL_CONTROL_STORE * max_file_store // FULL_CONTROL_STORE
    return max(MIN_CONTROL_BYTES, scaled // _MIB * _MIB)


def control_stream_bytes(max_file_store: int) -> dict[str, int]:
    """Each control-account stream's max_bytes on a store of ``max_file_store`` bytes: advisories
    16 MiB, error notes 64, put notes 64 and depth samples 256 from 1 GiB up; 4, 4, 4 and 6 MiB
    on a 160 MiB store (``_share``)."""
    return {name: _share(full, max_file_store) for name, full in FULL_CONTROL_BYTES.items()}


def control_reserve(max_file_store: int) -> int:
    """Bytes of a store of ``max_file_store`` kept for the control state, its streams and the KV room:
    464 MiB from 1 GiB up, 22 MiB of a 160 MiB store. Queues share what is left."""
    return sum(control_stream_bytes(max_file_store).values()) + _share(KV_ROOM, max_file_store)


class ControlStreamBytes(Mapping[str, int]):
    """``CONTROL_STREAM_BYTES[name]``: the max_bytes of a control-account stream for the store this
    process runs, as the streams' owners (controller/mover.py, controller/errornotes.py,
    desk/deadlines.py, controller/sampler.py) read it when they create them. ``server.Runtime``
    sizes it for its store (``size_for``) before it starts them; until then (and in tests of one
    component) it holds the full sizes. ``replicas``: how many nodes keep each control stream and
    bucket (``control_replicas``; ``ensure_stream`` and the state store give it to the broker)."""

    def __init__(self) -> None:
        self._sizes = dict(FULL_CONTROL_BYTES)
        self.replicas = 1

    def size_for(self, max_file_store: int, replicas: int = 1) -> None:
        self._sizes = control_stream_bytes(max_file_store)
        self.replicas = replicas

    def __getitem__(self, name: str) -> int:
        return self._sizes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)


CONTROL_STREAM_BYTES = ControlStreamBytes()


def control_replicas(nodes: int) -> int:
    """Replicas of the control state on a cluster of ``nodes``: 3 from three nodes on (a majority
    survives one lost), else 1 (two replicas stop with either node)."""
    return 3 if nodes >= 3 else 1

#: bytes; above the largest max_message_bytes (1 MiB) plus headers, so an oversize message gets
#: JetStream's clear error (10054) instead of a protocol error that closes the connection
MAX_PAYLOAD = 2 * 1024 * 1024

#: bytes a queue account reserves when its queue does not say (the default max_bytes of the
#: largest max_message_bytes)
DEFAULT_ACCOUNT_BYTES = default_max_bytes(LIMITS["max_message_bytes"][1])


@dataclass(frozen=True)
class BrokerConfig:
    host: str
    port: int
    store_dir: Path
    log_file: Path
    sync: str  #: 'always' (fsync before every ack) or 'interval' (the server's 2-minute default)
    max_file_store: int = 0  #: bytes of the JetStream store; 0 = the server's own default (tests of the render)
    max_memory_store: int = MAX_MEMORY_STORE
    server_name: str = "enclave"  #: unique among a cluster's nodes
    cluster_port: int = 0  #: where this node's cluster routes listen (0: a single node)
    routes: tuple[str, ...] = ()  #: the other nodes' cluster addresses (host:port)

    @property
    def resolver_dir(self) -> Path:
        """Where the broker keeps the account JWTs pushed to it."""
        return self.store_dir / "accounts"


def platform_jwts(keys: OperatorKeys) -> dict[str, str]:
    """The signed JWTs of the operator-signed platform accounts, by public key."""
    operator = keys.operator
    system, control, auth = (keys.public(keys.platform_account(role)) for role in ("system", "control", "auth"))
    callout = keys.public(keys.platform_user("callout"))
    return {
        system: jwt.encode(system_account(system), operator),
        control: jwt.encode(control_account(control), operator),
        auth: jwt.encode(auth_account(auth, callout), operator),
    }


def build(config: BrokerConfig, keys: OperatorKeys) -> dict[str, Any]:
    """The configuration as a dict (what ``render`` serialises)."""
    operator = keys.operator
    system = keys.public(keys.platform_account("system"))
    jetstream: dict[str, Any] = {"store_dir": str(config.store_dir), "max_memory_store": config.max_memory_store}
    if config.max_file_store:
        jetstream["max_file_store"] = config.max_file_store
    if config.sync == "always":
        jetstream["sync_interval"] = "always"
    sentinel = jwt.encode(sentinel_user(keys.public(keys.platform_user("sentinel"))), keys.platform_account("auth"))
    return {
        "server_name": config.server_name,
        "listen": f"{config.host}:{config.port}",
        "max_payload": MAX_PAYLOAD,
        "jetstream": jetstream,
        "operator": jwt.encode(jwt.operator_claims(operator, system, "enclave"), operator),
        "system_account": system,
        "resolver": {"type": "full", "dir": str(config.resolver_dir), "allow_delete": True, "interval": "2m",
                     "timeout": "2s"},
        "resolver_preload": platform_jwts(keys),
        "default_sentinel": sentinel,
        "log_file": str(config.log_file),
        "logtime": True,
    }


#: the environment variables the broker reads its cluster's secrets from (``route_env``), so that
#: none is written into its configuration file: the routes' password, and each route's URL with it
ROUTE_PASSWORD_VAR = "ENCLAVE_ROUTE_PASSWORD"
ROUTE_VAR = "ENCLAVE_ROUTE_{}"
ROUTE_USER = "route"
CLUSTER_NAME = "enclave"


def route_password(master: MasterKey) -> str:
    """The password every node's routes log in with, the same on every node of a cluster (they
    share the master key): derived from it, never stored."""
    return base64.urlsafe_b64encode(master.derive("cluster-routes", 24)).decode()


def route_env(config: BrokerConfig, password: str) -> dict[str, str]:
    """The variables the configuration's cluster block names (none for a single node)."""
    if not config.cluster_port:
        return {}
    return {ROUTE_PASSWORD_VAR: _quoted(password),
            **{ROUTE_VAR.format(i): _quoted(f"nats-route://{ROUTE_USER}:{password}@{route}")
               for i, route in enumerate(config.routes)}}


def _quoted(value: str) -> str:
    """``value`` as a quoted string: nats-server parses a variable's value as configuration text,
    where a bare value such as ``-Xb…`` or ``2024-x…`` is a malformed number or date and refused."""
    return json.dumps(value)


def _variable(name: str) -> str:
    return f"\x00{name}\x00"  # written as a bare $NAME by ``render``


def render(config: BrokerConfig, keys: OperatorKeys) -> str:
    """The configuration file's text. A cluster's secrets are variable references (``$NAME``,
    which nats-server reads from its environment: ``route_env``)."""
    built = build(config, keys)
    if config.cluster_port:
        built["cluster"] = {
            "name": CLUSTER_NAME, "listen": f"{config.host}:{config.cluster_port}",
            "authorization": {"user": ROUTE_USER, "password": _variable(ROUTE_PASSWORD_VAR), "timeout": 2},
            "routes": [_variable(ROUTE_VAR.format(i)) for i in range(len(config.routes))],
        }
    # as UTF-8, not \u escapes: nats-server's parser refuses \u (a data dir under /home/zoë)
    text = json.dumps(built, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return re.sub(r'"\\u0000(\w+)\\u0000"', r"$\1", text)
