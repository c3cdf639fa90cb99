"""Authentication for every route but ``/healthz``: a bearer API token, or the console's session
cookie, which must come with the session's CSRF token (``X-CSRF-Token``) on every request that
changes something and on the reads that return secrets or message bodies in bulk (the routes
marked ``SECRET_READ``). A bearer token needs no CSRF token: a browser never sends it by itself.

``authenticate`` is called by the request guard (guard.py) for every ``/v1/`` request before
anything reads its body; ``require_token`` and ``require_csrf`` are route dependencies that use
what it found (and authenticate by themselves on routes outside ``/v1/``, such as ``/metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from ..auth.tokens import token_digest
from ..errors import Forbidden, Unauthorized
from ..web import cookies
from ..web.plane import plane
from ..web.sessions import CSRF_HEADER, Session

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
CALLER = "enclave.caller"  #: the scope key of the Caller the guard authenticated


@dataclass(frozen=True)
class Caller:
    token_name: str
    session: Optional[Session] = None  #: the console session, when the cookie authenticated it


async def authenticate(conn: HTTPConnection) -> Caller:
    """Who is calling; Unauthorized if the token or session is missing or unknown, Forbidden
    for a cookie without its CSRF token on a method that changes something."""
    header = conn.headers.get("authorization", "")
    runtime = plane(conn)
    session_id = cookies.session_id(conn)
    if not header and session_id is not None:
        return await _session_caller(conn, session_id)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("This route needs an API token: send 'Authorization: Bearer <token>'.")
    name = await runtime.token_name(token_digest(token.strip()))
    if name is None:
        raise Unauthorized("The API token is not valid.")
    return Caller(name)


async def _session_caller(conn: HTTPConnection, session_id: str) -> Caller:
    runtime = plane(conn)
    session = runtime.sessions.get(session_id)
    if session is None or await runtime.token_name(session.token_digest) is None:
        raise Unauthorized("The console session has ended; sign in again.")
    if conn.scope["method"] not in SAFE_METHODS:
        _check_csrf(conn, session)
    return Caller(session.token_name, session)


def _check_csrf(conn: HTTPConnection, session: Session) -> None:
    if not session.csrf_ok(conn.headers.get(CSRF_HEADER)):
        raise Forbidden(f"This request needs the session's CSRF token in the {CSRF_HEADER} header.")


async def caller_of(request: Request) -> Caller:
    """The Caller the guard found, or authenticate now (a route outside /v1/)."""
    caller = request.scope.get(CALLER)
    if caller is None:
        caller = request.scope[CALLER] = await authenticate(request)
    return caller


async def require_token(request: Request) -> str:
    """The caller's token name; Unauthorized if the token is missing or unknown."""
    return (await caller_of(request)).token_name


async def require_csrf(request: Request) -> None:
    """For a read that returns a password or message bodies in bulk: a caller signed in with the
    console's cookie must send its CSRF token too, so no other page on this host can read it."""
    caller = await caller_of(request)
    if caller.session is not None:
        _check_csrf(request, caller.session)


SECRET_READ = Depends(require_csrf)  #: the mark of a read that returns secrets or message bodies
