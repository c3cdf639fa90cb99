"""The FastAPI application: the routes, the request guard, and errors as JSON problems.

``create_app(runtime)`` takes the running control plane (see server.py); the API is stateless
beyond it. In front of every route: the request guard (guard.py: the token, then the body
limit, before any body is read); on every route: its path parameters checked (paths.py). The
OpenAPI document is served at ``/openapi.json``, behind the token too (openapi.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from .. import console
from . import openapi, problems
from .auth import require_token
from .guard import OPENAPI_PATH, RequestGuard
from .paths import check_path, uncovered
from .routes import deadletters, health, messages, metrics, queues, secrets


def create_app(runtime: Any) -> FastAPI:
    app = FastAPI(title="Enclave Queues", version="1", docs_url=None, redoc_url=None, openapi_url=OPENAPI_PATH,
                  dependencies=[Depends(check_path)])
    app.state.runtime = runtime
    problems.install(app)
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
    console.install(app)
    missing = uncovered(app.routes)
    if missing:
        raise RuntimeError(f"path parameters without a rule in api/paths.py: {', '.join(missing)}")
    return app
