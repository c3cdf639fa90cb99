"""Messages by hand: ``/v1/projects/{project}/queues/{name}/messages``, ``…/export`` and ``…/clear``.

Send: ``POST …/messages`` with ``{"body": <any JSON>}`` (a string is sent as its UTF-8 text,
anything else as JSON) or ``{"body_base64": "…"}``, and optionally ``"dedupe_key"`` and
``"delay_seconds"`` (0–604800) and ``"headers"`` (``{name: value}``, the sender's own); it answers ``{"sequence", "duplicate"}`` (and ``"delayed_until"``
for a delayed message), or 409 "Queue full" at ``max_messages``. Receive:
``POST …/messages/receive`` with ``{"max": 1–100, "wait": 0–20}``. Delete:
``DELETE …/messages/{receipt}``, or without a receipt ``DELETE …/messages/sequence/{seq}``. Hand back:
``POST …/messages/{receipt}/nack`` with ``{"delay": seconds}``. Peek (nothing leased):
``GET …/messages?limit=1–100``. Export (nothing taken): ``GET …/export``, JSON Lines, one message
a line. Clear: ``POST …/clear`` answers ``{"waiting", "delayed", "dead"}``, how many were removed.

Request bodies are strict (a number is a JSON number, ``max`` a JSON integer, never ``"5"`` or
``true``); each field's description is its rule, which its 422 repeats (api/problems.py).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ...envelope import DELAY_RULE, MAX_DELAY, parse_json
from ...errors import field_error
from ...spec import (
    BASE64_RULE,
    DEDUPE_KEY_RULE,
    MAX_DEDUPE_KEY,
    MAX_NACK_DELAY,
    MAX_PEEK,
    MAX_RECEIVE,
    MAX_RECEIVE_WAIT,
    NACK_DELAY_RULE,
    PEEK_LIMIT_RULE,
    RECEIVE_MAX_RULE,
    RECEIVE_WAIT_RULE,
    SENDER_HEADER_BYTES,
    header_bytes,
)
from ...web.strictjson import StrictJSONRoute
from ..auth import SECRET_READ
from ..deps import DIGITS, ContentsOf, MessagesOf

router = APIRouter(prefix="/v1/projects/{project}/queues/{name}", route_class=StrictJSONRoute)

NDJSON = "application/x-ndjson"
EXPORT_CHUNK = 64 * 1024  #: bytes of JSON Lines sent at once


MAX_HEADERS = 20  #: headers one message sent by hand may carry
MAX_HEADER_VALUE = 1024  #: characters of one header's value
#: a header's name: an HTTP token (RFC 9110), as NATS headers are; the broker's and Enclave's own
#: (``Nats-…``, ``Enclave-…``) and ``Content-Type`` (set from the body) are not the sender's to set
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
RESERVED_HEADERS = re.compile(r"(?i)(nats-|enclave-|content-type$)")
HEADERS_RULE = (f"an object of at most {MAX_HEADERS} headers: each name 1–64 letters, digits or !#$%&'*+.^_`|~- "
                f"(not Content-Type, nor beginning with Nats- or Enclave-), each value text of at most "
                f"{MAX_HEADER_VALUE} printable characters, not beginning or ending with a space; "
                f"at most {SENDER_HEADER_BYTES} bytes together")


def check_headers(headers: Optional[dict[str, str]]) -> dict[str, str]:
    """The sender's headers, once they follow HEADERS_RULE; SpecError naming ``headers`` otherwise."""
    headers = headers or {}
    if len(headers) > MAX_HEADERS:
        raise field_error("headers", f"must hold at most {MAX_HEADERS} headers (got {len(headers)})")
    for key, value in headers.items():
        if not HEADER_NAME.fullmatch(key) or RESERVED_HEADERS.match(key):
            raise field_error("headers", f"has a name that is not a header's own: {HEADERS_RULE} (got {key!r})")
        if len(value) > MAX_HEADER_VALUE or not value.isprintable() or value != value.strip():  # NATS trims them
            raise field_error("headers", f"has a value that is not {MAX_HEADER_VALUE} printable characters at most, "
                                         f"not beginning or ending with a space (header {key!r})")
    if (size := header_bytes(headers)) > SENDER_HEADER_BYTES:  # the rest of the room is a dead letter's
        raise field_error("headers", f"must take at most {SENDER_HEADER_BYTES} bytes together, each header counted "
                                     f"as its name, value and 4 bytes (got {size})")
    return headers


#: every request body of these routes: strict JSON types, no unknown field, no NaN or Infinity
STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


MAX_CONTENT_TYPE = 200  #: characters of a content type given with a string body
_TOKEN = r"[A-Za-z0-9!#$&^_.+-]+"
CONTENT_TYPE = re.compile(rf'{_TOKEN}/{_TOKEN}(\s*;\s*{_TOKEN}=({_TOKEN}|"[^"\\\x00-\x1f\x7f]*"))*')
CONTENT_TYPE_RULE = (f"a media type (type/subtype, parameters after ';'), at most {MAX_CONTENT_TYPE} characters, "
                     "with a string body: the text is stored as it is, labelled so (application/json: it must "
                     "be JSON text)")


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class SendRequest(BaseModel):
    model_config = STRICT
    body: Any = Field(None, description="the message: a string (sent as its UTF-8 text) or any other JSON value "
                                        "(sent as compact JSON)")
    body_base64: Optional[str] = Field(None, description=BASE64_RULE)
    content_type: Optional[str] = Field(None, description=CONTENT_TYPE_RULE)
    # checked by the service too, with the same sentences (for callers other than the API)
    dedupe_key: Optional[str] = Field(None, min_length=1, max_length=MAX_DEDUPE_KEY, description=DEDUPE_KEY_RULE)
    delay_seconds: float = Field(0, ge=0, le=MAX_DELAY, description=DELAY_RULE)
    headers: Optional[dict[str, str]] = Field(None, description=HEADERS_RULE)


class NackRequest(BaseModel):
    model_config = STRICT
    delay: float = Field(0, ge=0, le=MAX_NACK_DELAY, description=NACK_DELAY_RULE)


class ReceiveRequest(BaseModel):
    model_config = STRICT
    max: int = Field(1, ge=1, le=MAX_RECEIVE, description=RECEIVE_MAX_RULE)
    wait: float = Field(1.0, ge=0, le=MAX_RECEIVE_WAIT, description=RECEIVE_WAIT_RULE)


def encode_body(request: SendRequest) -> tuple[bytes, Optional[str]]:
    """The bytes to publish and their content type."""
    if request.body_base64 is not None:
        if request.content_type is not None:
            raise field_error("content_type", "goes only with a string body (the text to store as it is)")
        if "body" in request.model_fields_set:  # a null body too: it is the JSON value null
            raise field_error("body_base64", "cannot be given with body", "Give either body or body_base64, not both.")
        try:
            return base64.b64decode(request.body_base64, validate=True), "application/octet-stream"
        except (binascii.Error, ValueError):  # ValueError: a character outside ASCII
            raise field_error("body_base64", f"must be {BASE64_RULE}") from None
    if "body" not in request.model_fields_set:
        raise field_error("body", "is required")
    if request.content_type is not None:
        return _labelled(request.body, request.content_type)
    if isinstance(request.body, str):
        try:
            return request.body.encode(), "text/plain; charset=utf-8"
        except UnicodeEncodeError:  # a lone surrogate ("\ud800"): JSON can carry it, UTF-8 cannot
            raise field_error("body", "must be text that UTF-8 can encode (it holds a lone surrogate); send bytes "
                                      "as body_base64") from None
    try:
        return json.dumps(request.body, separators=(",", ":"), allow_nan=False).encode(), "application/json"
    except (ValueError, RecursionError, UnicodeEncodeError):
        raise field_error("body", "must be a JSON value that can be stored as JSON (not nested too deeply, no lone "
                                  "surrogates)") from None


def _labelled(body: Any, content_type: str) -> tuple[bytes, str]:
    """A string body stored as its text, as ``content_type`` says it is: the text itself, not a
    JSON value re-encoded (which changes numbers past 2^53, drops repeated keys)."""
    if not isinstance(body, str):
        raise field_error("content_type", "goes only with a string body (the text to store as it is)")
    if len(content_type) > MAX_CONTENT_TYPE or not CONTENT_TYPE.fullmatch(content_type):
        raise field_error("content_type", f"must be {CONTENT_TYPE_RULE} (got {content_type[:64]!r})")
    try:
        data = body.encode()
    except UnicodeEncodeError:
        raise field_error("body", "must be text that UTF-8 can encode (it holds a lone surrogate)") from None
    if _is_json(content_type):
        try:
            parse_json(data)
        except ValueError as exc:
            raise field_error("body", f"must be JSON text, as content_type says ({exc})") from None
    return data, content_type


@router.post("/messages", status_code=201)
async def send_message(project: str, name: str, body: SendRequest, messages: MessagesOf) -> dict[str, Any]:
    data, content_type = encode_body(body)
    return await messages.send(project, name, data, content_type, body.dedupe_key, body.delay_seconds,
                               check_headers(body.headers))


@router.post("/messages/receive")
async def receive_messages(project: str, name: str, messages: MessagesOf,
                           body: Optional[ReceiveRequest] = None) -> dict[str, Any]:
    body = body or ReceiveRequest()
    return {"messages": await messages.receive(project, name, body.max, body.wait)}


@router.delete("/messages/{receipt}", status_code=204)
async def delete_message(project: str, name: str, receipt: str, messages: MessagesOf) -> Response:
    await messages.delete_message(project, name, receipt)
    return Response(status_code=204)


@router.delete("/messages/sequence/{seq}", status_code=204)
async def delete_message_by_sequence(project: str, name: str, seq: int, messages: MessagesOf) -> Response:
    """Delete the message stored at ``seq`` (waiting, in flight or delayed) without a receipt."""
    await messages.delete_sequence(project, name, seq)
    return Response(status_code=204)


@router.post("/messages/{receipt}/nack", status_code=204)
async def nack_message(project: str, name: str, receipt: str, messages: MessagesOf,
                       body: Optional[NackRequest] = None) -> Response:
    body = body or NackRequest()
    await messages.nack_message(project, name, receipt, body.delay)
    return Response(status_code=204)


@router.get("/messages", dependencies=[SECRET_READ])
async def peek_messages(project: str, name: str, messages: MessagesOf,
                        limit: Annotated[int, Query(ge=1, le=MAX_PEEK, description=PEEK_LIMIT_RULE), DIGITS] = 10) -> dict[str, Any]:
    return {"messages": await messages.peek(project, name, limit)}


@router.get("/export", dependencies=[SECRET_READ])
async def export_messages(project: str, name: str, contents: ContentsOf) -> StreamingResponse:
    """Every message as it stands, as JSON Lines (see queues/contents.py, ``export_page``). The
    first page is read before the answer starts, so a missing queue is a 404 problem, not a broken
    stream."""
    messages = contents.export(project, name)
    first = await anext(messages, None)

    async def lines() -> AsyncIterator[bytes]:
        if first is None:
            return
        chunk = [json.dumps(first)]
        size = len(chunk[0])
        async for message in messages:
            if size >= EXPORT_CHUNK:
                yield ("\n".join(chunk) + "\n").encode()
                chunk, size = [], 0
            chunk.append(json.dumps(message))
            size += len(chunk[-1])
        yield ("\n".join(chunk) + "\n").encode()

    return StreamingResponse(lines(), media_type=NDJSON)


@router.post("/clear")
async def clear_messages(project: str, name: str, contents: ContentsOf) -> dict[str, int]:
    """Remove the waiting, delayed and dead messages (in-flight ones finish); how many of each."""
    return await contents.clear(project, name)
