"""What the API and the console need of the running control plane (server/runtime.py's
``Runtime``), as a Protocol, and where a request finds it: ``plane(request)``.

``attach`` puts it on the app (``app.state.runtime``) with the proxies the app trusts
(``app.state.proxies``, proxies.py), before any route or the request guard runs.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

from fastapi import FastAPI
from starlette.requests import HTTPConnection

from ..service import QueueService
from ..settings import EnclaveSettings
from .proxies import TrustedProxies
from .sessions import Sessions


class Exposition(Protocol):
    """The metrics registry (metrics/instruments.py)."""

    async def render(self, accept: str = "") -> tuple[bytes, str]: ...


class ControlPlane(Protocol):
    """The running control plane as the API and the console see it."""

    settings: EnclaveSettings
    sessions: Sessions
    metrics: Exposition
    leading: bool  #: whether this node does the work that must happen once (on a cluster, the lease's holder)

    @property
    def service(self) -> Optional[QueueService]: ...

    def health(self) -> tuple[str, str]: ...

    async def token_name(self, digest: str) -> Optional[str]: ...


def attach(app: FastAPI, runtime: Optional[ControlPlane]) -> None:
    """Give ``app`` the control plane it serves and the proxies it trusts (ENCLAVE_TRUSTED_PROXIES)."""
    app.state.runtime = runtime
    app.state.proxies = TrustedProxies.from_env()


def plane(conn: HTTPConnection) -> ControlPlane:
    """The control plane the app serves."""
    runtime: Any = conn.app.state.runtime
    return runtime


def queue_service(conn: HTTPConnection) -> QueueService:
    """The queue service of the control plane the app serves (started before the app is)."""
    service = plane(conn).service
    assert service is not None, "the HTTP app serves a started runtime"
    return service
