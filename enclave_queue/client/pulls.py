"""Pull requests to the queue's durable consumers (``CONSUMER.MSG.NEXT``) that outlast a broker
restart: ``pull`` asks one consumer, ``pull_any`` long-polls every priority lane at once.

receiving.py builds every way of taking messages on these two, over a session; they hand back
raw deliveries (``nats.aio.msg.Msg``), and what a cancelled pull had taken already is given back
at once (``acks.orphaned``). ``pull`` takes its replies on an inbox the next pull may take over
(``inboxes.PullInbox``: a ``get`` in a loop subscribes nothing a call); ``pull_any`` walks away
from the lanes that did not answer, so it drops its subscription every time.

A restarted broker forgets the pull requests it holds, and nothing tells the client. So a wait is
asked in requests of at most PULL_SLICE seconds, each sent when the last ended, and a request
still unanswered is sent again as soon as the connection is back (``Session.reconnect``). Every
pull returns by its deadline, PULL_GRACE later if the broker does not answer at all.
"""

from __future__ import annotations

import asyncio
from typing import Optional

from nats.aio.msg import Msg

from .. import envelope
from ..names import lane_consumer
from . import acks
from .session import Backoff, Pull, Session

#: seconds one pull request waits at most: a longer wait is asked in pieces, each sent when the last
#: ended, so a pull request the broker forgot (it restarted) costs at most this much of a wait
PULL_SLICE = 5.0
PULL_GRACE = 0.25  #: seconds past its expiry an unanswered pull request is waited for (the broker is down)
NO_WAIT_ANSWER = 1.0  #: seconds a pull that does not wait for messages waits for the broker's answer, at least
MIN_SLICE = 0.01  #: seconds: a wait shorter than this is asked without waiting


def next_subject(session: Session, level: int = 0) -> str:
    """Where pull requests for the consumer of priority ``level`` go (0: the queue's own consumer)."""
    consumer = session.credentials.consumer if level == 0 else lane_consumer(level)
    return f"$JS.API.CONSUMER.MSG.NEXT.{session.credentials.stream}.{consumer}"


async def pull(session: Session, batch: int, *, wait: float = 0.0, level: int = 0,
               answer_by: Optional[float] = None) -> list[Msg]:
    """Up to ``batch`` messages, waiting up to ``wait`` seconds for the first (0 = not at all),
    from the consumer of ``level``. Each pull has an inbox to itself while it lasts (``PullInbox``):
    delivered messages keep their original subject, so only the subscription tells whose they are.

    A restarted broker forgets pull requests, so a long wait is asked in requests of at most
    PULL_SLICE seconds, and a request is sent again when the connection comes back, when the
    broker did not take it ("no responders": JetStream starting, or a configuration reload), and
    when it went unanswered. It returns by the end of ``wait`` (PULL_GRACE later if the broker
    does not answer); a pull that does not wait, by ``answer_by`` (default: NO_WAIT_ANSWER from
    now). Messages beyond ``batch`` (two requests both answered) are given back at once.

    A ``get`` in a loop pays this once a message, so the common case (one request, answered)
    starts no task and subscribes nothing: two futures, one timer, one publish, and its request
    is encoded without ``json``."""
    session.check_open()
    loop = asyncio.get_running_loop()
    now = loop.time()
    deadline = now + wait
    if answer_by is None:
        answer_by = deadline + PULL_GRACE if wait > 0 else now + NO_WAIT_ANSWER
    token = session.token("p")
    waiter = Pull(batch, loop.create_future())
    session.waiting[token] = waiter  # a denial of its inbox's subscription (a new one) fails it too
    current = 0  #: the request whose end counts (a message from any of them does)
    held = False  #: a request the broker may still answer after this pull is over
    messages = waiter.messages

    def collect(msg: Msg) -> None:
        status = envelope.broker_status(msg)
        if status is None:
            messages.append(msg)
            if len(messages) < batch:
                return
        elif status == "100" or msg.subject.rsplit(".", 1)[1] != str(current):  # a heartbeat; an older request
            return
        else:
            waiter.status = status
            waiter.unanswered = status == "503"
        if not waiter.done.done():
            waiter.done.set_result(None)

    inbox = await session.inboxes.take(_stray)
    inbox.handler = collect
    subject = next_subject(session, level)
    backoff: Optional[Backoff] = None
    send, waits, ended, buffered, answer_at = True, False, True, False, 0.0
    reconnect = session.reconnect
    try:
        while True:
            if send:
                session.check_open()
                session.waiting[token] = waiter  # again: a failure meanwhile took it out and ended only the last
                held = held or not ended  # the last one, sent again before it ended, may be answered yet
                current, reply = inbox.reply()
                piece = min(deadline - loop.time(), PULL_SLICE)
                waits = piece >= MIN_SLICE
                request = _request(batch - len(messages), piece if waits else 0.0)
                buffered = not session.nc.is_connected  # nats-py sends it when the connection is back
                reconnect = session.reconnect
                await session.publish(subject, request, reply=reply)
                answer_at = loop.time() + (piece + PULL_GRACE if waits else NO_WAIT_ANSWER)
            until = answer_by if buffered and loop.time() >= answer_at else min(answer_at, answer_by)
            await _until(loop, waiter.done, reconnect, until)
            ended = waiter.done.done()
            if ended:
                waiter.done.result()  # raises PermissionDenied, Unauthorized or "Client is closed."
            if len(messages) >= batch or (ended and messages):
                break
            now = loop.time()
            if now >= (deadline if waits else answer_by) or (ended and not waits and not waiter.unanswered):
                break  # the wait is over, or the broker answered that nothing is there
            lost = reconnect.done()
            if lost:
                reconnect = session.reconnect
            # a request that ended, or went unanswered, is sent again; after a reconnect so is one sent
            # before it, and a waiting one in any case (one nats-py buffered went out late: its expiry too)
            send = ended or (now >= answer_at and not buffered) or (lost and (waits or not buffered))
            buffered = buffered and not lost
            if ended and waiter.status != "408":  # not "expired": no responders, or an odd end; not at once
                backoff = backoff or Backoff()
                await asyncio.sleep(backoff.next())
            waiter.again()
        # a request neither filled nor ended (the broker did not answer in time) may be answered yet
        held = held or not waiter.done.done()
    except asyncio.CancelledError:
        held = held or not waiter.done.done()  # cancelled mid-wait: the broker may still hold it
        acks.orphaned(session, messages)
        raise
    finally:
        session.waiting.pop(token, None)
        await session.inboxes.give(inbox, spare=not held)
    if len(messages) > batch:
        acks.orphaned(session, messages[batch:])
        del messages[batch:]
    return messages


def _request(batch: int, expires: float) -> bytes:
    """A pull request's body: ``batch`` messages, waiting ``expires`` seconds (0: not at all)."""
    if expires:
        return b'{"batch":%d,"expires":%d}' % (batch, int(expires * 1e9))
    return b'{"batch":%d,"no_wait":true}' % batch


async def _until(loop: asyncio.AbstractEventLoop, ended: asyncio.Future[None], reconnect: asyncio.Future[None],
                 until: float) -> None:
    """Wait until ``ended`` or ``reconnect`` is done or the loop's clock reaches ``until``: what
    ``asyncio.wait`` does for two futures and a timeout, without its per-call set, checks and
    bookkeeping (a get in a loop pays it once a message)."""
    if ended.done() or reconnect.done():
        return
    woken = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    timer = loop.call_at(max(until, loop.time() + 0.001), wake)
    ended.add_done_callback(wake)
    reconnect.add_done_callback(wake)
    try:
        await woken
    finally:
        timer.cancel()
        ended.remove_done_callback(wake)
        reconnect.remove_done_callback(wake)


def _stray(session: Session, msg: Msg) -> None:
    """A delivery while no pull holds the inbox (nothing should be left to answer): given back."""
    if envelope.broker_status(msg) is None:
        acks.orphaned(session, [msg])


async def pull_any(session: Session, levels: tuple[int, ...], wait: float) -> list[Msg]:
    """A long poll of every priority lane at once (one message each), ended by the first message
    to arrive. The other lanes' pull requests end with the inbox: the broker delivers nothing
    to a pull request whose reply subject nobody listens to any more (measured). A message a
    lane sent just before that is kept too; the highest priority comes first. As ``pull``, it
    asks in rounds of at most PULL_SLICE seconds, and asks again at once when every lane's
    request ended or the connection came back; it returns by the end of ``wait`` (PULL_GRACE
    later if the broker does not answer)."""
    session.check_open()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    token = session.token("p")
    waiter = Pull(1, loop.create_future())  # failed by a permission denial or close
    session.waiting[token] = waiter
    inbox = f"{session.mux}.pull.{token}"  # .<round>.<lane>
    current = 0  #: the round whose requests' ends count

    over = False  #: the poll returned: what arrives now is given back

    async def collect(msg: Msg) -> None:
        status = envelope.broker_status(msg)
        if over:
            _stray(session, msg)
            return
        if status is None:
            waiter.messages.append(msg)
        elif status == "100" or msg.subject.rsplit(".", 2)[1] != str(current):  # a heartbeat; an older round
            return
        else:  # a lane's request ended
            waiter.ended += 1
            waiter.status = status if waiter.status in (None, "408") else waiter.status
            if waiter.ended < len(levels):
                return
        if not waiter.done.done():
            waiter.done.set_result(None)

    sub = await session.nc.subscribe(f"{inbox}.*.*", cb=collect)
    backoff = Backoff()
    try:
        while True:
            piece = min(deadline - loop.time(), PULL_SLICE)
            if piece < MIN_SLICE:
                break
            session.check_open()
            session.waiting[token] = waiter  # again: a failure meanwhile took it out and ended only the last
            current += 1
            request = _request(1, piece)
            reconnect = session.reconnect
            for level in levels:
                await session.publish(next_subject(session, level), request, reply=f"{inbox}.{current}.{level}")
            await asyncio.wait({waiter.done, reconnect}, timeout=piece + PULL_GRACE, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done.done():
                waiter.done.result()  # raises PermissionDenied, Unauthorized or "Client is closed."
            if waiter.messages or loop.time() >= deadline:
                break
            if waiter.done.done() and waiter.status != "408":  # no responders, or an odd end: not at once
                await asyncio.sleep(backoff.next())
            waiter.again()
    except asyncio.CancelledError:
        acks.orphaned(session, waiter.messages)
        raise
    finally:
        session.waiting.pop(token, None)
        over = True
        await session.inboxes.retire(sub)  # the other lanes' requests may be answered yet: given back
    return sorted(waiter.messages, key=lambda m: -envelope.priority_of(m.subject))
