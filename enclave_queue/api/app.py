"""The FastAPI application of the API: the routes, the request guard, and errors as JSON problems.

``create_app(runtime)`` takes the running control plane (server/runtime.py, as web/plane.py's
``ControlPlane``); the API is stateless beyond it. In front of every route: the request guard
(guard.py: the token, then the body limit, before any body is read); on every route: its path
parameters checked (web/paths.py), and its query string (deps.check_query: only the route's own
parameters, each once). The OpenAPI document is served at ``/openapi.json``, behind the token too
(openapi.py). The console's pages are added beside the API by server/app.py.
"""

from __future__ import annotations

from typing import Optional

from fastapi import Depends, FastAPI

from ..web.paths import check_covered, check_path
from ..web.plane import ControlPlane, attach
from . import openapi, problems
from .auth import require_token
from .deps import check_query
from .guard import OPENAPI_PATH, RequestGuard
from .problems import ErrorPage
from .routes import deadletters, health, messages, metrics, queues, secrets


def create_app(runtime: Optional[ControlPlane], *, error_page: Optional[ErrorPage] = None) -> FastAPI:
    """The API's app serving ``runtime`` (None: the route table alone). ``error_page`` renders an
    error on a page a browser asked for (the console's, api/problems.py)."""
    # redirect_slashes off: a path with a trailing slash is a 404 problem, not a bare 307 to a
    # Location built from the request's Host header (an open redirect behind a proxy)
    app = FastAPI(title="Enclave Queues", version="1", docs_url=None, redoc_url=None, openapi_url=OPENAPI_PATH,
                  dependencies=[Depends(check_path), Depends(check_query)], redirect_slashes=False)
    attach(app, runtime)
    problems.install(app, error_page)
    openapi.install(app)
    app.add_middleware(RequestGuard)
    app.include_router(health.router)
    guarded = [Depends(require_token)]
    app.include_router(queues.router, dependencies=guarded)
    app.include_router(messages.router, dependencies=guarded)
    app.include_router(deadletters.router, dependencies=guarded)
    app.include_router(secrets.router, dependencies=guarded)
    app.include_router(metrics.history, dependencies=guarded)
    app.include_router(metrics.router)  # its own check: an API token or the metrics token
    check_covered(app.routes)
    return app
