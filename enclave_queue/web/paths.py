"""What each path part must look like: one table (``PATH_RULES``) that every route's path
parameters, the API's and the console's, are checked against by ``check_path``, a dependency of
the whole app (api/app.py), so a name that breaks the rules of create never reaches the state
store or the broker.

Names (project, queue, secret, redrive id) that break their rule can name nothing: ``NotFound``
with the rule in the sentence. Handles the server gave out (a receipt, a dead letter's sequence)
that are malformed: ``SpecError`` naming the field, as for any other bad receipt. Names use the
patterns of spec.py (``ProjectName``, ``QueueName``), always matched in full (``re.fullmatch``:
``re.match`` with ``$`` lets a trailing newline through).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import fastapi.routing
from fastapi import Request
from starlette.routing import BaseRoute, Route

from ..errors import NotFound, out_of_range
from ..spec import (
    MAX_SEQUENCE,
    NAME_RULE,
    PROJECT_PATTERN,
    PROJECT_RULE,
    QUEUE_NAME_PATTERN,
    RECEIPT_PATTERN,
    RECEIPT_RULE,
    REDRIVE_PATTERN,
    REDRIVE_RULE,
    SECRET_PATTERN,
    SECRET_RULE,
    SEQUENCE_RULE,
    shown,
)

#: the console's queue page tabs (console/routes.py), in the order it shows them
QUEUE_TABS = ("settings", "messages", "dead-letters", "credentials", "metrics")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    text: str  #: the rule as a user reads it
    missing: str = ""  #: for names: the NotFound sentence, formatted with the path's parts
    maximum: int = 0  #: for numbers: the largest allowed (the smallest is 1)

    def check(self, field: str, value: str, params: Mapping[str, str]) -> None:
        """Raise NotFound (a name) or SpecError (a handle) if ``value`` breaks the rule."""
        if self.pattern.fullmatch(value) and (not self.maximum or 1 <= int(value) <= self.maximum):
            return
        if self.missing:
            context = {key: shown(part) for key, part in params.items()}
            raise NotFound(self.missing.format(**{**context, field: shown(value)}) + f": {self.text}.")
        raise out_of_range(field, self.text, shown(value))


#: every path parameter of every route, in the order they are checked (a bad project is named
#: before a bad queue in it). A new route's parameter needs a rule here: the app refuses to
#: start without one (``check_covered``).
PATH_RULES: dict[str, Rule] = {
    "project": Rule(PROJECT_PATTERN, f"a project is {PROJECT_RULE}", "Project {project} does not exist"),
    "name": Rule(QUEUE_NAME_PATTERN, f"a queue name is {NAME_RULE}", "Queue {name} does not exist in project {project}"),
    "secret": Rule(SECRET_PATTERN, f"a secret name is {SECRET_RULE}",
                   "Secret {secret} does not exist in project {project}"),
    "task_id": Rule(REDRIVE_PATTERN, f"a redrive id is {REDRIVE_RULE}",
                    "Redrive {task_id} of queue {name} does not exist"),
    "receipt": Rule(RECEIPT_PATTERN, RECEIPT_RULE),
    "seq": Rule(re.compile(r"[0-9]{1,19}"), SEQUENCE_RULE, maximum=MAX_SEQUENCE),
    "tab": Rule(re.compile("|".join(map(re.escape, QUEUE_TABS))), f"its tabs are {', '.join(QUEUE_TABS)}",
                "The queue page has no tab {tab}"),
}


def check_path_params(params: Mapping[str, Any]) -> None:
    """Check every path parameter against PATH_RULES; NotFound or SpecError for the first bad one."""
    texts = {key: str(value) for key, value in params.items()}
    for field, rule in PATH_RULES.items():
        if field in texts:
            rule.check(field, texts[field], texts)


async def check_path(request: Request) -> None:
    """The app-wide dependency: every route's path parameters follow their rules."""
    check_path_params(request.path_params)


def endpoints(routes: Iterable[BaseRoute]) -> list[Any]:
    """The routes (not mounts) of an app's route table, each with its whole ``path``, its
    ``methods`` and its ``param_convertors``. Newer FastAPI keeps an included router as one
    branch of the table; ``iter_route_contexts`` lists what is in it."""
    flatten = getattr(fastapi.routing, "iter_route_contexts", None)
    listed = list(flatten(list(routes))) if flatten else list(routes)
    return [route for route in listed if isinstance(getattr(route, "original_route", route), Route)]


def uncovered(routes: Iterable[BaseRoute]) -> list[str]:
    """'<path> {<param>}' for each path parameter of ``routes`` that PATH_RULES has no rule for."""
    return [f"{route.path} {{{param}}}" for route in endpoints(routes)
            for param in route.param_convertors if param not in PATH_RULES]


def check_covered(routes: Iterable[BaseRoute]) -> None:
    """RuntimeError naming each path parameter of ``routes`` that PATH_RULES has no rule for."""
    missing = uncovered(routes)
    if missing:
        raise RuntimeError(f"path parameters without a rule in web/paths.py: {', '.join(missing)}")
