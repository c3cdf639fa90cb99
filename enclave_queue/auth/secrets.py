"""The master key and everything sealed under it.

The master key (32 random bytes) lives in ``ENCLAVE_HOME/master.key`` (mode 0600) or in
``ENCLAVE_MASTER_KEY``. From it, HKDF derives one subkey per purpose: the AES-GCM key that
seals queue passwords in the state store, the key that seals receipt handles, and the nkey
seeds of the control plane's own broker users (so those seeds are never written anywhere).
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import nkeys
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import EnclaveError, SpecError

#: bcrypt work factor for app-user passwords. The passwords are 43 random characters (256 bits),
#: so no work factor adds to their strength; a low one keeps reconnect storms cheap for the broker
#: (cost 10 costs ~70 ms of broker CPU per connect, cost 6 about 4 ms).
BCRYPT_COST = 6

NONCE_BYTES = 12

#: What every handle (a receipt) starts with: a letter. Base64url text may start with '-', and a
#: handle that did would read as an option on a command line (`enclave queue delete-message q -pX…`).
HANDLE_PREFIX = "r"


def check_master_key(text: str) -> bytes:
    """``ENCLAVE_MASTER_KEY``'s 32 bytes; SpecError (a setting's error) naming it otherwise."""
    try:
        key = _unb64(text.strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise SpecError("ENCLAVE_MASTER_KEY must be 32 bytes, base64-encoded (such as the output of "
                        "'head -c 32 /dev/urandom | base64').")
    return key


class SealError(EnclaveError):
    """A sealed value was tampered with, or sealed under another key or purpose."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class MasterKey:
    """Derives subkeys and seals/unseals values. Never logs or prints the key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the master key must be 32 bytes")
        self._key = key

    def __repr__(self) -> str:
        return "MasterKey(<hidden>)"

    @classmethod
    def load_or_create(cls, home: Path, env_value: str | None = None) -> MasterKey:
        """The key from ``env_value`` (base64), else from ``home/master.key``, created 0600 if missing."""
        if env_value:
            return cls(check_master_key(env_value))
        path = home / "master.key"
        if path.exists():
            try:
                return cls(_unb64(path.read_text(encoding="ascii").strip()))
            except (OSError, ValueError) as exc:  # a directory, bytes that are not text, not 32 bytes
                raise EnclaveError(f"{path} is not a master key (32 bytes, base64-encoded): "
                                   f"{getattr(exc, 'strerror', None) or exc}. Restore the data directory's "
                                   "master.key, or set ENCLAVE_MASTER_KEY to the key it was created with.") from None
        home.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        write_private(path, _b64(key) + "\n")
        return cls(key)

    def derive(self, purpose: str, length: int = 32) -> bytes:
        return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=purpose.encode()).derive(self._key)

    def seal(self, plaintext: bytes, purpose: str, context: str = "") -> str:
        """Encrypt and authenticate ``plaintext``; ``context`` binds it to one owner (AES-GCM AAD)."""
        nonce = os.urandom(NONCE_BYTES)
        box = AESGCM(self.derive(f"seal:{purpose}"))
        return _b64(nonce + box.encrypt(nonce, plaintext, context.encode()))

    def unseal(self, sealed: str, purpose: str, context: str = "") -> bytes:
        """The plaintext of ``seal``; raises SealError if it was altered or belongs elsewhere."""
        try:
            raw = _unb64(sealed)
            box = AESGCM(self.derive(f"seal:{purpose}"))
            return box.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], context.encode())
        except (InvalidTag, ValueError) as exc:
            raise SealError(f"The sealed {purpose} is not valid.") from exc

    def seal_handle(self, plaintext: bytes, purpose: str, context: str = "") -> str:
        """``seal`` as a handle given out to callers: it never starts with '-', so it passes as
        an argument on any command line."""
        return HANDLE_PREFIX + self.seal(plaintext, purpose, context)

    def unseal_handle(self, handle: str, purpose: str, context: str = "") -> bytes:
        """The plaintext of ``seal_handle``; raises SealError as ``unseal`` does."""
        if not handle.startswith(HANDLE_PREFIX):
            raise SealError(f"The sealed {purpose} is not valid.")
        return self.unseal(handle[len(HANDLE_PREFIX):], purpose, context)

    def nkey(self, role: str) -> NKey:
        """The control plane's nkey user for ``role`` ('system' or 'control'): derived, never stored."""
        seed = nkeys.encode_seed(self.derive(f"nkey:{role}"), nkeys.PREFIX_BYTE_USER)
        return NKey(seed=seed.decode(), public=nkeys.from_seed(seed).public_key.decode())


@dataclass(frozen=True)
class NKey:
    seed: str
    public: str

    def __repr__(self) -> str:
        return f"NKey(public={self.public!r})"


def generate_password() -> str:
    """A new app-user password: 43 URL-safe characters, 256 bits of randomness."""
    return secrets.token_urlsafe(32)


def hash_password(password: str, cost: int = BCRYPT_COST) -> str:
    """The bcrypt hash the broker config holds instead of the password."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically with mode 0600 from the first byte."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
