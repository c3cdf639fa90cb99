"""The error notes' stream: created, and each queue's notes bounded to its newest.

Apps report errors by publishing a note to ``enclave.errors.<message id>`` in their own account
(the SDK's ``nack(error=)``); the broker stores it in the control account's ``ENCLAVE_ERRORS``
stream even while the control process is down (reading and writing one: state/notes.py). The
dead-letter mover puts a message's note on its dead letter (mover.py), the desk answers an app's
question about its messages' notes (desk/endpoint.py), and an export shows them
(queues/contents.py). A queue keeps its newest ERRORS_PER_QUEUE: one app's failures cannot push
out another queue's notes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from .. import pushes
from ..broker.config import CONTROL_STREAM_BYTES
from ..broker.connection import BrokerConnection, ensure_stream
from ..broker.direct import direct_batch, direct_get_subject
from ..broker.tasks import stop_tasks
from ..envelope import one_line
from ..errors import EnclaveError
from ..names import ERRORS_STREAM, errors_subject
from ..retry import retry_unavailable
from ..state.notes import drop_note, read_note

LEADER_READS = 16  #: notes read from the leader at once (a cluster: ``last_errors``)
log = logging.getLogger("enclave.deadletters")

KEEP_SECONDS = 14 * 24 * 3600.0  #: error notes live as long as the longest retention
#: error notes a queue keeps (its newest; one a message). Past it by ERRORS_SLACK, the oldest go in
#: one purge
ERRORS_PER_QUEUE = 1000
ERRORS_SLACK = 100
ERROR_NOTE_BYTES = 2048  #: bytes one stored note may take (a note is cut to 1 KiB: envelope.one_line)


class ErrorNotes:
    """The error notes' stream, in the control process: created, bounded, a deleted queue's forgotten."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self._sub: Any = None
        self._noted: dict[str, int] = {}  #: queue id -> error notes stored since its last trim (an upper bound)
        self._trimming: set[str] = set()
        self._trims: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        # one note a message (a newer one replaces it); when the stream is full new notes are
        # refused rather than other queues' notes pushed out, and each queue keeps its newest
        # ERRORS_PER_QUEUE (``_trim_notes``)
        js = self.conn.js
        await ensure_stream(js, api.StreamConfig(
            name=ERRORS_STREAM, subjects=[errors_subject("*", "*")], retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_age=KEEP_SECONDS, max_bytes=CONTROL_STREAM_BYTES[ERRORS_STREAM],
            max_msgs_per_subject=1, max_msg_size=ERROR_NOTE_BYTES, discard=api.DiscardPolicy.NEW, allow_direct=True,
            num_replicas=1,
        ))
        # every stored note, the old ones first (headers only: just counted)
        self._sub = await retry_unavailable(lambda: js.subscribe(
            errors_subject("*"), ordered_consumer=True, headers_only=True, cb=self._on_error_note))

    async def stop(self) -> None:
        if self._sub is not None:
            await pushes.unsubscribe(self._sub)
        await stop_tasks(list(self._trims))

    async def forget(self, queue_id: str) -> None:
        """A queue was deleted: drop its error notes."""
        self._noted.pop(queue_id, None)
        await drop_note(self.conn.js, queue_id)

    # -- bounding each queue's notes ------------------------------------------------------------

    async def _on_error_note(self, note: Msg) -> None:
        """An error note is stored in ERRORS_STREAM (read here headers only, to count it): past
        ERRORS_PER_QUEUE and some slack, trim the queue's notes to its newest."""
        queue_id = note.subject.split(".")[1]
        count = self._noted[queue_id] = self._noted.get(queue_id, 0) + 1
        if count > ERRORS_PER_QUEUE + ERRORS_SLACK and queue_id not in self._trimming:
            self._trimming.add(queue_id)
            task = asyncio.create_task(self._trim_notes(queue_id))
            self._trims.add(task)
            task.add_done_callback(self._trims.discard)

    async def _trim_notes(self, queue_id: str) -> None:
        try:
            await retry_unavailable(lambda: self.conn.js.purge_stream(
                ERRORS_STREAM, subject=errors_subject(queue_id), keep=ERRORS_PER_QUEUE))
            self._noted[queue_id] = ERRORS_PER_QUEUE
        except (nats.errors.Error, nats.js.errors.Error, EnclaveError) as exc:
            log.warning("error notes of queue %s not trimmed: %s", queue_id, exc)
        finally:
            self._trimming.discard(queue_id)


async def last_errors(nc: Client, queue_id: str, message_ids: Iterable[int]) -> dict[int, str]:
    """The notes of many messages of a queue, by message id (those with none are left out), in one
    batched direct get for the last message of each subject (``multi_last``; measured on 2.15.1 with
    1,000 subjects, the most a desk request names) on the control account's connection ``nc``: one
    request, not one a message."""
    wanted = sorted(set(message_ids))
    if not wanted:
        return {}
    found = await direct_batch(nc, direct_get_subject(ERRORS_STREAM),
                               {"multi_last": [errors_subject(queue_id, i) for i in wanted], "batch": len(wanted)},
                               f"the error notes of queue {queue_id}")
    notes = {noted[0]: noted[1] for note in found.messages
             if (noted := read_note(note.headers, note.data)) is not None and noted[1]}
    if CONTROL_STREAM_BYTES.replicas > 1:
        # any replica answers a direct get, one that has not applied the last writes yet among
        # them: a note stored a moment ago (the app's, just before it handed the message back)
        # was missing from 1 dead letter in 70. What it did not find is asked of the leader
        notes.update(await _from_leader(nc, queue_id, [i for i in wanted if i not in notes]))
    return notes


async def _from_leader(nc: Client, queue_id: str, message_ids: list[int]) -> dict[int, str]:
    """The notes of these messages as the errors stream's leader has them (``STREAM.MSG.GET``, which
    only the leader answers), LEADER_READS at a time; those with none are left out."""
    js = nc.jetstream(timeout=5)
    gate = asyncio.Semaphore(LEADER_READS)

    async def one(message_id: int) -> tuple[int, str]:
        async with gate:
            try:
                stored = await js.get_last_msg(ERRORS_STREAM, errors_subject(queue_id, message_id))
            except (nats.errors.Error, nats.js.errors.Error):  # none, or no answer: left out
                return message_id, ""
        return message_id, one_line((stored.data or b"").decode(errors="replace"))

    return {message_id: text for message_id, text in await asyncio.gather(*(one(i) for i in message_ids)) if text}
