"""Queue declarations: ``/v1/projects/{project}/queues[/{name}[/status|/credentials|/rotate-password]]``.

Create and update take their bodies as plain JSON objects and check them with ``parse_spec`` and
``parse_patch`` (strict types, every bad field named with its rule); the OpenAPI document
describes those bodies with the QueueSpec and QueuePatch schemas (api/openapi.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Body, Query, Response

from ...errors import field_error
from ...spec import DEFAULT_GRACE, MAX_STATUS_WAIT, STATUS_WAIT_RULE, Queue, parse_patch, parse_spec, shown
from ...web.strictjson import StrictJSONRoute
from ..auth import SECRET_READ
from ..deps import DECIMAL, Service

router = APIRouter(prefix="/v1/projects/{project}/queues", route_class=StrictJSONRoute)

MAX_WAIT_SECONDS = float(MAX_STATUS_WAIT)


@router.get("/-/overview")
async def overview(project: str, service: Service) -> dict[str, Any]:
    """Every queue of the project with its state and depth (the console's live table)."""
    return {"queues": await service.overview(project)}


@router.get("")
async def list_queues(project: str, service: Service) -> list[Queue]:
    return await service.list(project)


@router.post("", status_code=201)
async def create_queue(project: str, service: Service, body: dict[str, Any] = Body(...)) -> Queue:
    if body.get("project", project) != project:
        given = body["project"]
        got = shown(given) if isinstance(given, str) else "an object" if isinstance(given, dict) else \
            "a list" if isinstance(given, list) else shown(json.dumps(given))[1:-1]  # null, true, 5
        raise field_error("project", "must match the project in the path",
                          f"project in the body ({got}) differs from the project in the path ('{project}').")
    return await service.create(parse_spec({**body, "project": project}))


@router.get("/{name}")
async def get_queue(project: str, name: str, service: Service) -> Queue:
    return await service.get(project, name)


@router.patch("/{name}")
async def update_queue(project: str, name: str, service: Service, body: dict[str, Any] = Body(...)) -> Queue:
    for fixed in ("name", "project", "id"):
        if fixed in body and body[fixed] != {"name": name, "project": project}.get(fixed):
            raise field_error(fixed, "cannot be changed", f"{fixed} cannot be changed; create a new queue instead.")
        body.pop(fixed, None)
    return await service.update(project, name, parse_patch(body))


@router.delete("/{name}", status_code=202)
async def delete_queue(project: str, name: str, service: Service) -> dict[str, str]:
    await service.delete(project, name)
    return {"state": "Deleting"}


@router.get("/{name}/status")
async def queue_status(project: str, name: str, service: Service,
                       wait_seconds: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS, allow_inf_nan=False,
                                                   description=STATUS_WAIT_RULE), DECIMAL] = 0) -> dict[str, Any]:
    """The queue's state. With ``wait_seconds``, answer once the latest spec is applied (Ready or
    Errored) or when that time is up; a deleted queue answers 404 once it is gone."""
    if wait_seconds:
        return await service.wait_settled(project, name, wait_seconds)
    return await service.status(project, name)


@router.get("/{name}/credentials", dependencies=[SECRET_READ])
async def queue_credentials(project: str, name: str, service: Service, response: Response) -> dict[str, Any]:
    response.headers["Cache-Control"] = "no-store"
    return await service.credentials(project, name)


@router.post("/{name}/rotate-password", dependencies=[SECRET_READ])
async def rotate_password(project: str, name: str, service: Service, response: Response,
                          body: Optional[dict[str, Any]] = Body(None)) -> dict[str, Any]:
    """A new password for the queue's apps (``grace_seconds``, default 3600: how long the current one
    keeps logging in); answers the new credentials."""
    body = body or {}
    unknown = sorted(set(body) - {"grace_seconds"})
    if unknown:
        raise field_error(unknown[0], "is not a field of a rotation (only grace_seconds is)")
    response.headers["Cache-Control"] = "no-store"
    return await service.rotate_password(project, name, body.get("grace_seconds", DEFAULT_GRACE))


@router.get("/{name}/stats")
async def queue_stats(project: str, name: str, service: Service) -> dict[str, Any]:
    """How many messages are waiting, in flight, delayed and dead now (see broker/depth.py)."""
    return (await service.depth(project, name)).view()
