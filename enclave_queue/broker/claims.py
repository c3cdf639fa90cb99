"""The claims of every account and user the broker knows in operator mode (pure functions).

nats-server runs with an operator and the full account resolver: accounts are JWTs the control
plane signs and pushes to the broker (``$SYS.REQ.CLAIMS.UPDATE``), so a queue's account appears,
changes or goes without a configuration reload. Four accounts are the platform's own, preloaded
in the configuration file: ``SYS`` (the system account), ``CONTROL`` (the control plane's state
and its services), ``AUTH`` (where password logins land: its auth callout turns a queue's
username and password into a user of the queue's account) and the operator that signs them.

Each queue account's JWT is the same size whatever the number of queues: it imports its own
subjects from the control account's wildcard exports (error notes, rejects, desk requests, put
notes, refusals while the store is full) and maps its consumers' advisories onto the control
account's ``adv.<id>.…``. Nothing is imported into the control account per queue; the control
plane reaches a queue's JetStream API with a user of the queue's own account.
"""

from __future__ import annotations

from typing import Any

from ..auth.jwt import account_claims, user_claims
from ..auth.users import app_permissions
from ..names import (
    DESK_SUBJECT,
    ERRORS_SUBJECT,
    NOTES_SUBJECT,
    REFUSED_ROOT,
    REJECT_SUBJECT,
    SUBJECT_ROOT,
    desk_subject,
    errors_subject,
    notes_subject,
    refused_subject,
    reject_subject,
)

#: what a queue account may hold besides its bytes: one stream, its consumer and up to 9 lanes
QUEUE_ACCOUNT_STREAMS = 1
QUEUE_ACCOUNT_CONSUMERS = 10

#: no limit on connections, subscriptions or traffic (-1), imports or exports
UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
             "conn": -1, "leaf": -1}
NO_JETSTREAM = {"mem_storage": 0, "disk_storage": 0, "streams": 0, "consumer": 0}
ALL_JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}

#: the control account's subject a queue account's consumer advisories arrive on:
#: ``adv.<id>.<KIND>.<stream>.<consumer>``
ADVISORY_ROOT = "adv"
#: where the server publishes a queue account's consumer advisories, inside that account
ADVISORY_SOURCE = "$JS.EVENT.ADVISORY.CONSUMER.>"


def advisory_import(queue_id: str) -> str:
    return f"{ADVISORY_ROOT}.{queue_id}.>"


def system_account(system: str) -> dict[str, Any]:
    """The system account: the control plane's system user pushes claims and asks for stats."""
    return account_claims(system, "SYS", limits=UNLIMITED)


def control_account(control: str) -> dict[str, Any]:
    """The control account: JetStream for the control state, and one wildcard export per service
    the queue accounts import (each imports only the subjects that carry its own id)."""
    services = [errors_subject("*"), reject_subject("*"), desk_subject("*"), notes_subject("*"),
                refused_subject("*"), f"{ADVISORY_ROOT}.*.>"]
    return account_claims(control, "CONTROL", limits={**UNLIMITED, **ALL_JETSTREAM},
                          exports=[{"name": subject, "subject": subject, "type": "service"} for subject in services])


def auth_account(auth: str, callout_user: str) -> dict[str, Any]:
    """The account every password login starts in (through the sentinel): its auth callout, served
    by the control plane's ``callout_user``, may place a login in any account."""
    return account_claims(auth, "AUTH", limits={**UNLIMITED, **NO_JETSTREAM},
                          authorization={"auth_users": [callout_user], "allowed_accounts": ["*"]})


def sentinel_user(sentinel: str) -> dict[str, Any]:
    """The bearer user a login without a JWT is given, so the auth callout decides: it may do
    nothing itself."""
    return user_claims(sentinel, "sentinel", bearer_token=True, pub={"deny": [">"]}, sub={"deny": [">"]})


def queue_account(queue_id: str, account: str, control: str, *, max_bytes: int,
                  signing_keys: tuple[str, ...] = (), frozen: bool = False) -> dict[str, Any]:
    """A queue's account. ``max_bytes``: the JetStream storage it may use (reserved out of the
    store; a full queue refuses publishes with err_code 10002). ``signing_keys``: the keys the
    auth callout signs its app users with, one a live password (a key that leaves the list ends
    the connections it signed). ``frozen``: the store is short of space (broker/storage.py), so
    its queue subjects are mapped to REFUSED_ROOT and every put is answered by the control
    plane's refusal; reads, receives and acks go on."""
    imports = [
        (errors_subject(queue_id), f"{ERRORS_SUBJECT}.*"),
        (reject_subject(queue_id), REJECT_SUBJECT),
        (desk_subject(queue_id), f"{DESK_SUBJECT}.*"),
        (notes_subject(queue_id), NOTES_SUBJECT),
        (refused_subject(queue_id), f"{REFUSED_ROOT}.>"),
        (advisory_import(queue_id), ADVISORY_SOURCE),
    ]
    nats: dict[str, Any] = {
        "limits": {**UNLIMITED, "mem_storage": 0, "disk_storage": max_bytes, "streams": QUEUE_ACCOUNT_STREAMS,
                   "consumer": QUEUE_ACCOUNT_CONSUMERS},
        "imports": [{"name": local, "type": "service", "account": control, "subject": remote, "local_subject": local}
                    for remote, local in imports],
        "signing_keys": list(signing_keys),
    }
    if frozen:
        nats["mappings"] = {f"{SUBJECT_ROOT}.>": [{"subject": f"{REFUSED_ROOT}.>", "weight": 100}]}
    return account_claims(account, queue_id, **nats)


def restored_account(account: str) -> dict[str, Any]:
    """Stand-in claims for a queue account whose JWT the resolver directory lost while the broker
    was down (a file deleted by hand): the broker restores the account's streams at start, and
    asked for each such account's claims for 2 s, one after another, so that a few lost files made
    the start time out. JetStream on, nothing imported; the control plane gives the account its
    real claims as soon as it is up (every account's, at each start)."""
    return account_claims(account, account, limits={**UNLIMITED, **ALL_JETSTREAM})


def app_user(queue_id: str, user: str, account: str) -> dict[str, Any]:
    """The user the auth callout makes of a queue's password login: the app
    permissions of auth/users.py, plus REFUSED_ROOT (a put mapped there while the store is full
    is checked against the user's permissions after the mapping)."""
    permissions = app_permissions(queue_id)
    return user_claims(user, queue_id, issuer_account=account,
                       pub={"allow": [*permissions["publish"]["allow"], f"{REFUSED_ROOT}.>"]},
                       sub={"allow": permissions["subscribe"]["allow"]})


def control_user(user: str, name: str) -> dict[str, Any]:
    """A control-plane user (signed by the account it is in): no limits, every subject."""
    return user_claims(user, name)
