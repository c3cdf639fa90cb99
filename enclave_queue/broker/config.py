"""Render nats-server's configuration from the accounts that should exist (a pure function).

Accounts: ``SYS`` (the system account; the control plane's reload requests), ``CONTROL``
(the control plane's own account: its KV state, and one import of each queue account's
JetStream API, queue subjects and ack subjects), and one account per queue, named by the
queue's id, holding the queue's stream and its one app user.

The output is JSON, which nats-server reads as configuration; ``sort_keys`` keeps it stable so
an unchanged set of accounts renders to the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..auth.users import app_permissions
from ..names import (
    ADVISORY_KINDS,
    ADVISORY_STREAM,
    CONTROL_ACCOUNT,
    DESK_SUBJECT,
    ERRORS_STREAM,
    ERRORS_SUBJECT,
    NOTES_STREAM,
    NOTES_SUBJECT,
    REFUSED_ROOT,
    REJECT_SUBJECT,
    SAMPLES_STREAM,
    SUBJECT_ROOT,
    SYSTEM_ACCOUNT,
    advisory_subject,
    consumer_advisories,
    desk_subject,
    errors_subject,
    jsapi_prefix,
    notes_subject,
    refused_subject,
    reject_subject,
    stream_name,
    username,
)
from ..spec import LIMITS, default_max_bytes

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
    component) it holds the full sizes."""

    def __init__(self) -> None:
        self._sizes = dict(FULL_CONTROL_BYTES)

    def size_for(self, max_file_store: int) -> None:
        self._sizes = control_stream_bytes(max_file_store)

    def __getitem__(self, name: str) -> int:
        return self._sizes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)


CONTROL_STREAM_BYTES = ControlStreamBytes()
#: JetStream limits of a queue account besides its max_file: its one stream (no memory streams)
#: and its consumers (the worker and the nine priority lanes)
QUEUE_ACCOUNT_STREAMS = 1
QUEUE_ACCOUNT_CONSUMERS = 10
#: bytes; above the largest max_message_bytes (1 MiB) plus headers, so an oversize message gets
#: JetStream's clear error (10054) instead of a protocol error that closes the connection
MAX_PAYLOAD = 2 * 1024 * 1024

#: how far a queue account is frozen: "off"; "ready" (its user may publish to REFUSED_ROOT, which it
#: imports from the control account); "frozen" (its queue subjects are also mapped there)
Refusal = Literal["off", "ready", "frozen"]


#: bytes an account waiting in the spare pool reserves: a queue with the default max_bytes claims it
#: as it is, with no reload
DEFAULT_ACCOUNT_BYTES = default_max_bytes(LIMITS["max_message_bytes"][1])


@dataclass(frozen=True)
class AccountEntry:
    """One queue account: its id, the bcrypt hash of its app user's password, and the bytes of
    JetStream storage it may use (its queue's max_bytes; JetStream reserves them)."""

    id: str
    password_hash: str = field(repr=False)
    max_bytes: int = DEFAULT_ACCOUNT_BYTES


@dataclass(frozen=True)
class BrokerConfig:
    host: str
    port: int
    store_dir: Path
    log_file: Path
    sync: str  #: 'always' (fsync before every ack) or 'interval' (the server's 2-minute default)
    system_nkey: str  #: public nkey of the control plane's system-account user
    control_nkey: str  #: public nkey of the control plane's control-account user
    accounts: tuple[AccountEntry, ...] = ()
    max_file_store: int = 0  #: bytes of the JetStream store; 0 = the server's own default (tests of the render)
    #: the store is short of space (broker/storage.py): "frozen", every queue's puts go to the control
    #: plane, which refuses them, instead of to its stream; "ready", the step before and after it
    #: (``queue_account``)
    refusal: Refusal = "off"


def queue_account(entry: AccountEntry, refusal: Refusal = "off") -> dict[str, Any]:
    """One queue account. ``refusal`` "frozen": its queue subjects are mapped to REFUSED_ROOT, imported
    from the control account, so every put (an app's, or the control plane's through ``send.<id>``)
    is answered by the control plane's refusal and none reaches the stream; reads, receives and
    acks use other subjects and go on. nats-server checks a publish against the user's permissions
    after the mapping, so the user is granted REFUSED_ROOT too, one reload before the mapping comes
    ("ready") and one after it goes: a reload applies mappings and permissions in no set order, and
    a put that met the mapping without the permission would be a permissions violation, which ends
    the client's operations. (A mapping met before its import finds no responder, which clients
    retry as during any reload.)"""
    stream = stream_name(entry.id)
    only_control = [CONTROL_ACCOUNT]
    account = {
        "imports": [
            {"service": {"account": CONTROL_ACCOUNT, "subject": errors_subject(entry.id)},
             "to": f"{ERRORS_SUBJECT}.*"},
            {"service": {"account": CONTROL_ACCOUNT, "subject": reject_subject(entry.id)},
             "to": REJECT_SUBJECT},
            {"service": {"account": CONTROL_ACCOUNT, "subject": desk_subject(entry.id)},
             "to": f"{DESK_SUBJECT}.*"},
            {"service": {"account": CONTROL_ACCOUNT, "subject": notes_subject(entry.id)},
             "to": NOTES_SUBJECT},
        ],
        # a queue's app cannot fill the disk the control state lives on: its account may store
        # max_bytes (reserved out of the store; a full queue refuses publishes with err_code 10002)
        "jetstream": {"max_file": entry.max_bytes, "max_mem": 0, "max_streams": QUEUE_ACCOUNT_STREAMS,
                      "max_consumers": QUEUE_ACCOUNT_CONSUMERS},
        "users": [
            {
                "user": username(entry.id),
                "password": entry.password_hash,
                "permissions": app_permissions(entry.id),
            }
        ],
        "exports": [
            {"service": "$JS.API.>", "response_type": "stream", "accounts": only_control},
            {"service": f"{SUBJECT_ROOT}.>", "accounts": only_control},
            {"service": f"$JS.ACK.{stream}.*.>", "accounts": only_control},
            {"stream": consumer_advisories(stream), "accounts": only_control},
        ],
    }
    if refusal != "off":
        account["imports"].append({"service": {"account": CONTROL_ACCOUNT, "subject": refused_subject(entry.id)},
                                   "to": f"{REFUSED_ROOT}.>"})
        account["users"][0]["permissions"]["publish"]["allow"].append(f"{REFUSED_ROOT}.>")
    if refusal == "frozen":
        account["mappings"] = {f"{SUBJECT_ROOT}.>": f"{REFUSED_ROOT}.>"}
    return account


def control_imports(entry: AccountEntry) -> list[dict[str, Any]]:
    stream = stream_name(entry.id)
    return [
        {"service": {"account": entry.id, "subject": "$JS.API.>"}, "to": f"{jsapi_prefix(entry.id)}.>"},
        {"service": {"account": entry.id, "subject": f"{SUBJECT_ROOT}.>"}, "to": f"send.{entry.id}.>"},
        {"service": {"account": entry.id, "subject": f"$JS.ACK.{stream}.*.>"}},
        {"stream": {"account": entry.id, "subject": consumer_advisories(stream)},
         "to": advisory_subject(entry.id, ADVISORY_KINDS)},
    ]


def control_exports(refusal: Refusal = "off") -> list[dict[str, Any]]:
    """Error notes, reject requests, desk requests and put notes (and, while frozen, the refusal of
    puts). Public exports (no account list, which would name every queue twice in each reload):
    only this configuration declares imports, and each queue account imports just its own id's subjects."""
    exports = [{"service": "errors.*.*"}, {"service": "deadletter.*"}, {"service": "desk.*.*"}, {"service": "notes.*"}]
    if refusal != "off":
        exports.append({"service": f"{REFUSED_ROOT}.*.>"})
    return exports


def build(config: BrokerConfig) -> dict[str, Any]:
    """The configuration as a dict (what ``render`` serialises)."""
    accounts: dict[str, Any] = {
        SYSTEM_ACCOUNT: {"users": [{"nkey": config.system_nkey}]},
        CONTROL_ACCOUNT: {
            "jetstream": "enabled",
            "users": [{"nkey": config.control_nkey}],
            "imports": [imp for entry in config.accounts for imp in control_imports(entry)],
            "exports": control_exports(config.refusal),
        },
    }
    for entry in config.accounts:
        accounts[entry.id] = queue_account(entry, config.refusal)
    jetstream: dict[str, Any] = {"store_dir": str(config.store_dir), "max_memory_store": MAX_MEMORY_STORE}
    if config.max_file_store:
        jetstream["max_file_store"] = config.max_file_store
    if config.sync == "always":
        jetstream["sync_interval"] = "always"
    return {
        "server_name": "enclave",
        "listen": f"{config.host}:{config.port}",
        "max_payload": MAX_PAYLOAD,
        "jetstream": jetstream,
        "system_account": SYSTEM_ACCOUNT,
        "accounts": accounts,
        "log_file": str(config.log_file),
        "logtime": True,
    }


def render(config: BrokerConfig) -> str:
    """The configuration file's text."""
    return json.dumps(build(config), indent=1, sort_keys=True) + "\n"


def account_ids(accounts: Iterable[AccountEntry]) -> frozenset[str]:
    return frozenset(entry.id for entry in accounts)
