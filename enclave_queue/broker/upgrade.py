"""Upgrade in place: a JetStream store written in configuration-file mode, read in operator mode.

nats-server keeps an account's streams under ``<store>/jetstream/<account name>/``. With accounts
in the configuration file the names were ``CONTROL`` and each queue's id; in operator mode an
account is named by its public key. Renaming each directory to its account's key, before the broker
starts, keeps every stream with its messages and its consumers' state (what is pending, in flight
and acknowledged): measured on 2.15.1. The renames are idempotent and each is atomic, so a start
that dies half-way finishes them at the next start.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..auth.keys import OperatorKeys
from ..names import CONTROL_ACCOUNT

log = logging.getLogger("enclave.broker")

#: a queue account's id (controller/accounts.py, ``new_account_id``)
QUEUE_ID = re.compile(r"q[a-z2-7]{16}")


def config_mode_accounts(store_dir: Path) -> dict[Path, str]:
    """The account directories a configuration-file broker left, each with the operator-mode
    account name it moves to."""
    root = store_dir / "jetstream"
    if not root.is_dir():
        return {}
    moves: dict[Path, str] = {}
    for path in root.iterdir():
        if not path.is_dir():
            continue
        if path.name == CONTROL_ACCOUNT:
            moves[path] = "control"
        elif QUEUE_ID.fullmatch(path.name):
            moves[path] = path.name
    return moves


def upgrade_store(store_dir: Path, keys: OperatorKeys) -> int:
    """Rename every configuration-file account directory under ``store_dir`` to its operator-mode
    account's public key; returns how many moved. Refuses to overwrite: a directory already there
    under the new name means the store holds both, which needs a person to look."""
    moved = 0
    for path, owner in sorted(config_mode_accounts(store_dir).items()):
        key = keys.platform_account("control") if owner == "control" else keys.queue_account(owner)
        target = path.with_name(keys.public(key))
        if target.exists():
            raise FileExistsError(f"{path} and {target} both exist; the store was upgraded before and then "
                                  "written in the old mode. Move one aside and start again.")
        path.rename(target)
        moved += 1
    if moved:
        fd = os.open(store_dir / "jetstream", os.O_RDONLY)
        try:
            os.fsync(fd)  # the renames outlive a crash
        finally:
            os.close(fd)
        log.info("upgraded the broker store to operator mode: %d account directories renamed", moved)
    return moved
