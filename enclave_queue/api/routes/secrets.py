"""Managed secrets: ``/v1/projects/{project}/secrets/{secret}``."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ...web.strictjson import StrictJSONRoute
from ..auth import SECRET_READ
from ..deps import Service

router = APIRouter(prefix="/v1/projects/{project}/secrets", route_class=StrictJSONRoute)


@router.get("/{secret}", dependencies=[SECRET_READ])
async def read_secret(project: str, secret: str, service: Service, response: Response) -> dict[str, str]:
    response.headers["Cache-Control"] = "no-store"
    return await service.read_secret(project, secret)
