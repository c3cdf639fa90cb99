"""Managed secrets: ``/v1/projects/{project}/secrets/{secret}``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ..auth import SECRET_READ

router = APIRouter(prefix="/v1/projects/{project}/secrets")


@router.get("/{secret}", dependencies=[SECRET_READ])
async def read_secret(project: str, secret: str, request: Request, response: Response) -> dict[str, str]:
    response.headers["Cache-Control"] = "no-store"
    return await request.app.state.runtime.service.read_secret(project, secret)
