"""The typed dependencies the routes take: the control plane the app serves (web/plane.py) and
the part of it each route works with, so that no route reaches through the runtime itself."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import BeforeValidator

from ..errors import field_error
from ..queues.contents import Contents
from ..queues.deadletters import DeadLetterOps
from ..queues.messages import Messages
from ..service import QueueService
from ..spec import shown
from ..web.plane import ControlPlane, plane, queue_service


def _plane(request: Request) -> ControlPlane:
    return plane(request)


def _service(request: Request) -> QueueService:
    return queue_service(request)


def _messages(request: Request) -> Messages:
    return queue_service(request).messages


def _contents(request: Request) -> Contents:
    return queue_service(request).contents


def _dead_letters(request: Request) -> DeadLetterOps:
    return queue_service(request).dead_letters


Plane = Annotated[ControlPlane, Depends(_plane)]
Service = Annotated[QueueService, Depends(_service)]
MessagesOf = Annotated[Messages, Depends(_messages)]
ContentsOf = Annotated[Contents, Depends(_contents)]
DeadLettersOf = Annotated[DeadLetterOps, Depends(_dead_letters)]


_DIGITS = re.compile(r"[0-9]{1,20}")
_DECIMAL = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?")


def _written(pattern: re.Pattern[str], rule: str) -> BeforeValidator:
    """A query parameter's text read only as ``pattern`` spells numbers: Python and pydantic also
    read ``1_0``, ``+5``, `` 5`` and other scripts' digits, which no rule of ours names."""
    def check(value: Any) -> Any:
        if isinstance(value, str) and not pattern.fullmatch(value):
            raise ValueError(rule)
        return value
    return BeforeValidator(check)


#: an integer query parameter (``?limit=10``): ASCII digits, nothing else. After its ``Query()``
#: in the parameter's ``Annotated`` (before it, the OpenAPI document loses the Query's bounds)
DIGITS = _written(_DIGITS, "must be written in digits 0-9")
#: a number query parameter (``?wait_seconds=2.5``): digits, and a decimal point
DECIMAL = _written(_DECIMAL, "must be written in digits 0-9, with a decimal point if any")


def _query_names(dependant: Any) -> frozenset[str]:
    """The query parameters a route takes: its own and its dependencies'."""
    names = {getattr(param, "alias", None) or param.name for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


async def check_query(request: Request) -> None:
    """The API-wide dependency: a query string names only the route's own parameters, each once.
    An unknown one (a typo: ``?limt=5``) was ignored, and a repeated one (``?limit=1&limit=500``)
    was read as its last: what a proxy or a log showed of the request was not what ran."""
    if not request.url.path.startswith("/v1/") or not request.url.query:
        return
    dependant = getattr(request.scope.get("route"), "dependant", None)
    taken = _query_names(dependant) if dependant is not None else frozenset()
    seen: set[str] = set()
    for key, _ in request.query_params.multi_items():
        if key not in taken:
            accepted = f"it takes {', '.join(sorted(taken))}" if taken else "it takes none"
            raise field_error(key, f"is not a query parameter of this route ({accepted})",
                              f"Query parameter {shown(key)} is not one this route takes ({accepted}).")
        if key in seen:
            raise field_error(key, "is given more than once in the query string",
                              f"Query parameter {shown(key)} is given more than once; give it once.")
        seen.add(key)
