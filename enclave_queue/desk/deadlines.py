"""Start deadlines (``put(ttl_s=)``): a message not taken by its deadline is dropped unrun.

After the broker stored such a message the SDK publishes a note ``{"seq", "deadline"}`` to
``enclave.notes``, stored in the control account's ``ENCLAVE_NOTES`` stream even while this
process is down. Every note is read here (an ordered consumer from the start) and kept in a heap
by deadline; at each deadline the message is removed if no worker has taken it yet (its sequence
is above the consumer's last delivered one) and counted as expired (queues/expiry.py); then the
note is deleted. A message taken before its deadline is left to its worker; if it comes back
after the deadline, the SDK drops it on receipt (the desk's ``expire``). A note for a delayed put
(``{"scheduled": 1}``) counts a schedule stored, which metrics need to tell deletions by workers
from schedules that fired (queues/counters.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from .. import envelope, pushes
from ..broker.config import CONTROL_STREAM_BYTES
from ..broker.connection import BrokerConnection, delete_message, ensure_stream
from ..broker.tasks import stop_tasks
from ..names import NOTES_STREAM, notes_subject
from ..queues.expiry import drop_expired
from ..state.kv import Store
from ..state.queries import QueueIndex

log = logging.getLogger("enclave.desk")

NOTES_KEEP = envelope.MAX_TTL + 86400.0  #: seconds a note is kept (the longest deadline, and a day)
NOTES_PER_QUEUE = 5000  #: notes (pending start deadlines) one queue may have stored at once
NOTE_SKEW = 300.0  #: seconds an app's clock may run ahead of ours: a later deadline is no put's
EXPIRY_TICK = 0.25  #: seconds between looks at the earliest deadline


class Deadlines:
    """Reads the put notes and drops each message whose start deadline came untaken."""

    def __init__(self, store: Store, conn: BrokerConnection, index: QueueIndex) -> None:
        self.store = store
        self.conn = conn
        self.index = index  #: finds the queue of a note by its id
        self._deadlines: list[tuple[datetime, str, int, int]] = []  #: (deadline, queue id, seq, note seq)
        self._wake = asyncio.Event()
        self._sub: Any = None
        self._expiry: Optional[asyncio.Task[None]] = None

    async def start(self) -> None:
        await ensure_stream(self.conn.js, api.StreamConfig(
            name=NOTES_STREAM, subjects=[notes_subject("*")], retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_age=NOTES_KEEP, max_msg_size=1024,
            # each queue's notes are one subject: the broker refuses a queue's note past
            # NOTES_PER_QUEUE (the put stands; its SDK still drops it on receipt after its
            # deadline), and a full stream refuses new notes instead of dropping other queues'
            max_bytes=CONTROL_STREAM_BYTES[NOTES_STREAM], max_msgs_per_subject=NOTES_PER_QUEUE,
            discard=api.DiscardPolicy.NEW, discard_new_per_subject=True, num_replicas=1,
        ))
        self._expiry = asyncio.create_task(self._expire_due(), name="desk-expiry")

    async def stop(self) -> None:
        await stop_tasks([self._expiry])  # cancelled again if a cancel is lost (broker/tasks.py)
        if self._sub is not None:  # after the task: it may have subscribed as it was cancelled
            await pushes.unsubscribe(self._sub)
            self._sub = None

    async def _read_notes(self) -> None:
        """Read every note from the start, then each new one (an ordered consumer). Its creation
        is retried: JetStream can be slow to answer while the control plane starts."""
        delay = 0.1
        while True:
            try:
                self._sub = await self.conn.js.subscribe(notes_subject("*"), ordered_consumer=True, cb=self._on_note)
                return
            except (nats.errors.Error, nats.js.errors.Error) as exc:
                log.info("notes not read yet: %r", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _on_note(self, note: Msg) -> None:
        queue_id = note.subject.split(".", 1)[1]
        try:
            body = envelope.parse_json(note.data)
            seq = envelope.whole_number(body.get("seq", 0))
            if seq is None:
                raise ValueError("seq")
        except (ValueError, TypeError, AttributeError):
            return
        note_seq = note.metadata.sequence.stream
        if body.get("scheduled"):
            record = await self.index.record_of(queue_id)
            if record is not None:
                await self.store.count(record.key, "scheduled")
            await self._forget_note(note_seq)
            return
        deadline = envelope.parse_time(body.get("deadline"))
        latest = datetime.now(UTC) + timedelta(seconds=envelope.MAX_TTL + NOTE_SKEW)
        if deadline is None or seq <= 0 or deadline > latest:  # no put makes such a note: forget it
            await self._forget_note(note_seq)
            return
        heapq.heappush(self._deadlines, (deadline, queue_id, seq, note_seq))
        self._wake.set()

    async def _forget_note(self, note_seq: int) -> None:
        with contextlib.suppress(nats.errors.Error, nats.js.errors.Error):
            await delete_message(self.conn.js, NOTES_STREAM, note_seq)

    async def _expire_due(self) -> None:
        await self._read_notes()
        while True:
            now = datetime.now(UTC)
            due = []
            while self._deadlines and self._deadlines[0][0] <= now:
                due.append(heapq.heappop(self._deadlines))
            for _due, queue_id, seq, note_seq in due:
                try:
                    record = await self.index.record_of(queue_id)
                    if record is not None and not record.deleting:
                        await drop_expired(self.conn, self.store, record, seq, taken_ok=False)
                    await self._forget_note(note_seq)
                except Exception as exc:  # the broker restarting: try again a little later
                    log.info("deadline of message %d of %s not handled yet: %r", seq, queue_id, exc)
                    heapq.heappush(self._deadlines, (now + timedelta(seconds=1), queue_id, seq, note_seq))
            self._wake.clear()
            wait = EXPIRY_TICK
            if self._deadlines:
                wait = min(max((self._deadlines[0][0] - datetime.now(UTC)).total_seconds(), 0.0), EXPIRY_TICK)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
