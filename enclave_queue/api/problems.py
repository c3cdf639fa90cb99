"""Errors as RFC 9457 JSON problems: ``{"type", "title", "status", "detail", "errors"}``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import EnclaveError, SpecError, Unauthorized
from ..spec import spec_error

log = logging.getLogger("enclave.api")

MEDIA_TYPE = "application/problem+json"


def problem(status: int, title: str, detail: str, errors: list[dict[str, Any]] | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def from_error(exc: EnclaveError) -> JSONResponse:
    """The problem for an error of the tree (a 401 says which scheme it wants)."""
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return problem(exc.status, exc.title, exc.message, exc.errors, headers)


def wants_page(request: Request) -> bool:
    """A console page (not the API, not /metrics) asked for by a browser."""
    path = request.url.path
    return not path.startswith(("/v1/", "/metrics", "/healthz")) and "text/html" in request.headers.get("accept", "")


def install(app: FastAPI) -> None:
    @app.exception_handler(EnclaveError)
    async def enclave_error(request: Request, exc: EnclaveError) -> Response:
        if wants_page(request):
            from ..console.routes import error_page

            return error_page(request, exc.title, exc.message, exc.status)
        if exc.status >= 500:
            log.warning("%s %s failed: %s", request.method, request.url.path, exc)
        return from_error(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # typed request bodies and query strings (queue specs are checked by parse_spec)
        error = spec_error(list(exc.errors()), "a field of this request")
        return problem(SpecError.status, SpecError.title, error.message, error.errors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"There is no route {request.url.path}."
        title = getattr(exc, "title", None) or ("Not found" if exc.status_code == 404 else detail)
        return problem(exc.status_code, title, detail)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return problem(500, "Internal error", "The server failed to handle the request; see its log.")
