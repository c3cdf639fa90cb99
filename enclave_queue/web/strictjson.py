"""JSON request bodies read strictly: an object that names a key twice is refused.

``json.loads`` keeps the last of a repeated key, so ``{"name": "a", "name": "b"}`` created queue
``b``, and ``{"visibility_timeout_seconds": 5, "visibility_timeout_seconds": "x"}`` was checked
as ``"x"`` alone: what was sent was not what was read, however strictly each value is checked.
The routers of the API (api/routes/) and of the access keys (sqs/routes.py) use ``StrictJSONRoute``;
the refusal reaches the API's parse-failure answer (api/problems.py) as the cause of FastAPI's 400.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


class RepeatedKey(ValueError):
    """A JSON object with the same key twice."""


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise RepeatedKey(f"it names the key {key[:64]!r} twice")
        seen[key] = value
    return seen


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), object_pairs_hook=_no_repeats)
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
