"""Errors as RFC 9457 JSON problems: ``{"type", "title", "status", "detail", "errors"}``.

Every error the app answers is one, whoever raised it: the error tree (errors.py), a request
FastAPI could not validate or parse (422 naming the field, or ``body``), Starlette's 404 and
405 (with ``Allow``), the guard's 401 and 413 (guard.py), and a broker that did not answer
anywhere in a route (503 ``Broker unavailable`` with ``Retry-After``, never a 500). An error on
a page a browser asked for is rendered by the ``error_page`` the app was given (the console's).
"""

from __future__ import annotations

import logging
import sys
import typing
from collections.abc import Callable
from typing import Any, Optional

import nats.errors
import nats.js.errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from ..errors import BrokerUnavailable, EnclaveError, SpecError, Unauthorized, field_error
from ..spec import spec_error
from ..web.paths import endpoints
from ..web.strictjson import RepeatedKey

log = logging.getLogger("enclave.api")

MEDIA_TYPE = "application/problem+json"
RETRY_AFTER = "1"  #: seconds a client should wait before it asks again after a 503

#: what a broker that does not answer raises, anywhere in a route (nats-py's TimeoutError is
#: also the builtin one; no responders: a JetStream API that is being reloaded)
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError, nats.errors.TimeoutError, nats.errors.NoServersError, nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError, nats.errors.NoRespondersError,
    nats.js.errors.ServiceUnavailableError,
)

#: FastAPI's answer to a body it could not decode (not UTF-8, nested past the parser's depth)
PARSE_FAILURE = "There was an error parsing the body"

#: renders an error as a page: (request, title, detail, status) -> the HTML response
ErrorPage = Callable[[Request, str, str, int], Response]


def problem(status: int, title: str, detail: str, errors: list[dict[str, Any]] | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def broker_unavailable(method: str, path: str, exc: BaseException) -> JSONResponse:
    """The 503 for a request the broker did not answer in time (one of BROKER_ERRORS), logged."""
    return from_error(_broker_did_not_answer(method, path, exc))


def _broker_did_not_answer(method: str, path: str, exc: BaseException) -> BrokerUnavailable:
    log.warning("%s %s: the broker did not answer: %r", method, path, exc)
    return BrokerUnavailable("The broker did not answer in time; try again shortly.")


def from_error(exc: EnclaveError) -> JSONResponse:
    """The problem for an error of the tree (a 401 says which scheme it wants, a 503 when to
    ask again)."""
    headers = None
    if isinstance(exc, Unauthorized):
        headers = {"WWW-Authenticate": "Bearer"}
    elif isinstance(exc, BrokerUnavailable):
        headers = {"Retry-After": RETRY_AFTER}
    return problem(exc.status, exc.title, exc.message, exc.errors, headers)


def wants_page(request: Request) -> bool:
    """A console page (not the API, not /metrics) asked for by a browser."""
    path = request.url.path
    return not path.startswith(("/v1/", "/metrics", "/healthz")) and "text/html" in request.headers.get("accept", "")


def route_rules(request: Request) -> dict[str, str]:
    """The rules of the matched route's own fields: the descriptions of its query parameters and
    of its body model's fields (``Query(description=…)``, ``Field(description=…)``), so that a
    name two routes share ("limit", "max") is explained by the route that was asked."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return {}
    rules = {param.name: param.field_info.description for param in dependant.query_params
             if param.field_info.description}
    for param in dependant.body_params:
        annotation = param.field_info.annotation
        for model in (annotation, *typing.get_args(annotation)):
            if isinstance(model, type) and issubclass(model, BaseModel):
                rules.update({name: field.description for name, field in model.model_fields.items()
                              if field.description})
    return rules


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405: every method some route of this path takes (Starlette
    names only those of the first route that matched the path)."""
    path = request.url.path
    methods: set[str] = set()
    for route in endpoints(request.app.routes):
        if route.path and route.methods and compile_path(route.path)[0].match(path):
            methods |= set(route.methods)
    return ", ".join(sorted(methods))


def _parse_failure(exc: StarletteHTTPException) -> SpecError:
    cause = exc.__cause__
    if isinstance(cause, UnicodeError):
        message = "is not valid JSON (it is not UTF-8 text)"
    elif isinstance(cause, RecursionError):
        message = "is not valid JSON here (it is nested too deeply)"
    elif isinstance(cause, RepeatedKey):
        message = f"is not valid JSON here ({cause})"
    elif isinstance(cause, ValueError) and "digits" in str(cause):  # Python's int() limit
        message = f"is not taken here: a number in it has more than {sys.get_int_max_str_digits()} digits"
    else:
        message = "is not valid JSON"
    return field_error("body", message)


def install(app: FastAPI, error_page: Optional[ErrorPage] = None) -> None:
    """Answer every error as a problem (``error_page``: as a page, when a browser asked for one)."""

    @app.exception_handler(EnclaveError)
    async def enclave_error(request: Request, exc: EnclaveError) -> Response:
        if error_page is not None and wants_page(request):
            return error_page(request, exc.title, exc.message, exc.status)
        if exc.status >= 500:
            log.warning("%s %s failed: %s", request.method, request.url.path, exc)
        return from_error(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # typed request bodies and query strings (queue specs are checked by parse_spec)
        error = spec_error(list(exc.errors()), "a field of this request", route_rules(request))
        return from_error(error)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        headers = dict(exc.headers or {})
        if exc.status_code == 400 and detail == PARSE_FAILURE:
            return from_error(_parse_failure(exc))
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"There is no route {request.url.path}."
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request) or headers.get("Allow", "")
            detail = f"{request.url.path} does not take {request.method}; it takes {headers['Allow']}."
        title = getattr(exc, "title", None) or {404: "Not found", 405: "Method Not Allowed"}.get(exc.status_code, detail)
        if error_page is not None and wants_page(request):  # a page a browser asked for: the console's
            page = error_page(request, title, detail, exc.status_code)
            page.headers.update(headers)
            return page
        return problem(exc.status_code, title, detail, headers=headers or None)

    async def broker_error(request: Request, exc: Exception) -> Response:
        error = _broker_did_not_answer(request.method, request.url.path, exc)  # logged, page or not
        if error_page is not None and wants_page(request):  # a page a browser asked for: the console's
            page = error_page(request, error.title, error.message, error.status)
            page.headers["Retry-After"] = RETRY_AFTER
            return page
        return from_error(error)

    for kind in BROKER_ERRORS:
        app.add_exception_handler(kind, broker_error)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        title, detail = "Internal error", "The server failed to handle the request; see its log."
        if error_page is not None and wants_page(request):  # a page a browser asked for: the console's
            return error_page(request, title, detail, 500)
        return problem(500, title, detail)
