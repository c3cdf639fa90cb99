"""The inboxes pulls take their messages on: ``PullInbox``, one subscription a pull holds while it
lasts, and ``Inboxes``, a session's spares of them and the retirement of one the broker may still
send to.

A pull's delivered messages keep their original subject, so only the subscription tells whose
they are: an inbox is never shared by two pulls at once. A pull that is over and left no request
the broker could still answer gives its inbox back for the next (``Inboxes.give``), so a ``get``
in a loop makes and drops no subscription a call (two protocol messages, and the broker's subject
cache redone for both). One that may still be answered is retired instead (``Inboxes.retire``):
the broker delivers nothing to a pull request whose reply subject nobody listens to.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Callable, Coroutine
from typing import Any, Optional, Protocol

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

SPARE_INBOXES = 16  #: pull inboxes a session keeps for the next pulls (as many as pull at once, up to this)
#: seconds a pull's subscription the broker may still have sent to goes on taking what arrives,
#: once the broker was told to send no more (``Inboxes.retire``): each such message is given back
LATE_SECONDS = 2.0


class PullInbox:
    """A subscription, ``<prefix>.*``, that one pull at a time takes its replies on, each request
    on a reply subject of its own (``reply``). Whatever arrives while no pull holds it goes to
    ``stray`` (pulls.py gives messages back)."""

    def __init__(self, nc: Client, prefix: str, stray: Callable[[Msg], None]) -> None:
        self.prefix = prefix
        self.handler: Optional[Callable[[Msg], None]] = None  #: the pull that holds it
        self._nc = nc
        self._stray = stray
        self._requests = itertools.count(1)
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(f"{self.prefix}.*", cb=self._route)

    async def _route(self, msg: Msg) -> None:
        (self.handler or self._stray)(msg)

    def reply(self) -> tuple[int, str]:
        """The next request's number and reply subject (numbers go on across pulls)."""
        number = next(self._requests)
        return number, f"{self.prefix}.{number}"

    async def drop(self) -> None:
        with contextlib.suppress(nats.errors.Error):  # the connection may be closing
            await self._sub.unsubscribe()

    @property
    def subscription(self) -> Any:
        return self._sub


class Owner(Protocol):
    """What ``Inboxes`` uses of its session (session.py, which imports this module)."""

    nc: Client
    mux: str
    closed: bool

    def token(self, kind: str = "") -> str: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...


class Inboxes:
    """A session's pull inboxes: the spares for the next pulls, and the retirement of the rest."""

    def __init__(self, session: Owner) -> None:
        self._session = session
        self._spare: list[PullInbox] = []

    async def take(self, stray: Callable[[Any, Msg], None]) -> PullInbox:
        """A ``PullInbox`` for one pull: a spare one, or a new one whose strays go to ``stray``
        (with the session)."""
        if self._spare:
            return self._spare.pop()
        session = self._session
        inbox = PullInbox(session.nc, f"{session.mux}.pull{session.token()}", functools.partial(stray, session))
        await inbox.start()
        return inbox

    async def give(self, inbox: PullInbox, *, spare: bool) -> None:
        """A pull is over with ``inbox``: kept for the next (``spare``: nothing of it can be answered
        any more), up to SPARE_INBOXES of them, or dropped."""
        inbox.handler = None  # what still arrives goes to its stray handler: given back
        if spare and not self._session.closed and len(self._spare) < SPARE_INBOXES:
            self._spare.append(inbox)
        elif spare:
            await inbox.drop()
        else:
            await self.retire(inbox.subscription)

    async def retire(self, sub: Any) -> None:
        """End a subscription a pull request the broker may still answer replies to: the broker
        is told at once to send it nothing more (it delivers nothing to a reply subject nobody
        listens to), but the subscription goes on taking, for LATE_SECONDS, what the broker sent
        already, so its callback gives that back. nats-py's ``unsubscribe`` would drop at once a
        message already read from the socket but not yet handed to the callback, leased to nobody
        for its visibility timeout (a loop busy as a wait ended lost one so). The UNSUB alone is
        nats-py 2.16's ``_send_unsubscribe`` (pinned; tests/integration/test_late_delivery.py)."""
        session = self._session
        if session.closed or not session.nc.is_connected:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
            return
        with contextlib.suppress(nats.errors.Error):
            await session.nc._send_unsubscribe(sub._id)
        session.spawn(_unsubscribe_later(sub))


async def _unsubscribe_later(sub: Any) -> None:
    await asyncio.sleep(LATE_SECONDS)
    with contextlib.suppress(nats.errors.Error):  # closed meanwhile, or the connection is
        await sub.unsubscribe()
