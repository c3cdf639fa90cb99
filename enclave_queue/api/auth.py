"""Bearer-token authentication for every route but ``/healthz``."""

from __future__ import annotations

from fastapi import Request

from ..auth.tokens import token_digest
from ..errors import Unauthorized


async def require_token(request: Request) -> str:
    """The caller's token name; Unauthorized if the token is missing or unknown."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("This route needs an API token: send 'Authorization: Bearer <token>'.")
    runtime = request.app.state.runtime
    name = await runtime.token_name(token_digest(token.strip()))
    if name is None:
        raise Unauthorized("The API token is not valid.")
    return name
