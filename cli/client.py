"""The admin client as the ``queue`` commands use it (``api()``): the API's URL and token
checked before any request, with sentences that say where they came from (an answer that is
not the API's JSON is the admin client's own check, enclave_queue/admin.py)."""

from __future__ import annotations

import os
import re

import httpx

from enclave_queue.admin import AdminClient, sendable_token
from enclave_queue.errors import SpecError, Unauthorized
from enclave_queue.settings import ADMIN_TOKEN_FILE, RUNTIME_FILE, ClientSettings, default_home
from enclave_queue.spec import shown

#: a host as it goes on the wire (httpx's raw_host: IDNA-encoded, an IPv6 address without brackets)
HOST = re.compile(rb"[A-Za-z0-9._:-]+")
#: the user name and password of a URL: after its scheme, up to the last '@' before its path, query or
#: fragment ('//' or not: 'user:pw@host' is no URL, and still not repeated)
USERINFO = re.compile(r"^((?:[^:/?#]*:)?(?://)?)[^/?#]*@")


def api() -> AdminClient:
    """An AdminClient for the API that ClientSettings finds (docs/cli.md, "Finding the server").
    Raises SpecError (exit 2) for a URL that is no http(s) URL, Unauthorized (exit 7) for a
    token that cannot be sent in a header."""
    settings = ClientSettings.from_env()
    check_url(settings.url)
    check_token(settings.token)
    return AdminClient(settings.url, settings.token)


def check_url(url: str) -> None:
    """Refuse (SpecError) a URL that no request could go to: not http(s), no host or one with
    characters no host name has (httpx takes ``http:// `` and quotes the space), a port outside
    1–65535 (httpx takes ``:-1``): each would be reported as an API that cannot be reached. A URL
    with a user name or password is refused too: the API takes its token from ENCLAVE_TOKEN, and
    what the URL holds would be repeated in every error that names the URL (the password is never
    repeated here)."""
    where = "ENCLAVE_URL" if os.environ.get("ENCLAVE_URL") else f"api_url in {default_home() / RUNTIME_FILE}"
    rule = (f"{where} must be an http:// or https:// URL such as http://127.0.0.1:7780 "
            f"(got {shown(without_userinfo(url))}).")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, UnicodeError):
        raise SpecError(rule) from None
    if (parsed.scheme not in ("http", "https") or not HOST.fullmatch(parsed.raw_host)
            or parsed.port is not None and not 1 <= parsed.port <= 65535):
        raise SpecError(rule)
    if parsed.userinfo or without_userinfo(url) != url:
        raise SpecError(f"{where} must not hold a user name or password (got {shown(without_userinfo(url))}); "
                        "the API's token goes in ENCLAVE_TOKEN.")


def without_userinfo(url: str) -> str:
    """``url`` with what comes before the last '@' of its host part as '***' (a password, maybe)."""
    return USERINFO.sub(r"\1***@", url, count=1)


def check_token(token: str | None) -> None:
    """A token goes into the Authorization header: printable ASCII without spaces. The token
    itself is never repeated (it is a secret)."""
    if sendable_token(token):
        return
    where = "ENCLAVE_TOKEN" if os.environ.get("ENCLAVE_TOKEN") else f"the token in {default_home() / ADMIN_TOKEN_FILE}"
    raise Unauthorized(f"{where} is not an API token: it holds a character that is not printable ASCII.")
