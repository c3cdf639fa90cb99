"""One receive from a queue's consumer on the control plane's side (the API's, the console's and
the SQS endpoint's receive), by pull requests of its own rather than nats-py's ``fetch``.

nats-py tells a broker's status reply (a pull's 404 or 408 end) by a ``Status`` header, and a
stored message may carry a ``Status`` header of its own (any client may write one): ``fetch``
took such a message for the end of its pull and left it leased, seen by no one, receive after
receive until it was dead-lettered. Here a delivery (it has an ack subject) is a message whatever
it carries (``envelope.broker_status``).

Three requests at most, none left open when the receive returns, so nothing is delivered to an
inbox nobody reads: ``no_wait`` for what is there now (the broker ends it at once: with 404 when
it has fewer); if nothing was, one message with ``expires`` (in rounds of at most PULL_SECONDS:
a restarted broker forgets a pending pull); once that one came, ``no_wait`` again for the rest of
the batch, which came with it or since.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Optional

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from ..envelope import broker_status

PULL_SECONDS = 2.0  #: seconds one waiting pull request lasts at most
ANSWER_GRACE = 2.0  #: seconds past a request's own end its end may take to arrive
NO_WAIT_ANSWER = 5.0  #: seconds a ``no_wait`` request may take to be answered
#: every other status ends a pull request: nothing (more) now, expired, the broker's refusals (409:
#: too many waiting, the consumer deleted or moved); 503 is "no responders"
HEARTBEAT = "100"  #: not asked for, and no end


async def pull(nc: Client, stream: str, consumer: str, count: int, wait: float,
               closing: Callable[[], bool] = lambda: False) -> list[Msg]:
    """Up to ``count`` deliveries of ``consumer`` on ``stream``, waiting up to ``wait`` seconds
    for the first, or until ``closing()`` says to stop waiting (at the end of a round: at most
    PULL_SECONDS). Raises NoRespondersError when nobody answers for the consumer (the broker is
    loading the account, or the consumer is gone)."""
    subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        taken = await _ask(nc, sub, subject, inbox, {"batch": count, "no_wait": True}, count, NO_WAIT_ANSWER)
        deadline = time.monotonic() + wait
        while not taken:
            left = deadline - time.monotonic()
            if left < 0.05 or closing():
                return []
            expires = min(left, PULL_SECONDS)
            taken = await _ask(nc, sub, subject, inbox, {"batch": 1, "expires": int(expires * 1e9)}, 1,
                               expires + ANSWER_GRACE)
        if len(taken) < count:
            taken += await _ask(nc, sub, subject, inbox, {"batch": count - len(taken), "no_wait": True},
                                count - len(taken), NO_WAIT_ANSWER)
        return taken
    finally:
        await sub.unsubscribe()


async def _ask(nc: Client, sub: Any, subject: str, inbox: str, request: dict[str, Any], count: int,
               timeout: float) -> list[Msg]:
    """The deliveries of one pull request, until ``count`` came or a status ended it (or nothing
    did within ``timeout``: a broker that restarted forgot the request)."""
    await nc.publish(subject, json.dumps(request).encode(), reply=inbox)
    taken: list[Msg] = []
    end = time.monotonic() + timeout
    while len(taken) < count:
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            msg = await sub.next_msg(timeout=left)
        except TimeoutError:
            break
        status: Optional[str] = broker_status(msg)
        if status is None:
            taken.append(msg)
        elif status == "503":
            raise nats.errors.NoRespondersError
        elif status != HEARTBEAT:
            break
    return taken
