"""Messages by hand: ``/v1/projects/{project}/queues/{name}/messages``, ``…/export`` and ``…/clear``.

Send: ``POST …/messages`` with ``{"body": <any JSON>}`` (a string is sent as its UTF-8 text,
anything else as JSON) or ``{"body_base64": "…"}``, and optionally ``"dedupe_key"`` and
``"delay_seconds"`` (0–604800); it answers ``{"sequence", "duplicate"}`` (and ``"delayed_until"``
for a delayed message), or 409 "Queue full" at ``max_messages``. Receive:
``POST …/messages/receive`` with ``{"max": 1–100, "wait": 0–20}``. Delete:
``DELETE …/messages/{receipt}``. Hand back:
``POST …/messages/{receipt}/nack`` with ``{"delay": seconds}``. Peek (nothing leased):
``GET …/messages?limit=1–100``. Export (nothing taken): ``GET …/export``, JSON Lines, one message
a line. Clear: ``POST …/clear`` answers ``{"waiting", "delayed", "dead"}``, how many were removed.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator
from typing import Any, Optional

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ...errors import SpecError
from ...service import MAX_PEEK
from ...spec import MAX_RECEIVE, MAX_RECEIVE_WAIT
from ..auth import SECRET_READ

router = APIRouter(prefix="/v1/projects/{project}/queues/{name}")

NDJSON = "application/x-ndjson"
EXPORT_CHUNK = 64 * 1024  #: bytes of JSON Lines sent at once


class SendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    body: Any = None
    body_base64: Optional[str] = None
    dedupe_key: Optional[str] = None  # checked by the service, with its own sentence
    delay_seconds: float = 0  # likewise


class NackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    delay: float = 0  # the range is checked by the service, with its own sentence


class ReceiveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max: int = Field(1, ge=1, le=MAX_RECEIVE)
    wait: float = Field(1.0, ge=0, le=MAX_RECEIVE_WAIT)


def encode_body(request: SendRequest) -> tuple[bytes, Optional[str]]:
    """The bytes to publish and their content type."""
    if request.body_base64 is not None:
        if request.body is not None:
            raise SpecError("Give either body or body_base64, not both.",
                            errors=[{"field": "body_base64", "message": "cannot be given with body"}])
        try:
            return base64.b64decode(request.body_base64, validate=True), "application/octet-stream"
        except binascii.Error:
            raise SpecError("body_base64 must be valid base64.",
                            errors=[{"field": "body_base64", "message": "must be valid base64"}]) from None
    if "body" not in request.model_fields_set:
        raise SpecError("body is required.", errors=[{"field": "body", "message": "is required"}])
    if isinstance(request.body, str):
        return request.body.encode(), "text/plain; charset=utf-8"
    return json.dumps(request.body, separators=(",", ":")).encode(), "application/json"


@router.post("/messages", status_code=201)
async def send_message(project: str, name: str, body: SendRequest, request: Request) -> dict[str, Any]:
    data, content_type = encode_body(body)
    return await request.app.state.runtime.service.send(project, name, data, content_type, body.dedupe_key,
                                                        body.delay_seconds)


@router.post("/messages/receive")
async def receive_messages(project: str, name: str, request: Request,
                           body: Optional[ReceiveRequest] = None) -> dict[str, Any]:
    body = body or ReceiveRequest()
    messages = await request.app.state.runtime.service.receive(project, name, body.max, body.wait)
    return {"messages": messages}


@router.delete("/messages/{receipt}", status_code=204)
async def delete_message(project: str, name: str, receipt: str, request: Request) -> Response:
    await request.app.state.runtime.service.delete_message(project, name, receipt)
    return Response(status_code=204)


@router.post("/messages/{receipt}/nack", status_code=204)
async def nack_message(project: str, name: str, receipt: str, request: Request,
                       body: Optional[NackRequest] = None) -> Response:
    body = body or NackRequest()
    await request.app.state.runtime.service.nack_message(project, name, receipt, body.delay)
    return Response(status_code=204)


@router.get("/messages", dependencies=[SECRET_READ])
async def peek_messages(project: str, name: str, request: Request,
                        limit: int = Query(10, description=f"1 to {MAX_PEEK}")) -> dict[str, Any]:
    # the range is checked by the service: the shared "limit" rule (dead letters') says 1 to 500
    return {"messages": await request.app.state.runtime.service.peek(project, name, limit)}


@router.get("/export", dependencies=[SECRET_READ])
async def export_messages(project: str, name: str, request: Request) -> StreamingResponse:
    """Every message as it stands, as JSON Lines (see QueueService.export_page). The first page is
    read before the answer starts, so a missing queue is a 404 problem, not a broken stream."""
    messages = request.app.state.runtime.service.export(project, name)
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
async def clear_messages(project: str, name: str, request: Request) -> dict[str, int]:
    """Remove the waiting, delayed and dead messages (in-flight ones finish); how many of each."""
    return await request.app.state.runtime.service.clear(project, name)
