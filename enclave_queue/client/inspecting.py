"""Looking at a queue, and the operator's verbs an app may use on its own queue (a mixin of ``Queue``).

``len`` and ``peek`` read the queue's own stream (``STREAM.INFO``, ``CONSUMER.INFO``,
``DIRECT.GET``): nothing is leased and no receive is counted. The rest ask the control plane's
desk (controller/desk.py) through ``enclave.desk.<verb>``, which acts on this queue only:
``depth_history``, ``dead_letters`` (with ``retry`` and ``discard``), ``export``, ``clear`` and
``metrics``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import nats.errors
from nats.aio.msg import Msg

from .. import envelope
from ..errors import BrokerUnavailable, EnclaveError, SpecError
from ..names import LANES, lane_consumer
from .message import PeekedMessage
from .receiving import _Pull

if TYPE_CHECKING:
    from .queue import Queue

MAX_PEEK = 100  #: messages one peek may return
MAX_DEAD_LETTERS = 100  #: dead letters one call may return
_STATUS = "Status"


@dataclass
class DeadLetter:
    """One of this queue's messages on its dead-letter queue, read without taking it."""

    sequence: int  #: its place on the dead-letter queue
    body: Any
    attempts: Optional[int]  #: receives it used up
    last_error: Optional[str]
    source_sequence: Optional[int]
    first_enqueued_at: Optional[str]
    dead_lettered_at: Optional[str]
    _queue: Queue = field(repr=False)

    async def retry(self) -> int:
        """Send it back to this queue as a new message (attempts start over); its new sequence."""
        return int((await self._queue._desk("retry", {"seq": self.sequence}))["sequence"])

    async def discard(self) -> None:
        """Delete it for good."""
        await self._queue._desk("discard", {"seq": self.sequence})

    @classmethod
    def from_view(cls, view: dict[str, Any], queue: Queue) -> DeadLetter:
        body: Any = view.get("body")
        if view.get("content_type") == "application/json" and body is not None:
            body = json.loads(body)
        elif body is None and view.get("body_base64") is not None:
            body = base64.b64decode(view["body_base64"])
        return cls(view["sequence"], body, view.get("receive_count"), view.get("last_error"),
                   view.get("source_sequence"), view.get("first_enqueued_at"), view.get("dead_lettered_at"), queue)


class Inspecting:
    async def _info(self: Queue, verb: str) -> dict[str, Any]:
        reply = await self._request(f"$JS.API.{verb}", b"")
        if reply.headers and reply.headers.get(_STATUS) == "503":
            raise BrokerUnavailable(f"The broker did not answer {verb.split('.')[0]} info; try again.")
        answer = json.loads(reply.data)
        if "error" in answer:
            raise EnclaveError(f"The broker refused {verb}: {answer['error'].get('description')}.")
        return answer

    async def len(self: Queue) -> int:
        """Messages waiting to be received, delayed ones included: everything stored that is not
        in flight (the stream's messages minus the consumer's ``num_ack_pending``). Two reads,
        not one snapshot: under concurrent sends and receives it is an estimate."""
        levels = await self._levels()
        names = [self.credentials.consumer if level == 0 else lane_consumer(level) for level in levels]
        stream, *consumers = await asyncio.gather(
            self._info(f"STREAM.INFO.{self.credentials.stream}"),
            *(self._info(f"CONSUMER.INFO.{self.credentials.stream}.{name}") for name in names))
        return max(int(stream["state"]["messages"]) - sum(int(c["num_ack_pending"]) for c in consumers), 0)

    async def peek(self: Queue, limit: int = 10, *, timeout: float = 5.0) -> list[PeekedMessage]:
        """The oldest ``limit`` (1–100) messages, waiting or in flight, oldest first, read by
        direct get: nothing is leased and no receive is counted. Raises ``SpecError`` for a
        ``limit`` out of range."""
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PEEK:
            message = f"must be an integer from 1 to {MAX_PEEK} (got {limit!r})"
            raise SpecError(f"limit {message}.", errors=[{"field": "limit", "message": message}])
        self._check_open()
        subjects = [self.subject]
        if len(await self._levels()) > 1:  # priority lanes: every lane, merged by sequence
            subjects.append(envelope.lane_subject(self.subject, LANES[0]).rsplit(".", 1)[0] + ".*")
        found = [m for subject in subjects for m in await self._direct_get(subject, limit, timeout)]
        found.sort(key=lambda m: int(m.headers["Nats-Sequence"]))
        return [PeekedMessage.from_direct_get(m) for m in found[:limit]]

    async def _direct_get(self: Queue, subject: str, limit: int, timeout: float) -> list[Msg]:
        """The oldest ``limit`` messages stored on ``subject`` (a batched direct get)."""
        loop = asyncio.get_running_loop()
        token = f"g{next(self._ids)}"
        inbox = f"{self._mux}.peek.{token}"
        request = json.dumps({"seq": 1, "next_by_subj": subject, "batch": limit}).encode()
        deadline = loop.time() + 3.0
        delay = 0.01
        pull = _Pull(limit, loop.create_future())  # failed by a permission denial or close

        async def collect(msg: Msg) -> None:
            status = msg.headers.get(_STATUS) if msg.headers else None
            if status is None:
                pull.messages.append(msg)
                return
            pull.unanswered = status == "503"  # 204: end of batch; 404: nothing stored
            if not pull.done.done():
                pull.done.set_result(None)

        sub = await self._nc.subscribe(inbox, cb=collect)
        try:
            while True:
                self._waiting[token] = pull
                await self._nc.publish(f"$JS.API.DIRECT.GET.{self.credentials.stream}", request, reply=inbox)
                await self._await(token, pull.done, timeout, "the peek")
                self._waiting.pop(token, None)
                if not pull.unanswered or pull.messages or loop.time() + delay > deadline:
                    break
                pull.unanswered, pull.done = False, loop.create_future()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
        finally:
            self._waiting.pop(token, None)
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        if pull.unanswered and not pull.messages:
            raise BrokerUnavailable("The broker did not answer the peek (no responders); try again.")
        return pull.messages

    async def depth_history(self: Queue, hours: int = 24) -> list[dict[str, Any]]:
        """The queue's depth samples of the last ``hours`` (1–168) hours, oldest first:
        ``{"t", "waiting", "in_flight", "delayed", "dead"}`` each, one a sampling interval."""
        if isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= 168:
            message = f"must be an integer from 1 to 168 (got {hours!r})"
            raise SpecError(f"hours {message}.", errors=[{"field": "hours", "message": message}])
        return await self._desk("history", {"hours": hours})

    async def dead_letters(self: Queue, limit: int = 10) -> list[DeadLetter]:
        """This queue's oldest ``limit`` (1–100) dead letters on its dead-letter queue, read
        without taking them; each can be ``retry()``-ed or ``discard()``-ed. Empty without a DLQ."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_DEAD_LETTERS:
            message = f"must be an integer from 1 to {MAX_DEAD_LETTERS} (got {limit!r})"
            raise SpecError(f"limit {message}.", errors=[{"field": "limit", "message": message}])
        return [DeadLetter.from_view(view, self) for view in await self._desk("dead_letters", {"limit": limit})]

    async def export(self: Queue, path: str | Path) -> dict[str, int]:
        """Write every message as it stands to ``path`` as JSON Lines, dead letters included, each
        with its ``status`` (waiting, delayed, in_flight, dead), ``attempts``, ``last_error`` and
        body; nothing is taken off the queue. Returns how many lines by status."""
        counts: dict[str, int] = {}
        cursor: Optional[str] = None
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        with partial.open("w", encoding="utf-8") as out:
            while True:
                page = await self._desk("export", {"cursor": cursor}, timeout=30.0)
                for line in page["messages"]:
                    out.write(json.dumps(line, separators=(",", ":")) + "\n")
                    counts[line["status"]] = counts.get(line["status"], 0) + 1
                cursor = page["cursor"]
                if cursor is None:
                    break
        partial.replace(target)
        return counts

    async def clear(self: Queue) -> dict[str, int]:
        """Remove every waiting and delayed message and this queue's dead letters; messages in
        flight are left to finish (their ack still works). Returns how many of each went."""
        return await self._desk("clear", {}, timeout=60.0)

    async def metrics(self: Queue) -> dict[str, int]:
        """The queue's outcome counts since it was created: ``processed``, ``succeeded``,
        ``failed``, ``retried``, ``expired``, ``dead_lettered``, ``discarded`` (docs/sdk.md says
        how each is counted)."""
        return await self._desk("metrics", {})
