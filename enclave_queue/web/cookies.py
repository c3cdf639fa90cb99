"""The console's cookies, set (console/routes.py) and read (there and api/auth.py) with the flags
the request's scheme calls for.

Over plain HTTP (the default: loopback): ``enclave_session`` and ``enclave_signin``, HttpOnly and
SameSite=Strict. Over HTTPS, directly or behind a trusted proxy (proxies.py): the same cookies as
``__Host-enclave_session`` and ``__Secure-enclave_signin``, also ``Secure``; a browser keeps a
``__Host-`` cookie only if it is Secure, has Path=/ and no Domain, so no other host (or plain-HTTP
page) can set or overwrite it. Each scheme reads only its own names.
"""

from __future__ import annotations

from typing import Optional

from starlette.requests import HTTPConnection
from starlette.responses import Response

from .sessions import COOKIE, LIFETIME, PRE_COOKIE, SECURE_COOKIE, SECURE_PRE_COOKIE

PRE_LIFETIME = 600  #: seconds the sign-in form's token lasts
PRE_PATH = "/sign-in"


def over_https(conn: HTTPConnection) -> bool:
    return conn.app.state.proxies.is_https(conn.scope)


def session_id(conn: HTTPConnection) -> Optional[str]:
    """The session id the request's cookie carries, if any."""
    return conn.cookies.get(SECURE_COOKIE if over_https(conn) else COOKIE)


def pre_token(conn: HTTPConnection) -> str:
    """The sign-in form's token from its cookie, or ''."""
    return conn.cookies.get(SECURE_PRE_COOKIE if over_https(conn) else PRE_COOKIE, "")


def set_session(response: Response, conn: HTTPConnection, value: str) -> None:
    secure = over_https(conn)
    response.set_cookie(SECURE_COOKIE if secure else COOKIE, value, max_age=int(LIFETIME), httponly=True,
                        samesite="strict", path="/", secure=secure)


def clear_session(response: Response, conn: HTTPConnection) -> None:
    secure = over_https(conn)
    response.delete_cookie(SECURE_COOKIE if secure else COOKIE, path="/", secure=secure, httponly=True,
                           samesite="strict")


def set_pre(response: Response, conn: HTTPConnection, value: str) -> None:
    secure = over_https(conn)
    response.set_cookie(SECURE_PRE_COOKIE if secure else PRE_COOKIE, value, max_age=PRE_LIFETIME, httponly=True,
                        samesite="strict", path=PRE_PATH, secure=secure)


def clear_pre(response: Response, conn: HTTPConnection) -> None:
    secure = over_https(conn)
    response.delete_cookie(SECURE_PRE_COOKIE if secure else PRE_COOKIE, path=PRE_PATH, secure=secure,
                           httponly=True, samesite="strict")
