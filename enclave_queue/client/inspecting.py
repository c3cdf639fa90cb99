"""Looking at a queue without taking from it, and the operator's verbs an app may use on its own
queue, over a session.

``len`` and ``peek`` read the queue's own stream (``STREAM.INFO``, ``CONSUMER.INFO``,
``STREAM.MSG.GET``): nothing is leased and no receive is counted. The rest ask the control plane's
desk through ``enclave.desk.<verb>``, which acts on this queue only: ``depth_history``,
``dead_letters`` (with ``retry`` and ``discard``), ``export``, ``clear`` and ``metrics``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Optional

from .. import envelope
from ..errors import SpecError, out_of_range
from ..names import LANES, lane_consumer
from .message import PeekedMessage
from .session import Session
from .settings import Settings

#: the JetStream API's err_code for a message get that finds nothing at or after its sequence
NO_MESSAGE = 10037

MAX_PEEK = 100  #: messages one peek may return
MAX_DEAD_LETTERS = 100  #: dead letters one call may return


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
    _session: Session = field(repr=False)

    async def retry(self) -> int:
        """Send it back to this queue as a new message (attempts start over); its new sequence."""
        return int((await self._session.desk("retry", {"seq": self.sequence}))["sequence"])

    async def discard(self) -> None:
        """Delete it for good."""
        await self._session.desk("discard", {"seq": self.sequence})

    @classmethod
    def from_view(cls, view: dict[str, Any], session: Session) -> DeadLetter:
        body: Any = view.get("body")
        if view.get("content_type") == "application/json" and body is not None:
            with contextlib.suppress(ValueError):  # labelled JSON by a client that did not write JSON: its text
                body = envelope.parse_json(body)
        elif body is None and view.get("body_base64") is not None:
            body = base64.b64decode(view["body_base64"])
        return cls(view["sequence"], body, view.get("receive_count"), view.get("last_error"),
                   view.get("source_sequence"), view.get("first_enqueued_at"), view.get("dead_lettered_at"), session)


def _count_rule(field: str, value: Any, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        rule = f"must be an integer from 1 to {high} (got {value!r})"
        raise SpecError(f"{field} {rule}.", errors=[{"field": field, "message": rule}])


class Inspecting:
    """The reading and operator's verbs of one queue."""

    def __init__(self, session: Session, settings: Settings) -> None:
        self._session = session
        self._settings = settings

    async def len(self) -> int:
        """Messages waiting to be received, delayed ones included: everything stored that is not
        in flight (the stream's messages minus the consumer's ``num_ack_pending``, unless every
        lease it gave has run out: ``envelope.leases_over``, as the API's depth counts). Two
        reads, not one snapshot: under concurrent sends and receives it is an estimate."""
        credentials = self._session.credentials
        levels = await self._settings.levels()
        names = [credentials.consumer if level == 0 else lane_consumer(level) for level in levels]
        stream, *consumers = await asyncio.gather(
            self._session.info(f"STREAM.INFO.{credentials.stream}"),
            *(self._session.info(f"CONSUMER.INFO.{credentials.stream}.{name}") for name in names))
        now = datetime.now(UTC)
        held = sum(int(c["num_ack_pending"]) for c in consumers if not envelope.consumer_leases_over(c, now))
        return max(int(stream["state"]["messages"]) - held, 0)

    async def peek(self, limit: int = 10, *, timeout: float = 5.0) -> list[PeekedMessage]:
        """The oldest ``limit`` (1–100) messages, waiting or in flight, oldest first, read by
        sequence: nothing is leased and no receive is counted. Raises ``SpecError`` for a
        ``limit`` out of range."""
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PEEK:
            rule = f"must be an integer from 1 to {MAX_PEEK} (got {limit!r})"
            raise SpecError(f"limit {rule}.", errors=[{"field": "limit", "message": rule}])
        self._session.check_open()
        subjects = [self._session.subject]
        if len(await self._settings.levels()) > 1:  # priority lanes: every lane, merged by sequence
            subjects.append(envelope.lane_subject(self._session.subject, LANES[0]).rsplit(".", 1)[0] + ".*")
        found = [m for subject in subjects for m in await self._read(subject, limit)]
        found.sort(key=lambda m: m.sequence)
        return found[:limit]

    async def _read(self, subject: str, limit: int) -> list[PeekedMessage]:
        """The oldest ``limit`` messages stored on ``subject``, one ``STREAM.MSG.GET`` each (the
        app's user may not send direct gets: auth/users.py)."""
        found: list[PeekedMessage] = []
        after = 0
        while len(found) < limit:
            request = json.dumps({"seq": after + 1, "next_by_subj": subject}).encode()
            answer = await self._session.info(f"STREAM.MSG.GET.{self._session.credentials.stream}", request,
                                              missing=NO_MESSAGE)
            if answer is None:
                break
            found.append(PeekedMessage.from_stored(answer["message"]))
            after = found[-1].sequence
        return found

    async def depth_history(self, hours: int = 24) -> list[dict[str, Any]]:
        """The queue's depth samples of the last ``hours`` (1–168) hours, oldest first:
        ``{"t", "waiting", "in_flight", "delayed", "dead", "sent", "received", "removed"}`` each, one
        a sampling interval (docs/sdk.md)."""
        _count_rule("hours", hours, 168)
        return await self._session.desk("history", {"hours": hours})

    async def dead_letters(self, limit: int = 10) -> list[DeadLetter]:
        """This queue's oldest ``limit`` (1–100) dead letters on its dead-letter queue, read
        without taking them; each can be ``retry()``-ed or ``discard()``-ed. Empty without a DLQ."""
        _count_rule("limit", limit, MAX_DEAD_LETTERS)
        return [DeadLetter.from_view(view, self._session)
                for view in await self._session.desk("dead_letters", {"limit": limit})]

    async def export(self, path: str | Path) -> dict[str, int]:
        """Write every message as it stands to ``path`` as JSON Lines, dead letters included, each
        with its ``status`` (waiting, delayed, in_flight, dead), ``attempts``, ``last_error`` and
        body; nothing is taken off the queue. Returns how many lines by status."""
        counts: dict[str, int] = {}
        cursor: Optional[str] = None
        if not isinstance(path, (str, Path)) or not str(path).strip():
            raise out_of_range("path", "a file's path", repr(path))
        target = Path(path)
        if target.is_dir():
            raise out_of_range("path", "a file's path, not a directory", repr(str(target)))
        self._session.check_open()
        partial = target.with_name(target.name + ".partial")
        try:
            out = partial.open("w", encoding="utf-8")
        except OSError as exc:  # no such directory, no permission: the caller's path, named as given
            raise out_of_range("path", "a file this process can write", f"{str(target)!r}: {exc.strerror}") from None
        try:
            with out:
                while True:
                    page = await self._session.desk("export", {"cursor": cursor}, timeout=30.0)
                    for line in page["messages"]:
                        out.write(json.dumps(line, separators=(",", ":")) + "\n")
                        counts[line["status"]] = counts.get(line["status"], 0) + 1
                    cursor = page["cursor"]
                    if cursor is None:
                        break
            partial.replace(target)
        except BaseException:  # nothing half-written left beside the target
            partial.unlink(missing_ok=True)
            raise
        return counts

    async def clear(self) -> dict[str, int]:
        """Remove every waiting and delayed message and this queue's dead letters; messages in
        flight are left to finish (their ack still works). Returns how many of each went."""
        return await self._session.desk("clear", {}, timeout=60.0)

    async def metrics(self) -> dict[str, int]:
        """The queue's outcome counts since it was created: ``processed``, ``succeeded``,
        ``failed``, ``retried``, ``expired``, ``dead_lettered``, ``discarded`` (docs/sdk.md says
        how each is counted)."""
        return await self._session.desk("metrics", {})
