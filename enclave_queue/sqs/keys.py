"""Access keys for the SQS endpoint: an access key id and a secret access key, issued by Enclave
(``enclave access-key create``), scoped to one project or to all of them.

Signature Version 4 is an HMAC keyed by the secret, so the server must be able to read the secret
back: it is sealed under the master key (AES-GCM, bound to the key's id), as queue passwords are,
and never stored or logged in the clear. The secret is shown once, when the key is created.
Revoking deletes the record; the endpoint's cache of opened secrets forgets it at once, and any
other process's copy within CACHE_SECONDS.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Optional

from ..auth.secrets import MasterKey, SealError
from ..errors import NotFound, field_error
from ..spec import PROJECT_PATTERN, PROJECT_RULE
from ..state.kv import Store
from ..state.records import AccessKeyRecord

KEY_PREFIX = "EQAK"  #: access key ids start with it (AWS's start with AKIA), so scanners can tell them
ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
ID_RANDOM = 16  #: random characters after the prefix: 20 in all, the length of AWS's ids (80 bits)
SECRET_BYTES = 30  #: 40 characters of URL-safe base64, the length of AWS's secrets (240 bits)
SEAL_PURPOSE = "sqs-access-key"
CACHE_SECONDS = 5.0  #: how long an opened key is trusted before it is read again
MAX_NAME = 64
NAME_RULE = f"a text of at most {MAX_NAME} printable characters"
ID_PATTERN = f"{KEY_PREFIX}[A-Z2-7]{{{ID_RANDOM}}}"


class AccessKey:
    """An access key as the endpoint uses it: its id, project scope and secret (never repr'd)."""

    __slots__ = ("id", "project", "secret")

    def __init__(self, key_id: str, project: Optional[str], secret: str) -> None:
        self.id = key_id
        self.project = project
        self.secret = secret

    def __repr__(self) -> str:
        return f"AccessKey(id={self.id!r}, project={self.project!r})"


def view(record: AccessKeyRecord) -> dict[str, Any]:
    """A key as the API lists it (never with its secret)."""
    return {"access_key_id": record.id, "project": record.project, "name": record.name,
            "created_at": record.created_at.isoformat(timespec="seconds")}


class AccessKeys:
    """Create, list, revoke, and open (for a signature check) the SQS access keys."""

    def __init__(self, store: Store, master: MasterKey) -> None:
        self.store = store
        self.master = master
        self._cache: dict[str, tuple[float, Optional[AccessKey]]] = {}

    async def create(self, project: Optional[str] = None, name: str = "") -> dict[str, Any]:
        """A new key (scoped to ``project``, or to every project): its id and, this once, its secret.
        SpecError naming the field for a bad project or name."""
        if project is not None and not (isinstance(project, str) and PROJECT_PATTERN.fullmatch(project)):
            raise field_error("project", f"must be {PROJECT_RULE} (got {project!r})")
        if not isinstance(name, str) or len(name) > MAX_NAME or not name.isprintable():
            raise field_error("name", f"must be {NAME_RULE}")
        key_id = KEY_PREFIX + "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_RANDOM))
        secret = secrets.token_urlsafe(SECRET_BYTES)
        record = AccessKeyRecord(id=key_id, sealed_secret=self.master.seal(secret.encode(), SEAL_PURPOSE, key_id),
                                 project=project, name=name)
        await self.store.access_keys.create(key_id, record)
        self._cache.pop(key_id, None)
        return {**view(record), "secret_access_key": secret}

    async def list(self) -> list[dict[str, Any]]:
        """Every key, oldest first, without secrets."""
        records = [record for _, record, _ in await self.store.access_keys.items()]
        return [view(r) for r in sorted(records, key=lambda r: (r.created_at, r.id))]

    async def revoke(self, key_id: str) -> None:
        """Delete a key; NotFound if there is none. Requests signed with it are refused from now on."""
        if await self.store.access_keys.get(key_id) is None:
            raise NotFound(f"Access key '{key_id}' does not exist.")
        await self.store.access_keys.delete(key_id)
        self._cache.pop(key_id, None)

    async def open(self, key_id: str) -> Optional[AccessKey]:
        """The key with this id and its secret, or None if there is none (or its seal does not open)."""
        cached = self._cache.get(key_id)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        key = None
        found = await self.store.access_keys.get(key_id) if _well_formed(key_id) else None
        if found is not None:
            record = found[0]
            try:
                secret = self.master.unseal(record.sealed_secret, SEAL_PURPOSE, record.id).decode()
            except SealError:
                secret = None
            key = AccessKey(record.id, record.project, secret) if secret else None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key_id] = (time.monotonic(), key)
        return key


def _well_formed(key_id: str) -> bool:
    return len(key_id) == len(KEY_PREFIX) + ID_RANDOM and key_id.startswith(KEY_PREFIX) and \
        all(c in ID_ALPHABET for c in key_id[len(KEY_PREFIX):])
