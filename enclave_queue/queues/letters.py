"""A queue's messages read by sequence as letters, nothing leased, and a letter moved back.

Reading never leases: letters are read by sequence (batched direct gets, broker/direct.py), so
workers are not disturbed. A dead letter's headers (where it came from, why it failed) count only
if the control plane wrote them: each letter read is vouched for (auth/provenance.py).

Moving a letter back publishes it to its destination with a ``Nats-Msg-Id`` that is a MAC of the
dead-letter queue's id and the letter's sequence (no app can guess it to pre-empt the copy), and
only then deletes it from the dead-letter queue, so a move interrupted anywhere and run again
duplicates nothing (within the destination's dedupe window) and loses nothing. The moved message
is new: its receive count starts again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from ..auth.provenance import Provenance
from ..broker.connection import BrokerConnection, delete_message, publish_into, stored_seq
from ..broker.direct import Stored, direct_batch, direct_get_subject
from ..envelope import (
    DEAD_LETTERED_AT,
    FIRST_ENQUEUED,
    LAST_ERROR,
    RECEIVE_COUNT,
    SOURCE_PROJECT,
    SOURCE_QUEUE,
    SOURCE_SEQUENCE,
    body_view,
    clean_headers,
    parse_time,
)
from ..errors import field_error
from ..names import stream_name
from ..spec import subject_for
from ..state.records import QueueRecord
from .lookup import Lookup

READ_BATCH = 200  #: letters read per direct-get request


@dataclass(frozen=True)
class Letter:
    """One message of a queue, as read (not leased)."""

    sequence: int
    data: bytes
    headers: dict[str, str]
    stored_at: Optional[str]

    @classmethod
    def of(cls, stored: Stored) -> Letter:
        return cls(stored.sequence, stored.data, stored.headers, stored.stored_at)

    @property
    def last_error(self) -> str:
        return self.headers.get(LAST_ERROR, "")

    def vouched(self, provenance: Provenance, queue_id: str) -> Letter:
        """This letter as read from queue ``queue_id``: its dead-letter headers kept only if the
        control plane wrote them (auth/provenance.py)."""
        return Letter(self.sequence, self.data, provenance.vouched(queue_id, self.headers, self.data), self.stored_at)

    @property
    def dead_lettered_at(self) -> Optional[datetime]:
        return parse_time(self.headers.get(DEAD_LETTERED_AT))

    def of_queue(self, record: QueueRecord) -> bool:
        """Whether this dead letter came from ``record``'s queue (a DLQ may serve several): one of
        its name dead-lettered before it was made came from a queue deleted since."""
        at = self.dead_lettered_at
        return self.came_from(record.spec.project, record.spec.name) and (at is None or at >= record.created_at)

    def came_from(self, project: str, name: str) -> bool:
        """Whether this dead letter came from queue ``name`` of ``project``."""
        h = self.headers
        return h.get(SOURCE_QUEUE) == name and h.get(SOURCE_PROJECT) == project

    def view(self) -> dict[str, Any]:
        h = self.headers
        return {
            "sequence": self.sequence,
            "source_queue": h.get(SOURCE_QUEUE),
            "source_project": h.get(SOURCE_PROJECT),
            "source_sequence": int(h[SOURCE_SEQUENCE]) if SOURCE_SEQUENCE in h else None,
            "receive_count": int(h[RECEIVE_COUNT]) if RECEIVE_COUNT in h else None,
            "last_error": h.get(LAST_ERROR),
            "first_enqueued_at": h.get(FIRST_ENQUEUED) or self.stored_at,
            "dead_lettered_at": h.get(DEAD_LETTERED_AT) or self.stored_at,
            "content_type": h.get("Content-Type"),
            **body_view(self.data),
        }


class Letters:
    """Reads queues' letters and moves letters back, for the dead letters by hand, export, clear,
    peek and the desk."""

    def __init__(self, conn: BrokerConnection, lookup: Lookup, provenance: Provenance) -> None:
        self.conn = conn
        self.lookup = lookup
        self.provenance = provenance

    async def batch(self, record: QueueRecord, after: int, subject: Optional[str] = None, *,
                    limit: int = READ_BATCH, max_bytes: Optional[int] = None) -> tuple[list[Letter], bool]:
        """Up to ``limit`` messages of ``record``'s stream stored after ``after`` (on ``subject``
        only, if given), oldest first, as stored (not vouched for), and whether more follow."""
        request: dict[str, Any] = {"seq": after + 1, "batch": limit}
        if subject is not None:
            request["next_by_subj"] = subject
        if max_bytes is not None:
            request["max_bytes"] = max_bytes
        async with self.conn.account(record.id) as nc:
            found = await direct_batch(nc, direct_get_subject(stream_name(record.id)), request,
                                       f"the messages of queue '{record.spec.name}'")
        return [Letter.of(stored) for stored in found.messages], found.more

    async def read(self, record: QueueRecord, after: int, limit: int) -> list[Letter]:
        """Up to ``limit`` messages of ``record``'s queue subject with a sequence above ``after``,
        oldest first, their dead-letter headers vouched for (``Letter.vouched``)."""
        letters, _ = await self.batch(record, after, subject_for(record.spec.project, record.spec.name), limit=limit)
        return self.vouched(record, letters)

    def vouched(self, record: QueueRecord, letters: list[Letter]) -> list[Letter]:
        """Letters read from ``record``'s queue with only the provenance the control plane wrote."""
        return [letter.vouched(self.provenance, record.id) for letter in letters]

    # -- moving back ----------------------------------------------------------------------------

    async def destination(self, record: QueueRecord, letter: Letter, to: Optional[str]) -> QueueRecord:
        """Where ``letter`` of ``record``'s queue goes back to: ``to``, else the queue it came from
        (SpecError if it names none); NotFound if that queue does not exist."""
        name = to or letter.headers.get(SOURCE_QUEUE)
        if not name:
            raise field_error("to", "is required for this message",
                              f"Message {letter.sequence} of queue '{record.spec.name}' was not dead-lettered by "
                              "Enclave, so it names no source queue; give a destination.")
        return await self.lookup.live(record.spec.project, name)  # a dead-letter queue serves its own project

    async def publish_back(self, record: QueueRecord, letter: Letter, dest: QueueRecord) -> int:
        """Publish ``letter`` of ``record``'s queue to ``dest``; a repeat within the dedupe window
        stores nothing new. The sequence it is stored at."""
        headers = {**clean_headers(letter.headers),
                   "Nats-Msg-Id": self.provenance.redrive_id(record.id, letter.sequence, letter.headers)}
        subject = subject_for(dest.spec.project, dest.spec.name)
        return stored_seq(await publish_into(self.conn, dest.id, subject, letter.data, headers), dest.spec)

    async def move_back(self, record: QueueRecord, letter: Letter, dest: QueueRecord) -> int:
        """Publish ``letter`` to ``dest`` (deduplicated), then delete it from ``record``'s stream."""
        sequence = await self.publish_back(record, letter, dest)
        await delete_message(self.conn.queue_js(record.id), stream_name(record.id), letter.sequence)
        return sequence
