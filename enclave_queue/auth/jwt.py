"""NATS JWTs (version 2): the signed claims that carry operator, account and user identities to
nats-server in operator mode, and the auth-callout request and response (pure functions).

A token is ``<header>.<claims>.<signature>``, each part base64url without padding. The header
is always ``{"typ":"JWT","alg":"ed25519-nkey"}``; the signature is the issuer's ed25519 nkey
signature over the first two parts; ``iss`` is the issuer's public nkey, ``sub`` the subject's,
and ``jti`` the base32 SHA-256 of the claims serialised without it. The server checks the
signature, the issuer's standing (an account signed by the operator, a user by its account or
one of the account's signing keys) and ``exp``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from typing import Any, Optional

import nkeys
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from ..errors import EnclaveError

#: the version of the claims format nats-server 2.10+ reads
VERSION = 2

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}


class JWTError(EnclaveError):
    """A token that is not a NATS JWT, is signed by a key other than its issuer's, or has expired."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


_HEADER_PART = _b64(_compact(_HEADER))


def public_key(key: nkeys.KeyPair) -> str:
    return key.public_key.decode()


def encode(claims: dict[str, Any], signer: nkeys.KeyPair, *, now: Optional[float] = None) -> str:
    """``claims`` signed by ``signer``, which becomes the issuer; ``iat`` and ``jti`` are filled in."""
    body = {**claims, "iss": public_key(signer), "iat": int(now if now is not None else time.time()), "jti": ""}
    body["jti"] = base64.b32encode(hashlib.sha256(_compact(body)).digest()).decode().rstrip("=")
    signed = f"{_HEADER_PART}.{_b64(_compact(body))}"
    return f"{signed}.{_b64(signer.sign(signed.encode()))}"


def _verify_key(public: str) -> VerifyKey:
    try:
        raw = base64.b32decode(public + "=" * (-len(public) % 8))
    except (ValueError, TypeError) as exc:
        raise JWTError(f"issuer {public!r} is not a public nkey") from exc
    if len(raw) != 35 or nkeys.crc16_checksum(raw[:33]) != raw[33:]:
        raise JWTError(f"issuer {public!r} is not a public nkey")
    return VerifyKey(raw[1:33])


def decode(token: str, *, issuer_prefix: str = "", now: Optional[float] = None) -> dict[str, Any]:
    """The claims of ``token`` once its signature is checked against its own ``iss`` (which must
    start with ``issuer_prefix``: ``N`` a server, ``A`` an account, ``O`` the operator) and its
    ``exp``, if any, has not passed; raises JWTError otherwise."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3:
        raise JWTError("not a JWT (three dot-separated parts)")
    try:
        header, claims = json.loads(_unb64(parts[0])), json.loads(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except (ValueError, UnicodeDecodeError) as exc:
        raise JWTError("not a JWT (a part is not base64url JSON)") from exc
    if not isinstance(header, dict) or header.get("alg") != _HEADER["alg"] or not isinstance(claims, dict):
        raise JWTError("not a NATS JWT (alg must be ed25519-nkey)")
    issuer = claims.get("iss")
    if not isinstance(issuer, str) or not issuer.startswith(issuer_prefix):
        raise JWTError(f"issuer {issuer!r} is not a {issuer_prefix or 'public'} key")
    try:
        _verify_key(issuer).verify(f"{parts[0]}.{parts[1]}".encode(), signature)
    except BadSignatureError as exc:
        raise JWTError("signature does not match the issuer") from exc
    expires = claims.get("exp")
    if expires is not None and (not isinstance(expires, int) or expires <= (now if now is not None else time.time())):
        raise JWTError("expired")
    return claims


def operator_claims(operator: nkeys.KeyPair, system_account: str, name: str) -> dict[str, Any]:
    return {"sub": public_key(operator), "name": name,
            "nats": {"type": "operator", "version": VERSION, "system_account": system_account}}


def account_claims(account: str, name: str, **nats: Any) -> dict[str, Any]:
    """An account's claims (to be signed by the operator); ``nats`` holds limits, imports,
    exports, mappings, signing_keys, authorization, …"""
    return {"sub": account, "name": name, "nats": {"type": "account", "version": VERSION, **nats}}


def user_claims(user: str, name: str, *, issuer_account: Optional[str] = None, expires: Optional[int] = None,
                audience: Optional[str] = None, **nats: Any) -> dict[str, Any]:
    """A user's claims (to be signed by its account or one of the account's signing keys, then
    naming the account as ``issuer_account``); ``nats`` holds pub/sub permissions and limits."""
    body: dict[str, Any] = {"type": "user", "version": VERSION, "subs": -1, "data": -1, "payload": -1, **nats}
    if issuer_account:
        body["issuer_account"] = issuer_account
    claims: dict[str, Any] = {"sub": user, "name": name, "nats": body}
    if expires is not None:
        claims["exp"] = expires
    if audience is not None:
        claims["aud"] = audience
    return claims


def new_key(prefix: int, seed: bytes) -> nkeys.KeyPair:
    """The nkey pair of ``prefix`` (``nkeys.PREFIX_BYTE_ACCOUNT``, …) made from a 32-byte seed."""
    return nkeys.from_seed(nkeys.encode_seed(seed, prefix))
