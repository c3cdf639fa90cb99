"""Console sessions: an API token exchanged for an HttpOnly, SameSite=Strict cookie.

A session lives in the control process's memory (a restart signs everyone out) and dies with its
token: each request checks the token still exists. Every state-changing request made with the
cookie must carry the session's CSRF token, in a form's ``csrf`` field or the ``X-CSRF-Token``
header, and so must the API reads that return secrets or message bodies in bulk (api/auth.py);
the sign-in form, which has no session yet, uses a short-lived pre-session token. Over HTTPS the
cookies are ``Secure`` and prefixed (``__Host-``, ``__Secure-``; see cookies.py).
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import Optional

COOKIE = "enclave_session"
PRE_COOKIE = "enclave_signin"  #: the sign-in form's CSRF token, before there is a session
#: their names over HTTPS: ``__Host-`` binds the session cookie to this host and port, Secure
#: and Path=/; the pre-session cookie keeps its /sign-in path, so it can only be ``__Secure-``
SECURE_COOKIE = "__Host-" + COOKIE
SECURE_PRE_COOKIE = "__Secure-" + PRE_COOKIE
CSRF_HEADER = "X-CSRF-Token"
LIFETIME = 12 * 3600.0  #: seconds a session lasts without use ending it
MAX_SESSIONS = 10_000  #: the oldest are forgotten beyond this


@dataclass
class Session:
    id: str
    token_digest: str
    token_name: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    expires: float = field(default_factory=lambda: time.time() + LIFETIME)

    def csrf_ok(self, given: Optional[str]) -> bool:
        return same_token(given, self.csrf)


def same_token(given: Optional[str], expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time; False for nothing, and for
    text that is not even encodable (a lone surrogate), rather than an error."""
    if not given or not expected:
        return False
    try:
        return hmac.compare_digest(given.encode(), expected.encode())
    except UnicodeEncodeError:
        return False


class Sessions:
    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}

    def open(self, token_digest: str, token_name: str) -> Session:
        self._forget_expired()
        session = Session(secrets.token_urlsafe(32), token_digest, token_name)
        self._by_id[session.id] = session
        return session

    def get(self, session_id: Optional[str]) -> Optional[Session]:
        session = self._by_id.get(session_id or "")
        if session is None:
            return None
        if session.expires < time.time():
            self._by_id.pop(session.id, None)
            return None
        return session

    def close(self, session_id: Optional[str]) -> None:
        self._by_id.pop(session_id or "", None)

    def _forget_expired(self) -> None:
        now = time.time()
        for sid in [sid for sid, s in self._by_id.items() if s.expires < now]:
            del self._by_id[sid]
        while len(self._by_id) >= MAX_SESSIONS:
            del self._by_id[next(iter(self._by_id))]
