"""Dead letters by hand: ``/v1/projects/{project}/queues/{name}/dead-letters`` and ``…/redrives``.

A queue's dead letters are its messages, read without leasing them (any queue can be listed;
a dead-letter queue's messages carry where they came from). Retry sends one back to its source
queue, discard deletes it, and a redrive moves many as a task with its own status. A redrive's
options are strict JSON types; each field's description is its rule, which its 422 repeats.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from ...spec import (
    AFTER_RULE,
    FILTER_RULE,
    FLAG_RULE,
    LIST_LIMIT_RULE,
    MAX_FILTER,
    MAX_LIST,
    MAX_REDRIVE_RATE,
    MAX_SEQUENCE,
    NAME_RULE,
    REDRIVE_MAX_RULE,
    REDRIVE_RATE_RULE,
    QueueName,
)
from ...web.strictjson import StrictJSONRoute
from ..auth import SECRET_READ
from ..deps import DIGITS, DeadLettersOf, Service
from .messages import STRICT

router = APIRouter(prefix="/v1/projects/{project}/queues/{name}", route_class=StrictJSONRoute)


class RedriveRequest(BaseModel):
    model_config = STRICT
    # checked by the service too, with the same sentences (for callers other than the API)
    to: Optional[QueueName] = Field(None, description=NAME_RULE)
    max: Optional[int] = Field(None, ge=1, description=REDRIVE_MAX_RULE)
    rate: Optional[float] = Field(None, gt=0, le=MAX_REDRIVE_RATE, description=REDRIVE_RATE_RULE)
    filter_error: Optional[str] = Field(None, min_length=1, max_length=MAX_FILTER, description=FILTER_RULE)
    dry_run: bool = Field(False, description=FLAG_RULE)
    source: Optional[QueueName] = Field(None, description=f"only the letters from this queue: {NAME_RULE}")


@router.get("/dead-letters", dependencies=[SECRET_READ])
async def list_dead_letters(project: str, name: str, ops: DeadLettersOf,
                            limit: Annotated[int, Query(ge=1, le=MAX_LIST, description=LIST_LIMIT_RULE), DIGITS] = 50,
                            after: Annotated[int, Query(ge=0, le=MAX_SEQUENCE, description=AFTER_RULE), DIGITS] = 0,
                            source: Optional[str] = Query(None, description=f"only the letters from this queue: "
                                                                             f"{NAME_RULE}")) -> dict[str, Any]:
    """A page of the queue's letters; with ``source``, only those that came from that queue."""
    return await ops.list(project, name, limit, after, source)


@router.get("/dead-letters/counts")
async def count_dead_letters(project: str, name: str, service: Service) -> dict[str, Any]:
    """How many messages the queue holds, how many are letters from each source queue, and which
    queues name it as their dead-letter queue (``{"total", "by_source", "sources"}``)."""
    return await service.dead_letter_counts(project, name)


@router.post("/dead-letters/{seq}/retry")
async def retry_dead_letter(project: str, name: str, seq: int, ops: DeadLettersOf) -> dict[str, Any]:
    return await ops.retry(project, name, seq)


@router.delete("/dead-letters/{seq}", status_code=204)
async def discard_dead_letter(project: str, name: str, seq: int, ops: DeadLettersOf) -> Response:
    await ops.discard(project, name, seq)
    return Response(status_code=204)


@router.post("/redrives", status_code=202)
async def start_redrive(project: str, name: str, ops: DeadLettersOf,
                        body: Optional[RedriveRequest] = None) -> dict[str, Any]:
    body = body or RedriveRequest()
    return await ops.start_redrive(project, name, **body.model_dump())


@router.get("/redrives/{task_id}")
async def redrive_status(project: str, name: str, task_id: str, ops: DeadLettersOf) -> dict[str, Any]:
    return ops.task(project, name, task_id).view()


@router.delete("/redrives/{task_id}")
async def cancel_redrive(project: str, name: str, task_id: str, ops: DeadLettersOf) -> dict[str, Any]:
    return await ops.cancel(project, name, task_id)
