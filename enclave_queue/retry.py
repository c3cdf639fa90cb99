"""Riding out a broker that answers "no responders" for a moment: ``retry_unavailable``.

nats-server answers JetStream API requests (stream and consumer info, creates, KV watches) with
"no responders" while an account's JetStream is not loaded yet: just after its claims were pushed,
or while the broker starts. (The configuration-file accounts of earlier versions caused the same
in every account at each reload.) Every layer that talks to the broker (the state store, broker/,
the queues, the controller) retries such a request here for a few seconds before it gives up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors

T = TypeVar("T")

RETRY_WINDOW = 3.0  #: seconds to keep retrying a request that found no responders

#: what a request into an account that is being reloaded looks like
UNAVAILABLE = (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError)
NO_PEERS = 10005  #: JetStream's err_code for "no suitable peers for placement"


def api_codes(exc: BaseException) -> tuple[int, int]:
    """A JetStream API error's status code and err_code, 0 for what it does not carry: nats-py's
    KeyValue errors (``KeyWrongLastSequenceError``, …) are ``APIError``s that set neither."""
    return getattr(exc, "code", None) or 0, getattr(exc, "err_code", None) or 0


def placement_pending(exc: BaseException) -> bool:
    """Whether ``exc`` is JetStream's "no suitable peers for placement": a cluster still forming
    (or a node short) has no peers to place a replicated stream on yet, which is not for long."""
    return isinstance(exc, nats.js.errors.BadRequestError) and api_codes(exc)[1] == NO_PEERS


async def retry_unavailable(call: Callable[[], Awaitable[T]], window: float = RETRY_WINDOW) -> T:
    """``await call()``, again and again for up to ``window`` seconds while nobody answers."""
    deadline = time.monotonic() + window
    delay = 0.01
    while True:
        try:
            return await call()
        except (*UNAVAILABLE, nats.js.errors.BadRequestError) as exc:
            if (isinstance(exc, nats.js.errors.BadRequestError) and not placement_pending(exc)) \
                    or time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
