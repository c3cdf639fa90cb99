"""``GET /healthz`` (no token): the runtime's health (server/runtime.py ``Runtime.health``), for probes and compose."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from ..deps import Plane

router = APIRouter()


@router.api_route("/healthz", methods=["GET", "HEAD"], include_in_schema=False)
async def healthz(runtime: Plane) -> JSONResponse:
    """200 ``{"status": "ok"}`` once the broker and the control plane are ready; 503 otherwise, with
    the status ``starting``, ``unavailable`` (the broker down) or ``degraded`` (the broker's disk is
    full: puts are refused) and a ``detail`` sentence saying why. ``node``: this node's name;
    ``leader``: whether it does the work that must happen once (on a cluster, the lease holder)."""
    status, detail = runtime.health()
    return JSONResponse({"status": status, "detail": detail, "node": runtime.settings.node_name,
                         "leader": runtime.leading}, status_code=200 if status == "ok" else 503)
