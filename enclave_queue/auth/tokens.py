"""API tokens: random bearer strings, stored only as their SHA-256 digests."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "enq_"


def generate_token() -> str:
    """A new API token: a fixed prefix (so secret scanners recognise it) and 256 random bits."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """The key a token is stored under. The token itself is never stored."""
    return hashlib.sha256(token.encode()).hexdigest()
