"""The admin client as the ``queue`` commands use it (``api()``): the API's URL and token
checked before any request, with sentences that say where they came from (an answer that is
not the API's JSON is the admin client's own check, enclave_queue/admin.py)."""

from __future__ import annotations

import os

import httpx

from enclave_queue.admin import AdminClient, sendable_token
from enclave_queue.errors import SpecError, Unauthorized
from enclave_queue.settings import ADMIN_TOKEN_FILE, RUNTIME_FILE, ClientSettings, default_home
from enclave_queue.spec import shown


def api() -> AdminClient:
    """An AdminClient for the API that ClientSettings finds (docs/cli.md, "Finding the server").
    Raises SpecError (exit 2) for a URL that is no http(s) URL, Unauthorized (exit 7) for a
    token that cannot be sent in a header."""
    settings = ClientSettings.from_env()
    check_url(settings.url)
    check_token(settings.token)
    return AdminClient(settings.url, settings.token)


def check_url(url: str) -> None:
    where = "ENCLAVE_URL" if os.environ.get("ENCLAVE_URL") else f"api_url in {default_home() / RUNTIME_FILE}"
    rule = f"{where} must be an http:// or https:// URL such as http://127.0.0.1:7780 (got {shown(url)})."
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, UnicodeError):
        raise SpecError(rule) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise SpecError(rule)


def check_token(token: str | None) -> None:
    """A token goes into the Authorization header: printable ASCII without spaces. The token
    itself is never repeated (it is a secret)."""
    if sendable_token(token):
        return
    where = "ENCLAVE_TOKEN" if os.environ.get("ENCLAVE_TOKEN") else f"the token in {default_home() / ADMIN_TOKEN_FILE}"
    raise Unauthorized(f"{where} is not an API token: it holds a character that is not printable ASCII.")
