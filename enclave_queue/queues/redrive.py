"""A redrive: many dead letters moved back as a task whose progress the CLI (and the console)
follows, at most ``max`` of them, at most ``rate`` a second, only those whose last error holds
``filter_error``, or none at all (``dry_run``: counted as if moved).

The letters are read in batches, and each batch's chosen letters are moved CHUNK at a time: their
publishes pipelined (stored in order, deduplicated: letters.py), then their deletes. Letters that
arrive after the redrive started wait for the next one. A stop takes effect after the chunk being
moved, so the counts are exact.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Optional, TypeVar

import nats.errors

from ..broker.connection import delete_message
from ..envelope import SOURCE_QUEUE
from ..errors import BrokerUnavailable, EnclaveError
from ..names import stream_name
from ..retry import retry_unavailable
from ..spec import subject_for
from ..state.records import QueueRecord
from .letters import READ_BATCH, Letter, Letters

log = logging.getLogger("enclave.redrive")

CHUNK = 64  #: letters moved at once (publishes pipelined, then deletes)
#: seconds a redrive goes on asking (for its next letters, a letter's copy stored, its letters
#: deleted) while the broker does not answer: its restart, by the supervisor, takes a moment, and
#: what was asked just before is never answered. Each is safe to ask again (a copy has its dedupe id)
RIDE_OUT = 30.0
T = TypeVar("T")
#: what a broker that does not answer (or restarts) raises
UNANSWERED = (BrokerUnavailable, nats.errors.Error, TimeoutError)
#: fault injection for the tests: "stop-after-redrive-publish" stops the process (SIGSTOP) once a
#: chunk's letters are published and before they are deleted, for the test to kill it there
FAULT = os.environ.get("ENCLAVE_FAULT", "")


class _Stopped(Exception):
    """A redrive asked to stop."""


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
    source: Optional[str] = None  #: only the letters that came from this queue of the project
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
            "rate": self.rate, "filter_error": self.filter_error, "dry_run": self.dry_run, "source": self.source,
            "state": self.state,
            "total": self.total, "moved": self.moved, "failed": self.failed,
            "remaining": max(self.total - self.moved - self.failed, 0) if self.state == "running" else 0,
            "errors": self.errors[:10], "started_at": self.started_at, "finished_at": self.finished_at,
        }

    def failed_letter(self, letter: Letter, exc: BaseException) -> None:
        """Count a letter that could not be moved, and say why (the first ten)."""
        self.failed += 1
        if len(self.errors) < 10:
            self.errors.append(f"message {letter.sequence}: {exc}")


async def run_redrive(task: RedriveTask, record: QueueRecord, letters: Letters) -> None:
    """Move ``task``'s letters of ``record``'s queue; its state says how it ended."""
    started = time.monotonic()
    destinations: dict[str, QueueRecord] = {}
    chunk_size = CHUNK if not task.rate else max(1, min(CHUNK, int(task.rate / 10)))
    after = 0
    contiguous = True  #: every letter so far was moved: a chunk can be removed with one purge
    try:
        while task.max is None or task.moved < task.max:
            batch = await _read(letters, record, after)
            if not batch or batch[0].sequence > task.last_sequence:
                break
            chosen: list[Letter] = []
            for letter in batch:
                if letter.sequence > task.last_sequence:
                    break
                after = letter.sequence
                task.scanned += 1
                if task.filter_error and task.filter_error.lower() not in letter.last_error.lower():
                    contiguous = False
                    continue
                if task.source and not letter.came_from(task.project, task.source):
                    contiguous = False
                    continue
                if task.max is not None and task.moved + len(chosen) >= task.max:
                    break
                chosen.append(letter)
            for i in range(0, len(chosen), chunk_size):
                if task.rate and not task.dry_run:  # paced before a chunk: the last one ends the task at once
                    ahead = task.moved / task.rate - (time.monotonic() - started)
                    while ahead > 0 and not task.stop_requested:
                        await asyncio.sleep(min(ahead, 0.05))
                        ahead = task.moved / task.rate - (time.monotonic() - started)
                if task.stop_requested:
                    raise _Stopped
                failed = task.failed
                await _move_chunk(task, record, letters, chosen[i:i + chunk_size], destinations, contiguous)
                contiguous = contiguous and task.failed == failed
            if task.max is not None and task.moved >= task.max:
                break
        if task.filter_error or task.source or task.max is None:
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


async def _ridden_out(record: QueueRecord, call: Callable[[], Awaitable[T]]) -> T:
    """``await call()``, asked again while the broker does not answer, for RIDE_OUT seconds."""
    deadline = time.monotonic() + RIDE_OUT
    while True:
        try:
            return await call()
        except UNANSWERED as exc:
            if time.monotonic() > deadline:
                raise
            log.info("redrive of %s: the broker did not answer (%s); asking again", record.key, exc)
            await asyncio.sleep(0.5)


async def _read(letters: Letters, record: QueueRecord, after: int) -> list[Letter]:
    return await _ridden_out(record, lambda: letters.read(record, after, READ_BATCH))


async def _move_chunk(task: RedriveTask, record: QueueRecord, letters: Letters, chunk: list[Letter],
                      destinations: dict[str, QueueRecord], contiguous: bool) -> None:
    """Move ``chunk``. ``contiguous``: every letter before them was moved too, so if all of these
    go, one purge below the last removes them (deletes one by one cost a write each)."""
    ready: list[tuple[Letter, QueueRecord]] = []
    for letter in chunk:
        key = task.to or letter.headers.get(SOURCE_QUEUE) or ""
        try:
            if key not in destinations:
                destinations[key] = await letters.destination(record, letter, task.to)
            ready.append((letter, destinations[key]))
        except (EnclaveError, nats.errors.Error) as exc:
            task.failed_letter(letter, exc)
    if task.dry_run:
        task.moved += len(ready)
        return
    published = await asyncio.gather(*(_ridden_out(record, lambda letter=letter, dest=dest: letters.publish_back(
        record, letter, dest)) for letter, dest in ready), return_exceptions=True)
    js = letters.conn.queue_js(record.id)
    stream = stream_name(record.id)
    for (letter, _), outcome in zip(ready, published, strict=True):
        if isinstance(outcome, BaseException):
            task.failed_letter(letter, outcome)
    moved = [letter for (letter, _), outcome in zip(ready, published, strict=True)
             if not isinstance(outcome, BaseException)]
    if FAULT == "stop-after-redrive-publish":
        os.kill(os.getpid(), signal.SIGSTOP)
    subject = subject_for(record.spec.project, record.spec.name)
    # counted as this task's move only what this task took off the DLQ: another redrive of it at the
    # same time publishes the same letters (stored once: their Nats-Msg-Id) and both counted them
    if contiguous and len(moved) == len(chunk) and moved:
        request = json.dumps({"filter": subject, "seq": moved[-1].sequence + 1}).encode()
        answer = await _ridden_out(record, lambda: retry_unavailable(lambda: js._api_request(
            f"$JS.API.STREAM.PURGE.{stream}", request)))
        task.moved += int(answer.get("purged", len(moved)))
    else:
        deleted = await asyncio.gather(*(_ridden_out(record, lambda seq=letter.sequence: delete_message(js, stream, seq))
                                         for letter in moved))
        task.moved += sum(1 for gone in deleted if gone)
