"""The one batched direct-get reader: the messages of a stream read by sequence, nothing leased.

A batched direct get (``DIRECT.GET`` with ``batch``) asks the broker for up to ``batch`` messages
from a starting sequence (or time), optionally of one subject (``next_by_subj``); the broker
streams them to one inbox, each with its sequence and time in headers, and ends the batch with a
status: ``204`` (with ``Nats-Num-Pending``: how many more there are), ``404`` (nothing, or nothing
more) or another (``503``: nobody answers yet, say during a reload). The queues' letters, export
and clear (queues/), the error notes and the depth history all read this way.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from nats.aio.client import Client
from nats.aio.msg import Msg

from ..envelope import broker_status
from ..errors import BrokerUnavailable
from ..retry import RETRY_WINDOW

READ_TIMEOUT = 10.0  #: seconds one direct-get request may take


@dataclass(frozen=True)
class Stored:
    """One message as a direct get returns it."""

    sequence: int
    data: bytes
    headers: dict[str, str]
    stored_at: Optional[str]  #: the broker's RFC 3339 timestamp (nanoseconds, ``Z``)


@dataclass(frozen=True)
class Batch:
    messages: list[Stored]  #: in sequence order
    more: bool  #: the broker said more messages follow the last one
    status: Optional[str]  #: the status that ended the batch (``204``, ``404``, …)
    description: str = ""  #: the broker's words for that status


def direct_get_subject(stream: str) -> str:
    """The direct-get API of a stream, asked on a connection of the stream's account."""
    return f"$JS.API.DIRECT.GET.{stream}"


async def direct_batch(nc: Client, subject: str, request: dict[str, Any], what: str) -> Batch:
    """One batched direct get to ``subject`` (``direct_get_subject``). Tried again for RETRY_WINDOW
    while nobody answers (a configuration reload; not taken for an empty stream).
    BrokerUnavailable naming ``what`` ("the messages of queue 'emails'") if the broker does not
    end the batch within READ_TIMEOUT."""
    deadline = time.monotonic() + RETRY_WINDOW
    while True:
        found, end = await _direct_batch_once(nc, subject, json.dumps(request).encode(), what)
        status = end.get("Status")
        if status != "503" or found or time.monotonic() > deadline:
            pending = end.get("Nats-Num-Pending", "0")
            more = status == "204" and pending.isdigit() and int(pending) > 0
            return Batch(found, more, status, end.get("Description", ""))
        await asyncio.sleep(0.05)


class _Replies:
    """The replies of every batched direct get made on one connection, on one subscription of its
    own (``<inbox>.*``), each get's by its token: a subscription a get (and the task nats-py starts
    for each) was a tenth of the dead-letter mover's time with 100 queues failing at once."""

    def __init__(self, nc: Client) -> None:
        self.prefix = nc.new_inbox()
        self.waiting: dict[str, Callable[[Msg], None]] = {}
        self._count = 0

    def add(self, handler: Callable[[Msg], None]) -> str:
        """The reply subject of a get whose replies go to ``handler`` until ``waiting`` drops it."""
        self._count += 1
        token = str(self._count)
        self.waiting[token] = handler
        return f"{self.prefix}.{token}"

    async def route(self, msg: Msg) -> None:
        handler = self.waiting.get(msg.subject.rpartition(".")[2])
        if handler is not None:  # else the get it answers gave up (timed out) already
            handler(msg)


#: each connection's replies, subscribed on its first get and gone with the connection
_replies: weakref.WeakKeyDictionary[Client, _Replies] = weakref.WeakKeyDictionary()
_subscribing: weakref.WeakKeyDictionary[Client, asyncio.Lock] = weakref.WeakKeyDictionary()


async def _replies_of(nc: Client) -> _Replies:
    replies = _replies.get(nc)
    if replies is None:
        async with _subscribing.setdefault(nc, asyncio.Lock()):  # the gets made meanwhile wait for it
            replies = _replies.get(nc)
            if replies is None:
                replies = _Replies(nc)
                await nc.subscribe(f"{replies.prefix}.*", cb=replies.route)
                _replies[nc] = replies
    return replies


async def _direct_batch_once(nc: Client, subject: str, request: bytes,
                             what: str) -> tuple[list[Stored], dict[str, str]]:
    found: list[Stored] = []
    done: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()

    def collect(msg: Msg) -> None:
        headers = dict(msg.headers or {})
        if broker_status(msg) is None:  # a stored message, whatever headers its sender gave it
            stamp = headers.get("Nats-Time-Stamp")
            found.append(Stored(int(headers["Nats-Sequence"]), msg.data or b"", headers, stamp))
        elif not done.done():  # 204: end of batch; 404: nothing (more); 503: no responders
            done.set_result(headers)

    replies = await _replies_of(nc)
    inbox = replies.add(collect)
    try:
        await nc.publish(subject, request, reply=inbox)
        return found, await asyncio.wait_for(done, READ_TIMEOUT)
    except TimeoutError:
        raise BrokerUnavailable(f"Reading {what} timed out.") from None
    finally:
        replies.waiting.pop(inbox.rpartition(".")[2], None)
