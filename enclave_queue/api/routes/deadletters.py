"""Dead letters by hand: ``/v1/projects/{project}/queues/{name}/dead-letters`` and ``…/redrives``.

A queue's dead letters are its messages, read without leasing them (any queue can be listed;
a dead-letter queue's messages carry where they came from). Retry sends one back to its source
queue, discard deletes it, and a redrive moves many as a task with its own status.
"""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ...redrive import MAX_LIST, DeadLetterOps
from ..auth import SECRET_READ
from ..paths import MAX_SEQUENCE

router = APIRouter(prefix="/v1/projects/{project}/queues/{name}")


def ops(request: Request) -> DeadLetterOps:
    return request.app.state.runtime.service.dead_letters


class RedriveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: Optional[str] = None
    max: Optional[int] = None  # ranges checked by the service, with their own sentences
    rate: Optional[float] = None
    filter_error: Optional[str] = Field(None, min_length=1, max_length=1024)
    dry_run: bool = False


@router.get("/dead-letters", dependencies=[SECRET_READ])
async def list_dead_letters(project: str, name: str, request: Request,
                            limit: int = Query(50, ge=1, le=MAX_LIST), after: int = Query(0, ge=0, le=MAX_SEQUENCE)) -> dict[str, Any]:
    return await ops(request).list(project, name, limit, after)


@router.post("/dead-letters/{seq}/retry")
async def retry_dead_letter(project: str, name: str, seq: int, request: Request) -> dict[str, Any]:
    return await ops(request).retry(project, name, seq)


@router.delete("/dead-letters/{seq}", status_code=204)
async def discard_dead_letter(project: str, name: str, seq: int, request: Request) -> Response:
    await ops(request).discard(project, name, seq)
    return Response(status_code=204)


@router.post("/redrives", status_code=202)
async def start_redrive(project: str, name: str, request: Request,
                        body: Optional[RedriveRequest] = None) -> dict[str, Any]:
    body = body or RedriveRequest()
    return await ops(request).start_redrive(project, name, **body.model_dump())


@router.get("/redrives/{task_id}")
async def redrive_status(project: str, name: str, task_id: str, request: Request) -> dict[str, Any]:
    return ops(request).task(project, name, task_id).view()


@router.delete("/redrives/{task_id}")
async def cancel_redrive(project: str, name: str, task_id: str, request: Request) -> dict[str, Any]:
    return await ops(request).cancel(project, name, task_id)
