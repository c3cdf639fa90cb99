"""The typed dependencies the routes take: the control plane the app serves (web/plane.py) and
the part of it each route works with, so that no route reaches through the runtime itself."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..queues.contents import Contents
from ..queues.deadletters import DeadLetterOps
from ..queues.messages import Messages
from ..service import QueueService
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
