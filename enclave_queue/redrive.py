"""Dead letters by hand: list a dead-letter queue's letters, retry or discard one, and redrive
many as a task whose progress the CLI (and later the console) follows.

Reading never leases: letters are read by sequence (batched direct gets), so workers of the
dead-letter queue are not disturbed. Moving a letter back publishes it to its destination with
a ``Nats-Msg-Id`` that is a MAC of the dead-letter queue's id and the letter's sequence
(auth/provenance.py: no app can guess it to pre-empt the copy) and only then deletes it from the dead-letter queue, so
a redrive interrupted anywhere and run again duplicates nothing (within the destination's
dedupe window) and loses nothing. The moved message is new: its receive count starts again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Optional

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from .auth.provenance import Provenance
from .broker.connection import REQUEST_TIMEOUT, RETRY_WINDOW, delete_message, retry_unavailable
from .controller.deadletters import clean_headers
from .envelope import (
    DEAD_LETTERED_AT,
    FIRST_ENQUEUED,
    LAST_ERROR,
    RECEIVE_COUNT,
    SOURCE_PROJECT,
    SOURCE_QUEUE,
    SOURCE_SEQUENCE,
)
from .errors import BrokerUnavailable, EnclaveError, NotFound, SpecError, publish_refused
from .names import jsapi_prefix, send_subject, stream_name
from .spec import (
    FILTER_RULE,
    LIST_LIMIT_RULE,
    MAX_FILTER,
    MAX_LIST,
    MAX_REDRIVE_RATE,
    NAME_RULE,
    QUEUE_NAME_PATTERN,
    REDRIVE_MAX_RULE,
    REDRIVE_RATE_RULE,
    given,
    subject_for,
)
from .state.records import QueueRecord

if TYPE_CHECKING:
    from .service import QueueService

log = logging.getLogger("enclave.redrive")

READ_BATCH = 200  #: letters read per direct-get request
CHUNK = 64  #: letters moved at once (publishes pipelined, then deletes)
KEEP_FINISHED = 100  #: finished redrive tasks remembered


def _text(value: Any, longest: int) -> bool:
    """A string of 1 to ``longest`` characters that UTF-8 can encode (JSON may carry a lone
    surrogate, "\\ud800", which no answer could then repeat)."""
    try:
        return isinstance(value, str) and 1 <= len(value) <= longest and bool(value.encode())
    except UnicodeEncodeError:
        return False


class _Stopped(Exception):
    """A redrive asked to stop."""


@dataclass
class Letter:
    """One message of a dead-letter queue, as read (not leased)."""

    sequence: int
    data: bytes
    headers: dict[str, str]
    stored_at: Optional[str]

    @property
    def last_error(self) -> str:
        return self.headers.get(LAST_ERROR, "")

    def vouched(self, provenance: Provenance, queue_id: str) -> Letter:
        """This letter as read from queue ``queue_id``: its dead-letter headers kept only if the
        control plane wrote them (auth/provenance.py)."""
        return Letter(self.sequence, self.data, provenance.vouched(queue_id, self.headers, self.data), self.stored_at)

    def view(self) -> dict[str, Any]:
        h = self.headers
        out: dict[str, Any] = {
            "sequence": self.sequence,
            "source_queue": h.get(SOURCE_QUEUE),
            "source_project": h.get(SOURCE_PROJECT),
            "source_sequence": int(h[SOURCE_SEQUENCE]) if SOURCE_SEQUENCE in h else None,
            "receive_count": int(h[RECEIVE_COUNT]) if RECEIVE_COUNT in h else None,
            "last_error": h.get(LAST_ERROR),
            "first_enqueued_at": h.get(FIRST_ENQUEUED) or self.stored_at,
            "dead_lettered_at": h.get(DEAD_LETTERED_AT) or self.stored_at,
            "content_type": h.get("Content-Type"),
        }
        try:
            out["body"] = self.data.decode()
        except UnicodeDecodeError:
            out["body"], out["body_base64"] = None, base64.b64encode(self.data).decode()
        return out


@dataclass
class RedriveTask:
    id: str
    project: str
    queue: str
    to: Optional[str]
    max: Optional[int]
    rate: Optional[float]
    filter_error: Optional[str]
    dry_run: bool
    total: int = 0  #: letters this redrive expects to move (an estimate without a filter)
    moved: int = 0  #: moved (or, in a dry run, that would move)
    failed: int = 0
    scanned: int = 0
    state: str = "running"  #: running, done, failed, cancelled
    errors: list[str] = field(default_factory=list)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    finished_at: Optional[str] = None
    runner: Optional[asyncio.Task[None]] = field(default=None, repr=False)
    stop_requested: bool = field(default=False, repr=False)  #: stop after the letter being moved
    last_sequence: int = field(default=0, repr=False)  #: the newest letter when the redrive started

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id, "project": self.project, "queue": self.queue, "to": self.to, "max": self.max,
            "rate": self.rate, "filter_error": self.filter_error, "dry_run": self.dry_run, "state": self.state,
            "total": self.total, "moved": self.moved, "failed": self.failed,
            "remaining": max(self.total - self.moved - self.failed, 0) if self.state == "running" else 0,
            "errors": self.errors[:10], "started_at": self.started_at, "finished_at": self.finished_at,
        }


class DeadLetterOps:
    def __init__(self, service: QueueService, provenance: Provenance) -> None:
        self.service = service
        self.provenance = provenance
        self.tasks: dict[str, RedriveTask] = {}

    @property
    def conn(self) -> Any:
        return self.service.conn

    # -- reading --------------------------------------------------------------------------------

    async def read(self, record: QueueRecord, after: int, limit: int) -> list[Letter]:
        """Up to ``limit`` messages of ``record``'s queue subject with a sequence above ``after``,
        oldest first (``direct_batch``), their dead-letter headers vouched for (``Letter.vouched``)."""
        request = {"seq": after + 1, "next_by_subj": subject_for(record.spec.project, record.spec.name), "batch": limit}
        letters, _ = await direct_batch(self.conn.control, f"{jsapi_prefix(record.id)}.DIRECT.GET.{stream_name(record.id)}",
                                        request, f"the messages of queue '{record.spec.name}'")
        return [letter.vouched(self.provenance, record.id) for letter in letters]

    async def list(self, project: str, name: str, limit: int = 50, after: int = 0) -> dict[str, Any]:
        """A page of a queue's letters (its messages, read without leasing them)."""
        if not 1 <= limit <= MAX_LIST:
            message = f"must be {LIST_LIMIT_RULE} (got {given(limit)})"
            raise SpecError(f"limit {message}.", errors=[{"field": "limit", "message": message}])
        record = await self.service.ready(project, name)
        letters = await self.read(record, after, limit)
        return {
            "dead_letters": [letter.view() for letter in letters],
            "next_after": letters[-1].sequence if len(letters) == limit else None,
        }

    async def _letter(self, record: QueueRecord, seq: int) -> Letter:
        letters = await self.read(record, seq - 1, 1)
        if not letters or letters[0].sequence != seq:
            raise NotFound(f"Dead letter {seq} does not exist in queue '{record.spec.name}'.")
        return letters[0]

    # -- moving ---------------------------------------------------------------------------------

    async def _destination(self, record: QueueRecord, letter: Letter, to: Optional[str]) -> QueueRecord:
        name = to or letter.headers.get(SOURCE_QUEUE)
        if not name:
            raise SpecError(f"Message {letter.sequence} of queue '{record.spec.name}' was not dead-lettered by Enclave, "
                            "so it names no source queue; give a destination.",
                            errors=[{"field": "to", "message": "is required for this message"}])
        return await self.service.live(record.spec.project, name)  # a dead-letter queue serves its own project

    async def _move_back(self, record: QueueRecord, letter: Letter, dest: QueueRecord) -> int:
        """Publish ``letter`` to ``dest`` (deduplicated), then delete it from ``record``'s stream."""
        sequence = await self._publish_back(record, letter, dest)
        await delete_message(self.conn.queue_js(record.id), stream_name(record.id), letter.sequence)
        return sequence

    async def _publish_back(self, record: QueueRecord, letter: Letter, dest: QueueRecord) -> int:
        """Publish ``letter`` to ``dest``; a repeat within the dedupe window stores nothing new."""
        headers = {**clean_headers(letter.headers), "Nats-Msg-Id": self.provenance.redrive_id(record.id, letter.sequence,
                                                                                        letter.headers)}
        subject = send_subject(dest.id, subject_for(dest.spec.project, dest.spec.name))
        reply = await retry_unavailable(
            lambda: self.conn.control.request(subject, letter.data, timeout=5, headers=headers))
        ack = json.loads(reply.data)
        if "error" in ack:
            raise publish_refused(ack["error"], f"'{dest.spec.name}' in project '{dest.spec.project}'",
                                  dest.spec.max_messages, dest.spec.max_bytes)
        return int(ack["seq"])

    async def retry(self, project: str, name: str, seq: int) -> dict[str, Any]:
        """Send one letter back to its source queue (a new message: its receive count starts over)."""
        record = await self.service.ready(project, name)
        letter = await self._letter(record, seq)
        dest = await self._destination(record, letter, None)
        new_seq = await self._move_back(record, letter, dest)
        return {"queue": dest.spec.name, "sequence": new_seq}

    async def discard(self, project: str, name: str, seq: int) -> None:
        """Delete one letter for good."""
        record = await self.service.ready(project, name)
        if not await delete_message(self.conn.queue_js(record.id), stream_name(record.id), seq):
            raise NotFound(f"Dead letter {seq} does not exist in queue '{name}'.")

    # -- redrive tasks --------------------------------------------------------------------------

    async def start_redrive(self, project: str, name: str, *, to: Optional[str] = None, max: Optional[int] = None,
                            rate: Optional[float] = None, filter_error: Optional[str] = None,
                            dry_run: bool = False) -> dict[str, Any]:
        """Start moving letters back (to their source queues, or all to ``to``); returns the task.
        SpecError naming the field for a bad option, or a ``to`` that breaks the queue-name rule,
        names this queue or no queue of the project."""
        for option, value, ok, phrase in (
                ("max", max, max is None or (isinstance(max, int) and max >= 1), REDRIVE_MAX_RULE),
                ("rate", rate, rate is None or 0 < rate <= MAX_REDRIVE_RATE, REDRIVE_RATE_RULE),
                ("to", to, to is None or (isinstance(to, str) and QUEUE_NAME_PATTERN.fullmatch(to)), NAME_RULE),
                ("filter_error", filter_error, filter_error is None or _text(filter_error, MAX_FILTER), FILTER_RULE)):
            if not ok:
                message = f"must be {phrase} (got {given(value)})"
                raise SpecError(f"{option} {message}.", errors=[{"field": option, "message": message}])
        record = await self.service.ready(project, name)
        if to is not None:
            if to == name:
                raise SpecError("to must name another queue than the one being redriven.",
                                errors=[{"field": "to", "message": "must name another queue"}])
            try:
                await self.service.live(project, to)
            except NotFound:
                raise SpecError(f"to names queue '{to}', which does not exist in project '{project}'.",
                                errors=[{"field": "to", "message": f"names no queue in project '{project}'"}]) from None
        else:
            sources = [r.spec.name for _, r, _ in await self.service.store.queues.items(f"{project}.*")
                       if r.spec.dead_letter_queue == name and not r.deleting]
            if not sources:
                raise SpecError(f"Queue '{name}' is not the dead-letter queue of any queue in project '{project}'; "
                                "name a destination with 'to'.",
                                errors=[{"field": "to", "message": "is required: the queue is no queue's DLQ"}])
        task = RedriveTask(id=f"r{secrets.token_hex(4)}", project=project, queue=name, to=to, max=max, rate=rate,
                           filter_error=filter_error, dry_run=dry_run)
        info = await retry_unavailable(lambda: self.conn.queue_js(record.id).stream_info(stream_name(record.id)))
        task.total = info.state.messages if max is None else min(max, info.state.messages)
        task.last_sequence = info.state.last_seq  # letters that arrive later wait for the next redrive
        task.runner = asyncio.create_task(self._run(task, record), name=f"redrive:{task.id}")
        self.tasks[task.id] = task
        self._forget_old()
        return task.view()

    def task(self, project: str, name: str, task_id: str) -> RedriveTask:
        task = self.tasks.get(task_id)
        if task is None or (task.project, task.queue) != (project, name):
            raise NotFound(f"Redrive '{task_id}' of queue '{name}' does not exist.")
        return task

    async def cancel(self, project: str, name: str, task_id: str) -> dict[str, Any]:
        """Stop a redrive after the letter it is moving (so its counts are exact)."""
        task = self.task(project, name, task_id)
        task.stop_requested = True
        if task.runner is not None:
            await task.runner
        return task.view()

    async def _run(self, task: RedriveTask, record: QueueRecord) -> None:
        """Read the letters in batches; move each batch's chosen letters CHUNK at a time, their
        publishes pipelined (stored in order), then their deletes; keep to ``rate``."""
        started = time.monotonic()
        destinations: dict[str, QueueRecord] = {}
        chunk_size = CHUNK if not task.rate else max(1, min(CHUNK, int(task.rate / 10)))
        after = 0
        contiguous = True  #: every letter so far was moved: a chunk can be removed with one purge
        try:
            while task.max is None or task.moved < task.max:
                letters = await self.read(record, after, READ_BATCH)
                if not letters or letters[0].sequence > task.last_sequence:
                    break
                chosen: list[Letter] = []
                for letter in letters:
                    if letter.sequence > task.last_sequence:
                        break
                    after = letter.sequence
                    task.scanned += 1
                    if task.filter_error and task.filter_error.lower() not in letter.last_error.lower():
                        contiguous = False
                        continue
                    if task.max is not None and task.moved + len(chosen) >= task.max:
                        break
                    chosen.append(letter)
                for i in range(0, len(chosen), chunk_size):
                    if task.stop_requested:
                        raise _Stopped
                    failed = task.failed
                    await self._move_chunk(task, record, chosen[i:i + chunk_size], destinations, contiguous)
                    contiguous = contiguous and task.failed == failed
                    if task.rate and not task.dry_run:
                        ahead = task.moved / task.rate - (time.monotonic() - started)
                        while ahead > 0 and not task.stop_requested:
                            await asyncio.sleep(min(ahead, 0.05))
                            ahead = task.moved / task.rate - (time.monotonic() - started)
                if task.max is not None and task.moved >= task.max:
                    break
            if task.filter_error or task.max is None:
                task.total = task.moved + task.failed  # now known exactly
            task.state = "done"
        except _Stopped:
            task.state = "cancelled"
        except Exception as exc:
            task.state = "failed"
            task.errors.append(str(exc) or type(exc).__name__)
            log.warning("redrive %s of %s failed: %s", task.id, record.key, exc)
        finally:
            task.finished_at = datetime.now(UTC).isoformat()

    async def _move_chunk(self, task: RedriveTask, record: QueueRecord, letters: list[Letter],
                          destinations: dict[str, QueueRecord], contiguous: bool) -> None:
        """Move ``letters``. ``contiguous``: every letter before them was moved too, so if all of
        these go, one purge below the last removes them (deletes one by one cost a write each)."""
        ready: list[tuple[Letter, QueueRecord]] = []
        for letter in letters:
            key = task.to or letter.headers.get(SOURCE_QUEUE) or ""
            try:
                if key not in destinations:
                    destinations[key] = await self._destination(record, letter, task.to)
                ready.append((letter, destinations[key]))
            except (EnclaveError, nats.errors.Error) as exc:
                self._failed(task, letter, exc)
        if task.dry_run:
            task.moved += len(ready)
            return
        published = await asyncio.gather(*(self._publish_back(record, letter, dest) for letter, dest in ready),
                                         return_exceptions=True)
        js = self.conn.queue_js(record.id)
        stream = stream_name(record.id)
        for (letter, _), outcome in zip(ready, published, strict=True):
            if isinstance(outcome, BaseException):
                self._failed(task, letter, outcome)
        moved = [letter for (letter, _), outcome in zip(ready, published, strict=True)
                 if not isinstance(outcome, BaseException)]
        subject = subject_for(record.spec.project, record.spec.name)
        if contiguous and len(moved) == len(letters) and moved:
            await retry_unavailable(lambda: js.purge_stream(stream, subject=subject, seq=moved[-1].sequence + 1))
        else:
            await asyncio.gather(*(delete_message(js, stream, letter.sequence) for letter in moved))
        task.moved += len(moved)

    @staticmethod
    def _failed(task: RedriveTask, letter: Letter, exc: BaseException) -> None:
        task.failed += 1
        if len(task.errors) < 10:
            task.errors.append(f"message {letter.sequence}: {exc}")

    def _forget_old(self) -> None:
        finished = [t for t in self.tasks.values() if t.state != "running"]
        for task in finished[:-KEEP_FINISHED] if len(finished) > KEEP_FINISHED else []:
            self.tasks.pop(task.id, None)

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.stop_requested = True
            if task.runner is not None:
                await task.runner


async def direct_batch(nc: Any, api: str, request: dict[str, Any], what: str) -> tuple[list[Letter], bool]:
    """One batched direct get (``api``: a ``…DIRECT.GET.<stream>`` subject): the messages it
    returned, in sequence order, and whether more follow (the broker's ``Nats-Num-Pending``).
    Tried again while nobody answers (a configuration reload), not taken for an empty stream."""
    deadline = time.monotonic() + RETRY_WINDOW
    while True:
        found, end = await _direct_batch_once(nc, api, json.dumps(request).encode(), what)
        status = end.get("Status")
        if status != "503" or found or time.monotonic() > deadline:
            pending = end.get("Nats-Num-Pending", "0")
            return found, status == "204" and pending.isdigit() and int(pending) > 0
        await asyncio.sleep(0.05)


async def _direct_batch_once(nc: Any, api: str, request: bytes, what: str) -> tuple[list[Letter], dict[str, str]]:
    found: list[Letter] = []
    done: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()

    async def collect(msg: Msg) -> None:
        headers = dict(msg.headers or {})
        if "Status" not in headers:
            found.append(Letter(int(headers["Nats-Sequence"]), msg.data or b"", headers, headers.get("Nats-Time-Stamp")))
        elif not done.done():  # 204: end of batch; 404: nothing (more); 503: no responders
            done.set_result(headers)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=collect)
    try:
        await nc.publish(api, request, reply=inbox)
        return found, await asyncio.wait_for(done, REQUEST_TIMEOUT)
    except TimeoutError:
        raise BrokerUnavailable(f"Reading {what} timed out.") from None
    finally:
        await sub.unsubscribe()
