"""nats-server's configuration in operator mode (a pure function of the settings and the keys).

The file names the operator, the system account, the full account resolver (the directory where
the broker keeps every account JWT pushed to it) and preloads the platform's three accounts;
every queue account arrives later as a pushed JWT, so the file never changes while the broker
runs and is never reloaded. ``default_sentinel`` sends every login without a JWT (a queue's
username and password) to the AUTH account's callout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..auth import jwt
from ..auth.keys import OperatorKeys
from .claims import auth_account, control_account, sentinel_user, system_account

MAX_MEMORY_STORE = 512 * 1024 * 1024  #: bytes
MAX_PAYLOAD = 2 * 1024 * 1024  #: bytes


@dataclass(frozen=True)
class OperatorConfig:
    host: str
    port: int
    store_dir: Path
    resolver_dir: Path
    log_file: Path
    sync: str  #: 'always' (fsync before every ack) or 'interval' (the server's 2-minute default)
    max_file_store: int = 0  #: bytes of the JetStream store; 0 = the server's own default
    max_memory_store: int = MAX_MEMORY_STORE


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


def build(config: OperatorConfig, keys: OperatorKeys) -> dict[str, Any]:
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
        "server_name": "enclave",
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


def render(config: OperatorConfig, keys: OperatorKeys) -> str:
    """The configuration file's text. It holds only public keys and signed claims, no seed."""
    return json.dumps(build(config, keys), indent=1, sort_keys=True) + "\n"
