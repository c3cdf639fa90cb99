from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz(request: Request) -> JSONResponse:
    """200 once the broker and the control plane are ready; 503 before (and if the broker is down)."""
    runtime = request.app.state.runtime
    ready, detail = runtime.health()
    return JSONResponse({"status": "ok" if ready else "starting", "detail": detail}, status_code=200 if ready else 503)
