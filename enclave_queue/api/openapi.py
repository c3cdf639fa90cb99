"""The OpenAPI document, served at ``/openapi.json`` behind the token (guard.py).

FastAPI's document of the routes, completed with what it cannot see: every operation may answer
a JSON problem (``4XX`` and ``5XX`` → ``application/problem+json``, problems.py) instead of
FastAPI's own 422 shape; create and update take a QueueSpec and a QueuePatch (their routes read
plain objects, to refuse them with the spec's own sentences); path parameters follow the
patterns of web/paths.py; export answers JSON Lines; and every route wants a bearer token.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from ..spec import MAX_SEQUENCE, QueuePatch, QueueSpec
from ..web.paths import PATH_RULES
from .problems import MEDIA_TYPE
from .routes.messages import NDJSON

PROBLEM = {
    "title": "Problem",
    "description": "An RFC 9457 problem. `errors` names each bad field of a 422.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {"type": "array", "items": {
            "type": "object", "required": ["field", "message"],
            "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}},
    },
}

QUEUES = "/v1/projects/{project}/queues"
#: operations whose body the route reads as a plain object: (path, method) -> the model it is
BODIES = {(QUEUES, "post"): "QueueSpec", (QUEUES + "/{name}", "patch"): "QueuePatch"}
EXPORT = (QUEUES + "/{name}/export", "get")


def _patch_schema() -> dict[str, Any]:
    schema = QueuePatch.model_json_schema()
    # a patch may repeat the queue's fixed fields with their current values (routes/queues.py)
    for fixed in ("name", "project", "id"):
        schema["properties"][fixed] = {"type": "string", "description": "may be given only with its current value"}
    return schema


def document(app: FastAPI) -> dict[str, Any]:
    """The whole OpenAPI document of ``app``'s API routes."""
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                         description="Enclave Queues: managed queues over NATS JetStream (see docs/api.md).")
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas.update(Problem=PROBLEM, QueueSpec=QueueSpec.model_json_schema(), QueuePatch=_patch_schema())
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    schema["security"] = [{"bearer": []}]
    problem = {"content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)  # FastAPI's own validation error shape: ours is a problem
            responses["4XX"] = {"description": "A client error, as a JSON problem", **problem}
            responses["5XX"] = {"description": "A server or broker error, as a JSON problem", **problem}
            for parameter in operation.get("parameters", []):
                _constrain(parameter)
            model = BODIES.get((path, method))
            if model is not None:
                operation["requestBody"] = {"required": True, "content": {
                    "application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}}}
            if (path, method) == EXPORT:
                responses["200"] = {"description": "Every message as it stands, one JSON object a line",
                                    "content": {NDJSON: {"schema": {"type": "string"}}}}
    return schema


def _constrain(parameter: dict[str, Any]) -> None:
    """A path parameter's rule from web/paths.py in its schema (names, receipts, sequences)."""
    if parameter.get("in") != "path" or parameter.get("name") not in PATH_RULES:
        return
    rule = PATH_RULES[parameter["name"]]
    schema = parameter.setdefault("schema", {})
    schema["description"] = rule.text
    if rule.maximum:
        schema.update(type="integer", minimum=1, maximum=MAX_SEQUENCE)
    else:
        schema["pattern"] = f"^{rule.pattern.pattern}$"


def install(app: FastAPI) -> None:
    """Build the document on first use (FastAPI serves ``app.openapi()`` at ``openapi_url``)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
