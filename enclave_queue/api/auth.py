"""Authentication for every route but ``/healthz``: a bearer API token, or the console's session
cookie (with its CSRF token on every request that changes something)."""

from __future__ import annotations

from fastapi import Request

from ..auth.tokens import token_digest
from ..console.sessions import COOKIE, CSRF_HEADER
from ..errors import Forbidden, Unauthorized

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


async def require_token(request: Request) -> str:
    """The caller's token name; Unauthorized if the token is missing or unknown."""
    header = request.headers.get("authorization", "")
    runtime = request.app.state.runtime
    if not header and COOKIE in request.cookies:
        return await _session_token(request)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("This route needs an API token: send 'Authorization: Bearer <token>'.")
    name = await runtime.token_name(token_digest(token.strip()))
    if name is None:
        raise Unauthorized("The API token is not valid.")
    return name


async def _session_token(request: Request) -> str:
    runtime = request.app.state.runtime
    session = runtime.sessions.get(request.cookies.get(COOKIE))
    if session is None or await runtime.token_name(session.token_digest) is None:
        raise Unauthorized("The console session has ended; sign in again.")
    if request.method not in SAFE_METHODS and not session.csrf_ok(request.headers.get(CSRF_HEADER)):
        raise Forbidden(f"This request needs the session's CSRF token in the {CSRF_HEADER} header.")
    return session.token_name
