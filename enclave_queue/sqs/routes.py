"""The access keys of the SQS endpoint, through the HTTP API: ``/v1/access-keys``.

Create: ``POST /v1/access-keys`` with ``{"project": <project>}`` (omitted or null: a key of every
project) and optionally ``"name"``; it answers the key with its ``secret_access_key``, this once.
List: ``GET /v1/access-keys`` (ids, projects, names; never secrets; ``?project=`` those scoped to one). Revoke:
``DELETE /v1/access-keys?access_key_id=<id>``. Behind the API token like every ``/v1/`` route
(the request guard, api/guard.py, authenticates them before any body is read).
"""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ..spec import PROJECT_PATTERN, PROJECT_RULE, ProjectName
from ..web.strictjson import StrictJSONRoute
from .endpoint import context_of
from .keys import ID_PATTERN, MAX_NAME, NAME_RULE

router = APIRouter(prefix="/v1/access-keys", route_class=StrictJSONRoute)

ID_RULE = "an access key id: EQAK and 16 of A–Z and 2–7"


class CreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    project: Optional[ProjectName] = Field(None, description=f"{PROJECT_RULE}, or null for a key of every project")
    name: str = Field("", max_length=MAX_NAME, description=NAME_RULE)


@router.post("", status_code=201)
async def create_access_key(request: Request, response: Response,
                            body: Optional[CreateRequest] = None) -> dict[str, Any]:
    body = body or CreateRequest()
    response.headers["Cache-Control"] = "no-store"
    return await context_of(request).keys.create(body.project, body.name)


@router.get("")
async def list_access_keys(request: Request, project: Optional[str] = Query(
        None, pattern=PROJECT_PATTERN.pattern, description=f"only the keys scoped to this project: {PROJECT_RULE}")
        ) -> list[dict[str, Any]]:
    keys = await context_of(request).keys.list()
    return keys if project is None else [k for k in keys if k["project"] == project]


@router.delete("", status_code=204)
async def revoke_access_key(request: Request, access_key_id: str = Query(
        ..., pattern=f"^{ID_PATTERN}$", description=ID_RULE)) -> Response:
    await context_of(request).keys.revoke(access_key_id)
    return Response(status_code=204)
