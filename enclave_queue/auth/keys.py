"""The nkeys of operator mode: the operator, the platform's accounts and users, and each queue's
account and signing keys, all derived from the master key (so no seed is ever written anywhere).

A queue's account key is fixed by its id. Its signing keys are one a password version: the auth
callout signs the users of a password login with the key of the version that matched, so when a
rotation's grace period ends, dropping that key from the account's claims ends every connection
the old password made.
"""

from __future__ import annotations

import nkeys

from .jwt import new_key, public_key
from .secrets import MasterKey


class OperatorKeys:
    """Derives every key operator mode needs. Never logs or prints a seed."""

    def __init__(self, master: MasterKey) -> None:
        self._master = master
        #: queue id -> its account's public key: each derivation is an HKDF and an Ed25519 key pair,
        #: and the broker's subjects name accounts by key (a login, a JSZ read, a claims push)
        self._account_publics: dict[str, str] = {}

    def __repr__(self) -> str:
        return "OperatorKeys(<hidden>)"

    def _key(self, prefix: int, purpose: str) -> nkeys.KeyPair:
        return new_key(prefix, self._master.derive(f"operator-mode:{purpose}"))

    @property
    def operator(self) -> nkeys.KeyPair:
        return self._key(nkeys.PREFIX_BYTE_OPERATOR, "operator")

    def platform_account(self, role: str) -> nkeys.KeyPair:
        """The account of ``role``: 'system', 'control' or 'auth'."""
        return self._key(nkeys.PREFIX_BYTE_ACCOUNT, f"account:{role}")

    def platform_user(self, role: str) -> nkeys.KeyPair:
        """The control plane's user of ``role``: 'system', 'control', 'callout' or 'sentinel'."""
        return self._key(nkeys.PREFIX_BYTE_USER, f"user:{role}")

    def queue_account(self, queue_id: str) -> nkeys.KeyPair:
        return self._key(nkeys.PREFIX_BYTE_ACCOUNT, f"queue:{queue_id}")

    def queue_account_public(self, queue_id: str) -> str:
        """The public key that names a queue's account on the broker (remembered: not a secret)."""
        found = self._account_publics.get(queue_id)
        if found is None:
            found = self._account_publics[queue_id] = public_key(self.queue_account(queue_id))
        return found

    def queue_signer(self, queue_id: str, version: int) -> nkeys.KeyPair:
        """The signing key of a queue's password version ``version``."""
        return self._key(nkeys.PREFIX_BYTE_ACCOUNT, f"queue:{queue_id}:signer:{version}")

    def queue_control_user(self, queue_id: str) -> nkeys.KeyPair:
        """The control plane's own user in a queue's account (its JetStream API, puts, acks)."""
        return self._key(nkeys.PREFIX_BYTE_USER, f"queue:{queue_id}:control")

    def public(self, key: nkeys.KeyPair) -> str:
        return public_key(key)
