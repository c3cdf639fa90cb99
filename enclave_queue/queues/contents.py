"""A queue's contents as they stand: export (every message with its status, dead letters
included, taking nothing) and clear (waiting, delayed and dead letters removed; in-flight ones
left to finish). Reads are batched direct gets through the control account (letters.py,
broker/direct.py); nothing is received, leased or counted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Optional

from ..broker.connection import BrokerConnection, delete_message
from ..broker.direct import direct_batch, direct_get_subject
from ..envelope import (
    DEADLINE,
    ENQUEUED_AT,
    FIRST_ENQUEUED,
    LAST_ERROR,
    RECEIVE_COUNT,
    SOURCE_SEQUENCE,
    body_view,
    delay_subjects,
    due_at,
    message_id,
    parse_json,
    parse_time,
    prior_attempts,
    rfc3339,
)
from ..errors import BrokerUnavailable, field_error
from ..names import ERRORS_STREAM, errors_subject, stream_name
from ..spec import subject_for
from ..state.kv import Store
from ..state.notes import read_note
from ..state.records import QueueRecord
from .letters import READ_BATCH, Letter, Letters
from .lookup import Lookup
from .streams import Lane, lanes, stream_info

PURGE_TIMEOUT = 5.0  #: seconds a purge may take
EXPORT_PAGE_BYTES = 1_000_000  #: bytes of JSON one export page holds at most (but always one message)
CLEAR_WINDOW = 256  #: deletes one clear keeps in flight at once
READ_BYTES = 4 * 1024 * 1024  #: bytes one batched direct get returns at most (a batch of large messages)


class Contents:
    """Export and clear, for the API, the console and the desk."""

    def __init__(self, conn: BrokerConnection, store: Store, lookup: Lookup, letters: Letters) -> None:
        self.conn = conn
        self.store = store
        self.lookup = lookup
        self.letters = letters

    async def export_page(self, project: str, name: str, cursor: Optional[str] = None,
                          max_bytes: int = EXPORT_PAGE_BYTES) -> tuple[list[dict[str, Any]], Optional[str]]:
        """One page of every message of the queue as it stands, read by sequence (batched direct
        gets: nothing is received, leased or counted), and the cursor of the next page (None after
        the last). First the queue's own stream in sequence order (waiting, in flight, delayed),
        then this queue's dead letters on its dead-letter queue. A page stops before ``max_bytes``
        of JSON (but holds at least one message). See ``_exported`` for the fields.

        ``in_flight`` is every message of the queue subject the consumer has delivered while a lease
        it gave may still run (streams.py ``Lane``): leased now, handed back and waiting for its
        redelivery, or out of receives and not yet moved to the dead-letter queue. Once every lease
        of the consumer ran out, what it delivered and nobody deleted is ``waiting`` again. A taken
        message's ``attempts`` is a lower bound (prior attempts + 1): JetStream keeps no delivery
        count of a message that can be read without delivering it."""
        phase, after = _parse_cursor(cursor)
        record = await self.lookup.ready(project, name)
        page = _Page(max_bytes)
        if phase == "q":
            delivered = await lanes(self.conn, record)
            notes = await self._error_notes(record.id)
            more = True
            while more:
                letters, more = await self._read(record, after)
                for letter in letters:
                    if not page.add(self._exported_message(record, letter, delivered, notes)):
                        return page.items, f"q:{letter.sequence}"
                    after = letter.sequence
            phase, after = "d", 0
        dlq = await self.lookup.dead_letter_queue(record)
        more = dlq is not None
        while more and dlq is not None:
            letters, more = await self._read(dlq, after, subject_for(dlq.spec.project, dlq.spec.name))
            for letter in self.letters.vouched(dlq, letters):
                if letter.of_queue(record) and not page.add(_exported_letter(letter)):
                    return page.items, f"d:{letter.sequence}"
                after = letter.sequence
        return page.items, None

    async def export(self, project: str, name: str) -> AsyncIterator[dict[str, Any]]:
        """Every message of the queue, page after page (see ``export_page``); NotFound is raised
        by the first step."""
        cursor: Optional[str] = None
        while True:
            items, cursor = await self.export_page(project, name, cursor)
            for item in items:
                yield item
            if cursor is None:
                return

    def _exported_message(self, record: QueueRecord, letter: Letter, delivered: dict[str, Lane],
                          notes: dict[int, str]) -> dict[str, Any]:
        h, seq = letter.headers, letter.sequence
        if h.get("Nats-Subject", "").startswith(delay_subjects(subject_for(record.spec.project, record.spec.name))[:-1]):
            due = due_at(h)
            return _exported(letter, "delayed", attempts=prior_attempts(h), last_error=h.get(LAST_ERROR),
                             due_at=rfc3339(due) if due else None)
        noted = notes.get(message_id(h, seq)) or h.get(LAST_ERROR)
        lane = delivered.get(h.get("Nats-Subject", ""))
        if lane is None or seq > lane.floor:  # above its lane's last delivered one: never taken
            return _exported(letter, "waiting", attempts=prior_attempts(h), last_error=noted)
        if lane.leases_over:  # taken, and its lease ran out: waiting for its next receive
            return _exported(letter, "waiting", attempts=prior_attempts(h) + 1, last_error=noted)
        return _exported(letter, "in_flight", attempts=prior_attempts(h) + 1, last_error=noted)

    async def _read(self, record: QueueRecord, after: int, subject: Optional[str] = None) -> tuple[list[Letter], bool]:
        """A batch of the messages of ``record``'s stream stored after ``after`` (on ``subject``
        only, if given; else both the queue's and the delayed ones), and whether more follow."""
        return await self.letters.batch(record, after, subject, limit=READ_BATCH, max_bytes=READ_BYTES)

    async def _error_notes(self, queue_id: str) -> dict[int, str]:
        """The error notes apps left for the queue's messages (controller/errornotes.py), by
        message id: one batched direct get per READ_BATCH notes of ERRORS_STREAM (one a subject)."""
        notes: dict[int, str] = {}
        after, more = 0, True
        while more:
            batch = await direct_batch(
                self.conn.control, direct_get_subject(ERRORS_STREAM),
                {"seq": after + 1, "next_by_subj": errors_subject(queue_id), "batch": READ_BATCH}, "the error notes")
            more = batch.more
            for note in batch.messages:
                if (noted := read_note(note.headers, note.data)) is not None:
                    notes[noted[0]] = noted[1]
                after = note.sequence
        return notes

    async def clear(self, project: str, name: str) -> dict[str, int]:
        """Remove the queue's waiting messages, its delayed ones and its dead letters on its
        dead-letter queue; returns how many of each. Counted as ``cleared`` on the queue (waiting
        and delayed; the delayed ones leave ``scheduled``) and on the dead-letter queue (dead).

        Messages in flight (at or below the consumer's delivered sequence, read first) are left to
        finish: a worker can still delete them, and a nack brings them back. But once every lease a
        consumer gave ran out (streams.py ``Lane``), what it delivered and nobody deleted is waiting
        (its depth says so), and is removed with the rest. Only what was stored when the clear
        started is removed. The race: a message delivered while the clear runs may be removed while
        leased; its worker's delete (ack) is then harmless, and a nack finds it gone."""
        record = await self.lookup.ready(project, name)
        info, delivered = await asyncio.gather(stream_info(self.conn, record), lanes(self.conn, record))
        last = info.state.last_seq
        waiting = 0
        for subject, lane in delivered.items():  # the queue's subject, and each priority lane's
            after = 0 if lane.leases_over else lane.floor
            waiting += await self._delete_stored(record, after, last, subject=subject)
        delayed = await self._purge(record, delay_subjects(subject_for(project, name)), last + 1)
        dlq = await self.lookup.dead_letter_queue(record)
        dead = 0
        if dlq is not None:  # only this queue's letters: a dead-letter queue may serve several
            dead = await self._delete_stored(dlq, 0, (await stream_info(self.conn, dlq)).state.last_seq,
                                             lambda letter: self.letters.vouched(dlq, [letter])[0].of_queue(record))
        if waiting + delayed:
            await self.store.count(record.key, "cleared", waiting + delayed)
        if delayed:  # ``scheduled`` counts the schedules not cleared (desk/deadlines.py)
            await self.store.count(record.key, "scheduled", -delayed)
        if dlq and dead:
            await self.store.count(dlq.key, "cleared", dead)
        return {"waiting": waiting, "delayed": delayed, "dead": dead}

    async def _purge(self, record: QueueRecord, subject: str, below: int) -> int:
        """Purge the messages on ``subject`` stored below sequence ``below``; how many went."""
        request = json.dumps({"filter": subject, "seq": below}).encode()
        answer = await self.conn.queue_request(record.id, f"STREAM.PURGE.{stream_name(record.id)}", request,
                                               timeout=PURGE_TIMEOUT)
        if "error" in answer:
            raise BrokerUnavailable(f"The broker refused to purge queue '{record.spec.name}': "
                                    f"{answer['error'].get('description')}.")
        return int(answer.get("purged", 0))

    async def _delete_stored(self, record: QueueRecord, after: int, last: int,
                             chosen: Callable[[Letter], bool] = lambda letter: True, *,
                             subject: Optional[str] = None) -> int:
        """Delete the ``chosen`` messages of ``record``'s queue subject (or ``subject``) stored after
        ``after`` up to ``last``, CLEAR_WINDOW deletes in flight at once; how many were still there."""
        js, stream = self.conn.queue_js(record.id), stream_name(record.id)
        subject = subject or subject_for(record.spec.project, record.spec.name)
        removed, more = 0, True
        while more and after < last:
            letters, more = await self._read(record, after, subject)
            letters = [letter for letter in letters if letter.sequence <= last]
            if not letters:
                break
            removed += await _delete_all(js, stream, [letter.sequence for letter in letters if chosen(letter)])
            after = letters[-1].sequence
        return removed


def _parse_cursor(cursor: Optional[str]) -> tuple[str, int]:
    """An export cursor (``q:<next seq>`` on the queue, ``d:<next seq>`` on its dead-letter
    queue) as the phase and the sequence read up to."""
    if cursor is None:
        return "q", 0
    phase, _, seq = cursor.partition(":")
    if phase not in ("q", "d") or not seq.isdigit() or int(seq) < 1:
        raise field_error("cursor", f"is not a cursor an export returned (got {cursor!r})")
    return phase, int(seq) - 1


class _Page:
    """Exported messages up to a size in bytes of JSON Lines (always at least one)."""

    def __init__(self, max_bytes: int) -> None:
        self.items: list[dict[str, Any]] = []
        self.room = max_bytes

    def add(self, item: dict[str, Any]) -> bool:
        size = len(json.dumps(item).encode()) + 1
        if self.items and size > self.room:
            return False
        self.items.append(item)
        self.room -= size
        return True


def _exported_letter(letter: Letter) -> dict[str, Any]:
    """A dead letter as exported for its source queue: its id there (the copy's id, or the
    sequence it had), its receive count as its attempts."""
    h = letter.headers
    count = h.get(RECEIVE_COUNT, "")
    source = h.get(SOURCE_SEQUENCE, "")
    return _exported(letter, "dead", attempts=int(count) if count.isdigit() else prior_attempts(h),
                     last_error=h.get(LAST_ERROR), id=message_id(h, int(source) if source.isdigit() else letter.sequence),
                     enqueued_at=h.get(ENQUEUED_AT) or h.get(FIRST_ENQUEUED))


def _exported(letter: Letter, status: str, *, attempts: int, last_error: Optional[str], id: Optional[int] = None,
              enqueued_at: Optional[str] = None, due_at: Optional[str] = None) -> dict[str, Any]:
    """One exported message: ``id``, ``sequence`` (where it is stored), ``status``, ``attempts``,
    ``last_error``, ``enqueued_at``, ``due_at`` (delayed), ``deadline`` (if it has one),
    ``content_type`` and ``body`` (text; the JSON value for JSON; None with ``body_base64`` for
    bytes that are not UTF-8)."""
    h = letter.headers
    stored = parse_time(letter.stored_at)
    out: dict[str, Any] = {
        "id": id if id is not None else message_id(h, letter.sequence),
        "sequence": letter.sequence,
        "status": status,
        "attempts": attempts,
        "last_error": last_error or None,
        "enqueued_at": enqueued_at or h.get(ENQUEUED_AT) or (rfc3339(stored) if stored else None),
    }
    if due_at is not None:
        out["due_at"] = due_at
    if DEADLINE in h:
        out["deadline"] = h[DEADLINE]
    content_type = h.get("Content-Type")
    out["content_type"] = content_type
    body = body_view(letter.data)
    text = body["body"]
    if text is None:  # not UTF-8: its bytes in base64
        return {**out, **body}
    if content_type and content_type.split(";")[0].strip().lower() == "application/json":
        try:
            return {**out, "body": parse_json(text)}
        except ValueError:
            pass
    return {**out, "body": text}


async def _delete_all(js: Any, stream: str, sequences: list[int]) -> int:
    """Delete these messages, CLEAR_WINDOW requests in flight at once; how many were there."""
    removed = 0
    for i in range(0, len(sequences), CLEAR_WINDOW):
        done = await asyncio.gather(*(delete_message(js, stream, seq) for seq in sequences[i:i + CLEAR_WINDOW]))
        removed += sum(done)
    return removed
