"""Metrics: ``GET /metrics`` for Prometheus, and a queue's depth history ``GET …/queues/{name}/depth``.

``/metrics`` takes any API token, or the metrics token (``ENCLAVE_METRICS_TOKEN``), which is good
for this route only: a scraper's credential can neither read nor change queues.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from ...spec import HOURS_RULE, MAX_HISTORY_HOURS
from ...web.plane import plane
from ..auth import require_token
from ..deps import DIGITS, Plane, Service


async def require_scrape_token(request: Request) -> None:
    """The metrics token, else any API token (Unauthorized otherwise)."""
    wanted = plane(request).settings.metrics_token
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if wanted and scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), wanted.encode()):
        return
    await require_token(request)


router = APIRouter()  #: /metrics, with its own token check
history = APIRouter(prefix="/v1/projects/{project}/queues/{name}")  #: behind the API token


@router.api_route("/metrics", methods=["GET", "HEAD"], dependencies=[Depends(require_scrape_token)],
                  include_in_schema=False)
async def metrics(request: Request, runtime: Plane) -> Response:
    """Every metric in Prometheus' text format (OpenMetrics if the scraper asks for it)."""
    body, content_type = await runtime.metrics.render(request.headers.get("accept", ""))
    return Response(body, media_type=content_type)


@history.get("/depth")
async def depth_history(project: str, name: str, runtime: Plane, service: Service,
                        hours: Annotated[int, Query(ge=1, le=MAX_HISTORY_HOURS, description=HOURS_RULE), DIGITS] = 24) -> dict[str, Any]:
    """The queue's depth samples of the last ``hours`` hours, oldest first."""
    return {"points": await service.depth_history(project, name, hours),
            "sample_seconds": runtime.settings.sample_seconds}
