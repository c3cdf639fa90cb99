"""The HTTP application: the API (api/) and the console (console/) in one FastAPI app.

The two (and the SQS endpoint at ``/sqs``, sqs/, with its ``/v1/access-keys`` routes) are peers
that import none of each other: the API answers ``/v1/``, ``/metrics``,
``/healthz`` and ``/openapi.json`` with JSON, the console its pages at ``/`` with HTML, and an
error on a page a browser asked for is rendered as the console's error page (api/problems.py).
Both read the running control plane through ``web.plane``; every path parameter of either
follows the rules of web/paths.py, which this app refuses to start without.
"""

from __future__ import annotations

from typing import Optional

from fastapi import FastAPI

from .. import api, console, sqs
from ..web.paths import check_covered
from ..web.plane import ControlPlane


def create_app(runtime: Optional[ControlPlane]) -> FastAPI:
    """The app serving ``runtime`` (None: the route table alone, for tests and the OpenAPI document)."""
    app = api.create_app(runtime, error_page=console.error_page)
    console.install(app)
    sqs.install(app)
    check_covered(app.routes)
    return app
