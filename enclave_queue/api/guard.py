"""The request guard: an ASGI middleware in front of the app that does what must happen before
anything reads a request's body.

1. Every ``/v1/`` request, and the OpenAPI document (``/openapi.json``: what a caller without a
   token has no need to read), is authenticated first (auth.authenticate): without a valid token or
   session it is answered 401 (403 for a cookie without its CSRF token) and its body is never
   read; the server stops reading it once its buffer is full, and closes the connection after
   the answer. (FastAPI reads and parses a body before it runs any dependency.)
2. Every request body is limited: a declared ``Content-Length`` over the limit is answered 413
   at once, and the bytes actually received are counted as the app reads them (a chunked upload
   has no length to declare), so the app never holds more than the limit. The limit covers the
   largest legitimate request, so the JSON parse that follows is bounded too. An app mounted
   beside the API that answers in words of its own (the SQS endpoint: SQS's errors, which its
   clients read) names its paths' limit in ``app.state.own_body_limits`` (``{path prefix:
   bytes}``): its first read of a body over it raises ``BodyTooLarge``, nothing read, and it
   answers that itself.

3. A HEAD request is answered as its GET, without the body.
4. A path holding an encoded '/' (``%2F``) is refused (400): the router decodes it first, so
   ``…/queues/a%2Fcredentials`` ran the credentials route of queue ``a``, which a proxy that
   allows or blocks by path would not expect.

The answers are JSON problems (problems.py).
"""

from __future__ import annotations

import re
from typing import Optional

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import EnclaveError
from ..spec import shown
from . import problems
from .auth import CALLER, authenticate

MiB = 1024 * 1024
#: bytes of a send (``POST …/messages``): a body of the largest max_message_bytes (1 MiB) as a
#: JSON string can take 6 bytes a byte (``\u0001``), and base64 4 for 3; 8 MiB holds either
SEND_BODY_LIMIT = 8 * MiB
BODY_LIMIT = 1 * MiB  #: bytes of any other request (specs, patches, options, forms: a few hundred)
#: bytes of a request's head (its path and headers) the app answers with a 431 problem past this;
#: the HTTP server lets heads up to HEAD_READ_LIMIT through to be answered so (server.py)
HEAD_LIMIT = 16 * 1024
HEAD_READ_LIMIT = 1 * MiB
SEND_PATH = re.compile(r"/v1/projects/[^/]+/queues/[^/]+/messages")
OPENAPI_PATH = "/openapi.json"


def needs_token(path: str) -> bool:
    """Whether the guard authenticates a request to ``path`` before the app sees it."""
    return path.startswith("/v1/") or path == OPENAPI_PATH


def body_limit(method: str, path: str) -> int:
    """The largest body, in bytes, a request to ``path`` may carry."""
    return SEND_BODY_LIMIT if method == "POST" and SEND_PATH.fullmatch(path) else BODY_LIMIT


def own_body_limit(scope: Scope) -> int | None:
    """The body limit of a mounted app that answers a body over it itself, if the path is its."""
    app = scope.get("app")
    limits: dict[str, int] = getattr(getattr(app, "state", None), "own_body_limits", None) or {}
    path = scope["path"]
    return next((limit for prefix, limit in limits.items() if path == prefix or path.startswith(prefix + "/")), None)


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when the body passes its limit. An HTTPException, so that FastAPI
    lets it through its body parsing and the app answers it as a 413 problem."""

    title = "Request too large"

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"The request body is larger than this route accepts ({limit} bytes).")


def _declared_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:  # the server refuses these before the app sees them
                return None
    return None


def _hardened(scope: Scope, send: Send) -> Send:
    """``send`` adding to every answer ``X-Content-Type-Options: nosniff`` (a body is what its
    Content-Type says, never sniffed into HTML), and to the API's (``/v1/``: one caller's data,
    message bodies among them) ``Cache-Control: no-store`` where the route set none."""
    api = scope["path"].startswith("/v1/")

    async def hardened_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            names = {name.lower() for name, _ in headers}
            if b"x-content-type-options" not in names:
                headers.append((b"x-content-type-options", b"nosniff"))
            if api and b"cache-control" not in names:
                headers.append((b"cache-control", b"no-store"))
            message = {**message, "headers": headers}
        await send(message)

    return hardened_send


def _bodiless(send: Send) -> Send:
    """``send`` keeping an answer's head (its Content-Length included) and dropping its body."""

    async def head_only(message: Message) -> None:
        if message["type"] == "http.response.body":
            if message.get("more_body", False):
                return
            message = {"type": "http.response.body", "body": b"", "more_body": False}
        await send(message)

    return head_only


def _not_json(scope: Scope) -> Optional[str]:
    """Why an API request's body cannot be read as JSON, if it cannot: sent without
    ``Content-Type: application/json`` (``curl -d`` sends a form's type, and the body was then
    refused as "not a valid dictionary", quoting a dictionary), or compressed (``Content-Encoding``
    was ignored: a gzipped body was "not UTF-8"). None for one that can, or no body at all."""
    if not scope["path"].startswith("/v1/") or scope["method"] not in ("POST", "PUT", "PATCH"):
        return None
    headers = {key.lower(): value for key, value in scope["headers"]}
    chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
    if not chunked and headers.get(b"content-length", b"0").strip() in (b"", b"0"):
        return None
    encoding = headers.get(b"content-encoding", b"identity").strip().lower()
    if encoding not in (b"", b"identity"):
        return (f"Content-Encoding {shown(encoding.decode('latin-1'))} is not accepted: send the JSON body as it is "
                "(Content-Encoding: identity, or none).")
    media, *params = headers.get(b"content-type", b"").decode("latin-1").split(";")
    media = media.strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        return ("The request body must be JSON, sent with Content-Type: application/json "
                f"(got {shown(media) if media else 'no Content-Type'}).")
    for param in params:  # JSON is UTF-8 (RFC 8259): a body in another charset would be read wrong
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return f"The request body must be JSON in UTF-8 (got charset {shown(value.strip())})."
    return None


class RequestGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "HEAD":  # answered as a GET is, without the body (HTTP's rule; FastAPI routes GET only)
            scope, send = {**scope, "method": "GET"}, _bodiless(send)
        send = _hardened(scope, send)
        head = sum(len(key) + len(value) + 4 for key, value in scope["headers"]) + len(scope.get("raw_path") or b"")
        if head > HEAD_LIMIT:  # before the token: a huge head is refused unread, as a problem
            await problems.problem(431, "Request header fields too large",
                                   f"The request's head is {head} bytes; at most {HEAD_LIMIT} are accepted.")(
                scope, receive, send)
            return
        if b"%2f" in (scope.get("raw_path") or b"").lower():  # routed as a '/': another route would run
            await problems.problem(400, "Bad request", "A path may not hold an encoded '/' (%2F): no name, "
                                   "receipt or id has one.")(scope, receive, send)
            return
        if sum(1 for key, _ in scope["headers"] if key == b"authorization") > 1:  # which one counts?
            await problems.problem(400, "Bad request", "The request has more than one Authorization header; "
                                   "send one.")(scope, receive, send)
            return
        if needs_token(scope["path"]):
            try:
                scope[CALLER] = await authenticate(HTTPConnection(scope))
            except EnclaveError as exc:
                await problems.from_error(exc)(scope, receive, send)
                return
            except problems.BROKER_ERRORS as exc:  # the token's lookup: a broker that does not answer is a 503
                await problems.broker_unavailable(scope["method"], scope["path"], exc)(scope, receive, send)
                return
        refusal = _not_json(scope)
        if refusal is not None:
            await problems.problem(415, "Unsupported media type", refusal)(scope, receive, send)
            return
        own = own_body_limit(scope)
        limit = body_limit(scope["method"], scope["path"]) if own is None else own
        declared = _declared_length(scope)
        received = 0
        if declared is not None and declared > limit:
            if own is None:
                await self._too_large(limit)(scope, receive, send)
                return
            received = declared  # its app's first read raises, before a byte is read
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            if received > limit:
                raise BodyTooLarge(limit)
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLarge:  # the app answers it as a problem; this is for one that did not
            if started:
                raise
            await self._too_large(limit)(scope, receive, send)

    @staticmethod
    def _too_large(limit: int) -> JSONResponse:
        error = BodyTooLarge(limit)
        return problems.problem(413, error.title, str(error.detail))
