"""Dead letters by hand: list a dead-letter queue's letters, retry or discard one, and start,
follow or cancel a redrive (redrive.py) of many.

A queue's dead letters are its messages, read without leasing them (letters.py: any queue can be
listed; a dead-letter queue's messages carry where they came from). Retry sends one back to its
source queue as a new message (its receive count starts over); discard deletes it for good.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, Optional

from ..broker.connection import BrokerConnection, delete_message
from ..envelope import SOURCE_QUEUE
from ..errors import NotFound, field_error, out_of_range
from ..names import stream_name
from ..retry import retry_unavailable
from ..spec import (
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
)
from ..state.kv import Store
from ..state.queries import dead_letter_users
from ..state.records import QueueRecord
from .letters import Letter, Letters
from .lookup import Lookup
from .redrive import RedriveTask, run_redrive
from .tally import DeadLetterTally

KEEP_FINISHED = 100  #: finished redrive tasks remembered


def _text(value: Any, longest: int) -> bool:
    """A string of 1 to ``longest`` characters that UTF-8 can encode (JSON may carry a lone
    surrogate, "\\ud800", which no answer could then repeat)."""
    try:
        return isinstance(value, str) and 1 <= len(value) <= longest and bool(value.encode())
    except UnicodeEncodeError:
        return False


class DeadLetterOps:
    """Dead letters by hand, for the API, the console and the desk; the redrives it started."""

    def __init__(self, conn: BrokerConnection, store: Store, lookup: Lookup, letters: Letters,
                 tally: DeadLetterTally) -> None:
        self.conn = conn
        self.store = store
        self.lookup = lookup
        self.letters = letters
        self.tally = tally
        self.tasks: dict[str, RedriveTask] = {}

    async def list(self, project: str, name: str, limit: int = 50, after: int = 0,
                   source: Optional[str] = None) -> dict[str, Any]:
        """A page of a queue's letters (its messages, read without leasing them); with ``source``,
        only the letters that came from that queue of the project (a dead-letter queue may serve
        several), read on until the page is full or the queue ends."""
        if not 1 <= limit <= MAX_LIST:
            raise out_of_range("limit", LIST_LIMIT_RULE, given(limit))
        if source is not None and not (isinstance(source, str) and QUEUE_NAME_PATTERN.fullmatch(source)):
            raise out_of_range("source", NAME_RULE, given(source))
        record = await self.lookup.ready(project, name)
        if source is None:
            letters = await self.letters.read(record, after, limit)
        else:
            letters = []
            while len(letters) < limit:
                batch = await self.letters.read(record, after, MAX_LIST)
                letters += [letter for letter in batch if letter.came_from(project, source)]
                if len(batch) < MAX_LIST:
                    break
                after = batch[-1].sequence
            letters = letters[:limit]
        return {
            "dead_letters": [letter.view() for letter in letters],
            "next_after": letters[-1].sequence if len(letters) == limit else None,
        }

    async def _letter(self, record: QueueRecord, seq: int) -> Letter:
        letters = await self.letters.read(record, seq - 1, 1)
        if not letters or letters[0].sequence != seq:
            raise NotFound(f"Dead letter {seq} does not exist in queue '{record.spec.name}'.")
        return letters[0]

    async def retry(self, project: str, name: str, seq: int) -> dict[str, Any]:
        """Send one letter back to its source queue (a new message: its receive count starts over)."""
        record = await self.lookup.ready(project, name)
        letter = await self._letter(record, seq)
        if not letter.headers.get(SOURCE_QUEUE):  # the route takes no destination: a redrive does
            raise field_error("seq", "must be a letter Enclave dead-lettered (it names its source queue)",
                              f"Message {seq} of queue '{name}' was not dead-lettered by Enclave, so it names no "
                              "source queue to retry it to; move it with a redrive that names a destination "
                              "(\"to\").")
        dest = await self.letters.destination(record, letter, None)
        new_seq = await self.letters.move_back(record, letter, dest)
        return {"queue": dest.spec.name, "sequence": new_seq}

    async def discard(self, project: str, name: str, seq: int) -> None:
        """Delete one letter for good."""
        record = await self.lookup.ready(project, name)
        if not await delete_message(self.conn.queue_js(record.id), stream_name(record.id), seq):
            raise NotFound(f"Dead letter {seq} does not exist in queue '{name}'.")

    # -- redrives -------------------------------------------------------------------------------

    async def start_redrive(self, project: str, name: str, *, to: Optional[str] = None, max: Optional[int] = None,
                            rate: Optional[float] = None, filter_error: Optional[str] = None,
                            dry_run: bool = False, source: Optional[str] = None) -> dict[str, Any]:
        """Start moving letters back (to their source queues, or all to ``to``; with ``source``,
        only the letters that came from that queue); returns the task. SpecError naming the field
        for a bad option, or a ``to`` that breaks the queue-name rule, names this queue or no queue
        of the project."""
        for option, value, ok, phrase in (
                ("max", max, max is None or (isinstance(max, int) and max >= 1), REDRIVE_MAX_RULE),
                ("rate", rate, rate is None or 0 < rate <= MAX_REDRIVE_RATE, REDRIVE_RATE_RULE),
                ("to", to, to is None or (isinstance(to, str) and QUEUE_NAME_PATTERN.fullmatch(to)), NAME_RULE),
                ("source", source, source is None or (isinstance(source, str)
                                                      and QUEUE_NAME_PATTERN.fullmatch(source)), NAME_RULE),
                ("filter_error", filter_error, filter_error is None or _text(filter_error, MAX_FILTER), FILTER_RULE)):
            if not ok:
                raise out_of_range(option, phrase, given(value))
        record = await self.lookup.ready(project, name)
        if to is not None:
            if to == name:
                raise field_error("to", "must name another queue", "to must name another queue than the one being "
                                                                   "redriven.")
            try:
                await self.lookup.live(project, to)
            except NotFound:
                raise field_error("to", f"names no queue in project '{project}'",
                                  f"to names queue '{to}', which does not exist in project '{project}'.") from None
        elif not await dead_letter_users(self.store, project, name):
            raise field_error("to", "is required: the queue is no queue's DLQ",
                              f"Queue '{name}' is not the dead-letter queue of any queue in project '{project}'; "
                              "name a destination with 'to'.")
        task = RedriveTask(id=f"r{secrets.token_hex(4)}", project=project, queue=name, to=to, max=max, rate=rate,
                           filter_error=filter_error, dry_run=dry_run, source=source)
        info = await retry_unavailable(lambda: self.conn.queue_js(record.id).stream_info(stream_name(record.id)))
        total = info.state.messages
        if source is not None:  # only that queue's letters (None: too many to count them first)
            counts = await self.tally.by_source(record)
            total = counts[(project, source)] if counts is not None else total
        task.total = total if max is None else min(max, total)
        task.last_sequence = info.state.last_seq  # letters that arrive later wait for the next redrive
        task.runner = asyncio.create_task(run_redrive(task, record, self.letters), name=f"redrive:{task.id}")
        self.tasks[task.id] = task
        self._forget_old()
        return task.view()

    def task(self, project: str, name: str, task_id: str) -> RedriveTask:
        """The redrive ``task_id`` of this queue; NotFound if there is none."""
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

    def _forget_old(self) -> None:
        finished = [t for t in self.tasks.values() if t.state != "running"]
        for task in finished[:-KEEP_FINISHED] if len(finished) > KEEP_FINISHED else []:
            self.tasks.pop(task.id, None)

    async def stop(self) -> None:
        """Stop every running redrive (when the control process stops)."""
        for task in self.tasks.values():
            task.stop_requested = True
            if task.runner is not None:
                await task.runner
