"""One queue's connection to the broker: the reply multiplexer, requests with the SDK's one retry
of "no responders", failures fanned out to whatever waits, and close.

Everything else in the SDK sits on a ``Session``: settings.py caches the queue's settings read
through it, acks.py confirms acknowledgements, pulls.py asks the queue's consumers, and the verbs
(sending.py, batching.py, receiving.py, inspecting.py, message.py) publish and request through it.
It imports none of them.

Replies to single requests come to one subscription, ``<mux>.<token>``, and find their waiter by
token. Waits with many replies (a pull, a batch of PubAcks) register a waiter under
their token too, so that a permission denial, revoked credentials or ``close`` fails them at once
(``fail_all``), and take their replies on an inbox of their own under ``<mux>.<kind>.<token>``:
a pull on a ``PullInbox`` it may hand on to the next pull (inboxes.py), the rest on a
subscription they drop.

"No responders" (a ``503`` status) is how the broker answers a request for a moment during a
configuration reload, and while JetStream starts after a restart. ``request``
asks again for up to RETRY_WINDOW seconds (``_retry``, the one such loop); the
loops that resend for reasons of their own (a put, a pull, an acknowledgement, until their own
deadline) pause the same way (``Backoff``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, Optional, TypeVar

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.nuid import NUID

from .. import envelope
from ..errors import BrokerUnavailable, EnclaveError, NotFound, PermissionDenied, Unauthorized, from_problem
from ..names import DESK_SUBJECT, ERRORS_SUBJECT, NOTES_SUBJECT, REJECT_SUBJECT
from .credentials import Credentials
from .inboxes import Inboxes

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0  #: seconds to wait for the broker to confirm an operation
RETRY_WINDOW = 3.0  #: seconds to keep asking a request nobody answered (a reload)
RESEND_AFTER = 2.0  #: seconds without an answer before a put or an acknowledgement is sent again
FIRST_PAUSE = 0.01  #: seconds before the first try again after "no responders"
LAST_PAUSE = 0.25  #: seconds between tries again at most (the pause doubles up to it)
STREAM_NOT_FOUND = 10059  #: the JetStream API's err_code for a stream that does not exist
#: seconds a reconnect may go on being refused before the credentials count as revoked: the broker
#: refuses every login while the control plane's auth callout is away (a broker restart it has not
#: caught up with, a control process restarting), which says nothing about the credentials
REFUSED_RECONNECT_GRACE = 30.0


def unavailable(msg: Msg) -> bool:
    """Whether a reply is the broker's "no responders" (status 503)."""
    return envelope.broker_status(msg) == "503"


class Backoff:
    """The pauses between tries after "no responders": FIRST_PAUSE, doubling up to LAST_PAUSE."""

    __slots__ = ("delay",)

    def __init__(self) -> None:
        self.delay = FIRST_PAUSE  #: seconds: the next pause

    def next(self) -> float:
        """The next pause in seconds (and the one after doubles)."""
        delay, self.delay = self.delay, min(self.delay * 2, LAST_PAUSE)
        return delay


FINISH_WAIT = 5.0  #: seconds ``close`` gives acks being confirmed and iterations handing back


class Pull:
    """A waiter for many replies on an inbox of its own (a pull, a direct get): what arrived, and
    ``done``, which ends the current request and which ``fail_all`` fails."""

    __slots__ = ("want", "messages", "done", "unanswered", "status", "ended")

    def __init__(self, want: int, done: asyncio.Future[None]) -> None:
        self.want = want
        self.messages: list[Msg] = []
        self.done = done
        self.unanswered = False  #: the broker said "no responders" (a configuration reload)
        self.status: Optional[str] = None  #: how the current request ended ("408": expired, "404": nothing, …)
        self.ended = 0  #: requests of the current round that ended (one a lane: ``pulls.pull_any``)

    def again(self) -> None:
        """Before the next request: a new future for it to end (``fail_all`` fails the current one)."""
        if self.done.done():
            self.done = asyncio.get_running_loop().create_future()
        self.unanswered, self.status, self.ended = False, None, 0


class Session:
    """One connection, authenticated as the queue's own user, and what waits for its replies."""

    def __init__(self, nc: Client, credentials: Credentials) -> None:
        self.nc = nc
        self.credentials = credentials
        self.subject = credentials.subject  #: the queue's own subject
        self.mux = f"{credentials.inbox_prefix}.{NUID().next().decode()}"  #: the prefix of every reply subject
        self.waiting: dict[str, asyncio.Future[Msg] | Pull] = {}  #: by token: failed by ``fail_all``
        #: resolved at the next reconnect: answers to requests sent before it are lost with the old connection
        self.reconnect: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self._ids = itertools.count(1)
        self._sub: Any = None
        self.inboxes = Inboxes(self)  #: the pulls' inboxes (inboxes.py)
        self._broken: Optional[EnclaveError] = None  #: why the broker cut us off for good
        self._closing: Optional[asyncio.Task[None]] = None
        self._refused_since: Optional[float] = None  #: when the reconnects began to be refused
        self._tasks: set[asyncio.Task[Any]] = set()  #: background work: cancelled by ``close``
        #: work ``close`` lets finish first: acks' confirmations, iterations left early handing back
        self._finishing: set[asyncio.Task[Any]] = set()
        self._shutting = False
        self._sub_denied = ""  #: the broker's refusal of the replies' subscription, if it refused it

    async def start(self) -> None:
        """Subscribe to the replies, and make sure the broker allows it: a wrong ``inbox_prefix``
        was told once, by the first call, and every call after it waited out its timeout as if the
        broker were down. PermissionDenied naming ``inbox_prefix`` if it does not."""
        self._sub = await self.nc.subscribe(f"{self.mux}.*", cb=self._on_reply)
        try:
            # the broker answers the subscription before the PING after it; twice: nats-py takes the
            # first PONG to come for the first PING it waits for, and one of the connect's may still
            # be on its way (the refusal then came after connect had returned, about 1 time in 10)
            for _ in range(2):
                await self.nc.flush(DEFAULT_TIMEOUT)
        except (nats.errors.Error, TimeoutError):  # a broker slow to answer: the calls will tell
            return
        for _ in range(3):  # nats-py hands its error to the callback in a task of its own
            await asyncio.sleep(0)
        if self._sub_denied:
            raise PermissionDenied(f"The broker refused this queue's user its replies' subjects "
                                   f"({self._sub_denied}): inbox_prefix must be the one the queue's credentials "
                                   f"give (got {self.credentials.inbox_prefix!r}).")

    # -- waiters and failures ---------------------------------------------------------------------

    async def _on_reply(self, msg: Msg) -> None:
        waiter = self.waiting.pop(msg.subject[len(self.mux) + 1:], None)
        if isinstance(waiter, asyncio.Future) and not waiter.done():
            waiter.set_result(msg)

    def on_reconnected(self) -> None:
        """The connection is back (nats-py resubscribed and flushed what was buffered): wake whatever
        waits for an answer to something sent before, which the broker may never have seen (a
        restarted broker forgets pull requests too), so it is sent again."""
        self._refused_since = None
        current, self.reconnect = self.reconnect, asyncio.get_running_loop().create_future()
        if not current.done():
            current.set_result(None)

    def _fail_all(self, exc: Exception) -> None:
        waiting, self.waiting = self.waiting, {}
        for waiter in waiting.values():
            future = waiter.done if isinstance(waiter, Pull) else waiter
            if not future.done():
                future.set_exception(exc)
                # marked seen: one whose caller stopped waiting (a resend between tries) was logged as
                # "Future exception was never retrieved" at close; a caller that awaits it still gets it
                future.exception()

    def on_denied(self, text: str) -> None:
        """The broker refused something this user sent (a permissions violation): fail what waits."""
        if "subscription" in text.lower() and self.mux.lower() in text.lower():
            self._sub_denied = text
        self._fail_all(PermissionDenied(f"The broker refused this queue's user: {text}."))

    def on_reconnect_refused(self) -> None:
        """The broker refused a reconnect: revoked once refusals have gone on for the grace."""
        now = asyncio.get_running_loop().time()
        if self._refused_since is None:
            self._refused_since = now
        elif now - self._refused_since >= REFUSED_RECONNECT_GRACE:
            self.on_revoked()

    def on_revoked(self) -> None:
        """The broker no longer accepts these credentials (queue deleted, password changed):
        stop reconnecting and fail everything with Unauthorized."""
        self._broken = Unauthorized(f"The broker refused user '{self.credentials.username}'; "
                                    "the queue was deleted or its credentials changed.")
        self._fail_all(self._broken)
        if self._closing is None and not self.nc.is_closed:
            self._closing = asyncio.get_running_loop().create_task(self.nc.close())

    async def publish(self, subject: str, payload: bytes, *, reply: str = "",
                      headers: Optional[dict[str, str]] = None) -> None:
        """``nc.publish``, with a connection nats-py closed told as the session's own error:
        ``Unauthorized`` once the broker cut the user off (its queue deleted, say), "Client is
        closed.", else ``BrokerUnavailable``. nats-py may close before its callback has said why,
        and its ``ConnectionClosedError`` reached the app, past every ``except EnclaveError``."""
        try:
            await self.nc.publish(subject, payload, reply=reply, headers=headers)
        except nats.errors.ConnectionClosedError:
            for _ in range(3):  # the closed callback, in a task of its own, says why
                await asyncio.sleep(0)
            self.check_open()
            raise BrokerUnavailable("The connection to the broker was closed.") from None

    def check_open(self) -> None:
        """Raise ``RuntimeError`` once closed, ``Unauthorized`` once the broker cut the user off."""
        if self.closed:
            raise RuntimeError("Client is closed.")
        if self._broken is not None:
            raise self._broken

    def token(self, kind: str = "") -> str:
        """A token no other waiter of this session has (``kind``: a prefix telling waits apart)."""
        return f"{kind}{next(self._ids)}"

    def new_waiter(self) -> tuple[str, asyncio.Future[Msg]]:
        """A token and the future its reply, on ``<mux>.<token>``, resolves."""
        token = self.token()
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self.waiting[token] = future
        return token, future

    def broken_waiter(self, kind: str) -> tuple[str, asyncio.Future[Msg]]:
        """For a wait with an inbox of its own: a token and a future only ``fail_all`` resolves
        (a permission denial, revoked credentials, close). End it with ``stop_waiting``."""
        token, future = self.token(kind), asyncio.get_running_loop().create_future()
        self.waiting[token] = future
        return token, future

    def stop_waiting(self, token: str, broken: asyncio.Future[Any]) -> None:
        """A wait of ``broken_waiter`` is over: stop telling it about failures."""
        self.waiting.pop(token, None)
        if broken.done():
            broken.exception()  # retrieved, so asyncio does not warn about it
        else:
            broken.cancel()

    async def await_reply(self, token: str, future: asyncio.Future[Any], timeout: float, what: str) -> Any:
        """The future's result; ``BrokerUnavailable`` naming ``what`` after ``timeout`` seconds."""
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            self.waiting.pop(token, None)
            raise BrokerUnavailable(f"The broker did not confirm {what} within {timeout:g} s.") from None

    def spawn(self, coro: Coroutine[Any, Any, T], *, finish: bool = False) -> asyncio.Task[T]:
        """Run ``coro`` in a task of its own, cancelled by ``close`` if still running (a lease
        keeper, a prefetch, a settings read); with ``finish`` (acks being confirmed), one ``close``
        waits for first, up to FINISH_WAIT."""
        task = asyncio.ensure_future(coro)
        held = self._finishing if finish else self._tasks
        held.add(task)
        task.add_done_callback(held.discard)
        return task

    @contextlib.contextmanager
    def finishing(self) -> Iterator[None]:
        """Within this block the current task is work ``close`` waits for (an iteration handing back
        and confirming what it took, left early)."""
        task = asyncio.current_task()
        if task is not None:
            self._finishing.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._finishing.discard(task)

    # -- requests ---------------------------------------------------------------------------------

    async def _retry(self, ask: Callable[[], Awaitable[T]], unanswered: Callable[[T], bool]) -> T:
        """``ask()`` again while its answer is "no responders", for up to RETRY_WINDOW seconds;
        the last answer as it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETRY_WINDOW
        backoff = Backoff()
        while True:
            answer = await ask()
            if not unanswered(answer) or loop.time() + backoff.delay > deadline:
                return answer
            await asyncio.sleep(backoff.next())

    async def request(self, subject: str, payload: bytes, timeout: float = DEFAULT_TIMEOUT, *,
                      resend: bool = False) -> Msg:
        """A request through the reply multiplexer (so a permission denial fails it at once).
        "No responders" is asked again (``_retry``); the last answer is returned as it is.
        ``resend`` (for a request that may be taken twice): also asked again when the connection
        came back before its answer, within ``timeout`` in all. Raises ``BrokerUnavailable`` when
        no answer came in time."""
        until = asyncio.get_running_loop().time() + timeout

        async def ask() -> Msg:
            loop = asyncio.get_running_loop()
            while True:
                self.check_open()
                token, future = self.new_waiter()
                reconnect = self.reconnect
                await self.publish(subject, payload, reply=f"{self.mux}.{token}")
                if not resend:
                    return await self.await_reply(token, future, timeout, f"the request to {subject}")
                await asyncio.wait({future, reconnect}, timeout=max(until - loop.time(), 0.001),
                                   return_when=asyncio.FIRST_COMPLETED)
                if future.done():
                    return future.result()
                self.waiting.pop(token, None)
                future.cancel()
                if not (reconnect.done() and loop.time() < until):
                    raise BrokerUnavailable(f"The broker did not confirm the request to {subject} within "
                                            f"{timeout:g} s.")

        return await self._retry(ask, unavailable)

    async def info(self, verb: str, payload: bytes = b"", *, missing: Optional[int] = None) -> Any:
        """A JetStream API read of the queue's own (``STREAM.INFO.<stream>``, ``CONSUMER.INFO.…``,
        ``STREAM.MSG.GET.<stream>``), asked again if the connection came back before its answer (a
        read: safe to repeat; the first one after a broker restart can be lost with the connection
        it went out on). None when the API answers the error code ``missing``."""
        reply = await self.request(f"$JS.API.{verb}", payload, resend=True)
        if unavailable(reply):
            raise BrokerUnavailable(f"The broker did not answer {verb.split('.')[0]} info; try again.")
        answer = json.loads(reply.data)
        if "error" in answer:
            if missing is not None and answer["error"].get("err_code") == missing:
                return None
            if answer["error"].get("err_code") == STREAM_NOT_FOUND:  # its queue is not made yet, or gone
                raise NotFound(f"The queue of subject '{self.subject}' has no stream on the broker: it is still "
                               "being created (wait until it is Ready: 'enclave queue create --wait'), or it was "
                               "deleted.")
            raise EnclaveError(f"The broker refused {verb}: {answer['error'].get('description')}.")
        return answer

    # -- the control plane's requests -------------------------------------------------------------

    async def desk(self, verb: str, body: dict[str, Any], timeout: float = 10.0, *, resend: bool = False) -> Any:
        """Ask the control plane's desk (its request endpoint for apps) about this queue; its result,
        or the error it answered as the same exception class the HTTP API would raise. ``resend``:
        sent again after a reconnect (a verb the desk answers the same when asked twice)."""
        reply = await self.request(f"{DESK_SUBJECT}.{verb}", json.dumps(body).encode(), timeout=timeout,
                                   resend=resend)
        if unavailable(reply):
            raise BrokerUnavailable(f"The control plane is not running; '{verb}' was not done.")
        answer = json.loads(reply.data)
        if "error" in answer:
            problem = answer["error"]
            raise from_problem(int(problem.get("status", 500)), problem)
        return answer["result"]

    async def note(self, note: dict[str, Any]) -> None:
        """Tell the control plane about a put it must act on (stored durably). A note the broker
        could not store is given up after RETRY_WINDOW: the message itself is stored already, and a
        worker's SDK still drops it on receipt after its deadline."""
        with contextlib.suppress(EnclaveError):
            await self.request(NOTES_SUBJECT, json.dumps(note).encode())

    async def note_error(self, message_id: int, error: str) -> None:
        """Store ``error`` as the message's error note (its ``last_error`` from now on)."""
        reply = await self.request(f"{ERRORS_SUBJECT}.{message_id}", envelope.one_line(error).encode(),
                                   resend=True)  # a note stored twice reads as once
        if unavailable(reply):
            raise BrokerUnavailable("The broker did not store the error note (no stream for it yet).")

    async def reject(self, sequence: int, message_id: int, receive_count: int, error: Optional[str]) -> str:
        """Have the control plane dead-letter a message now: 'moved', 'discarded' or 'gone'."""
        body = {"seq": sequence, "id": message_id, "receive_count": receive_count, "error": error,
                "subject": self.subject}
        # sent again after a reconnect: the control plane answers a repeat as it answered the first
        reply = await self.request(REJECT_SUBJECT, json.dumps(body).encode(), timeout=10, resend=True)
        if unavailable(reply):
            raise BrokerUnavailable("The control plane is not running; the message was not rejected.")
        answer = json.loads(reply.data)
        if "error" in answer:
            raise EnclaveError(f"The message was not rejected: {answer['error']}")
        return str(answer["result"])

    async def tell_dead(self, sequence: int, receive_count: int) -> None:
        """Tell the control plane that a message was handed back on its last receive, so it moves it
        to the dead-letter queue now. Not answered nor waited for: should the word be lost, the
        broker's advisory has the message moved (``envelope.DEAD_GRACE``)."""
        if self.closed:
            return
        with contextlib.suppress(nats.errors.Error, OSError):  # buffered while reconnecting; lost if closed
            await self.nc.publish(REJECT_SUBJECT, envelope.dead_word(sequence, receive_count, self.subject))

    # -- lifecycle --------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the background work, fail whatever waits with "Client is closed.", and drain and
        close the connection."""
        if self.closed or self._shutting:
            return
        self._shutting = True
        # an iteration left with break is closed by the loop a moment later (its generator's
        # finalizer), and acks given to an iteration are confirmed in a task: both finish first,
        # or an ack that returned would never be sent (the message came back, done twice)
        for _ in range(3):
            await asyncio.sleep(0)
        finishing = [task for task in self._finishing if task is not asyncio.current_task()]
        if finishing:
            await asyncio.wait(finishing, timeout=FINISH_WAIT)
        self.closed = True
        tasks = list(self._tasks)
        for task in tasks:  # an iteration left early: its next batch is not wanted; leases lapse
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._fail_all(RuntimeError("Client is closed."))
        if self._closing is not None:
            with contextlib.suppress(OSError):  # the refused connection's socket was closed under it
                await self._closing
        if self.nc.is_connected:
            try:
                # nats-py times the subscriptions' drain itself (cancelling it from outside leaves its
                # gathered drains' CancelledError unretrieved); the margin is for its closing flush
                await asyncio.wait_for(self.nc.drain(), DEFAULT_TIMEOUT + 2)
                return
            except (TimeoutError, OSError, nats.errors.Error):
                pass
        if not self.nc.is_closed:
            with contextlib.suppress(OSError):
                await self.nc.close()
        if self.nc._subs:  # nats-py gave up half-way: the broker reset the connection under it
            _finish_close(self.nc)


def _finish_close(nc: Any) -> None:
    """What nats-py 2.16's close leaves undone when the broker resets the connection while it
    flushes (it raises ConnectionResetError half-way, after marking itself closed): stop the
    subscriptions' delivery tasks and drop the transport."""
    for sub in list(nc._subs.values()):
        task = sub._wait_for_msgs_task
        if task is not None and not task.done():
            task.cancel()
    nc._subs.clear()
    if nc._transport is not None:
        nc._transport.close()
