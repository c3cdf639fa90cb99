"""Opening a queue's session: one try at connecting as the queue's user, then reconnecting for ever,
with the broker's refusals told apart (a wrong password at first, revoked credentials later, a
permission denied) and handed to the session (session.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Optional

from nats.aio.client import Client as NATS

from ..errors import BrokerUnavailable, Unauthorized
from .credentials import Credentials
from .session import DEFAULT_TIMEOUT, Session

#: seconds between the connection's pings, and the pings left unanswered before it is taken as lost:
#: a node that stops answering without closing the socket (paused, cut off) is left within about
#: 15 s for another of the queue's nodes (nats-py's defaults: 2 minutes a ping, 2 missed)
PING_INTERVAL = 5.0
MAX_OUTSTANDING_PINGS = 3


async def open_session(creds: Credentials, *, name: str, connect_timeout: float) -> Session:
    """Connect as the queue's user: one try, then reconnect for ever. Raises ``Unauthorized`` if
    the broker refuses the username or password, ``BrokerUnavailable`` if it cannot be reached."""
    session: Optional[Session] = None
    refused: list[str] = []

    async def on_error(exc: Exception) -> None:
        # a refused login reaches this callback only from a connection attempt: the first one
        # (before the session exists) is final, a reconnect's is retried for a while
        text = str(exc)
        lowered = text.lower()
        if session is not None:
            drop_failed_attempt(session.nc)
        if "authorization violation" in lowered or "authentication" in lowered:
            if session is None:
                refused.append(text)
            else:
                session.on_reconnect_refused()
        elif "permissions violation" in lowered and session is not None:
            session.on_denied(text.removeprefix("nats: ").strip())

    async def on_reconnect() -> None:
        if session is not None:
            session.on_reconnected()

    async def on_closed() -> None:
        # the broker ended the connection for good ("account authentication expired": its account
        # was removed; "Authorization Violation"): nats-py closes at once, noting it as its last
        # error only
        last = session.nc.last_error if session is not None else None
        text = f"{type(last).__name__} {last}".lower()
        if session is not None and last is not None and ("authoriz" in text or "authenticat" in text):
            session.on_revoked()

    nc = NATS()
    # one try a node; but nats-py adds the nodes a cluster's node tells of, each with tries of its
    # own, round and round: a refused password given one node's URL had connected for ever
    deadline = connect_timeout * (len(creds.servers) + 2)
    try:
        await asyncio.wait_for(nc.connect(
            creds.servers, user=creds.username, password=creds.password, inbox_prefix=creds.inbox_prefix,
            name=name, connect_timeout=connect_timeout, error_cb=on_error, reconnected_cb=on_reconnect,
            closed_cb=on_closed, allow_reconnect=True,
            max_reconnect_attempts=1, reconnect_time_wait=0.25, pending_size=64 * 1024 * 1024,
            drain_timeout=DEFAULT_TIMEOUT, ping_interval=PING_INTERVAL, max_outstanding_pings=MAX_OUTSTANDING_PINGS,
        ), deadline)
        nc.options["max_reconnect_attempts"] = -1  # one try to connect, then reconnect for ever
    except Exception as exc:  # nats-py raises several unrelated types here
        with contextlib.suppress(Exception):
            await nc.close()
        if isinstance(exc, TimeoutError):
            exc = TimeoutError(f"no node took the connection within {deadline:g} s")
        if refused or "authorization" in str(exc).lower():
            raise Unauthorized(f"The broker refused user '{creds.username}': wrong username or password.") from exc
        raise BrokerUnavailable(f"Cannot connect to the broker at {creds.broker_url}: {exc!r}") from exc
    session = Session(nc, creds)
    try:
        await session.start()
    except BaseException:
        await nc.close()
        raise
    return session


def drop_failed_attempt(nc: Any) -> None:
    """Close the socket of a connection attempt that failed (refused, or no PONG within the connect
    timeout: the broker waits up to 2 s for the auth callout): nats-py 2.16 makes its next attempt
    on the same transport without closing the failed one's stream. For an error callback; only
    while an attempt is under way (a connection that is up, or draining, is left alone)."""
    if nc._transport is not None and (nc.is_connecting or nc.is_reconnecting):
        nc._transport.close()
