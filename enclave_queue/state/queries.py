"""Questions asked of the queue records by several layers: the live queues, a queue's
dead-letter queue and the queues that use it as theirs, and a queue found by its id.

Everything here reads the state store only (kv.py); the broker is asked nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection
from typing import Optional

from ..spec import queue_key
from .kv import Store
from .records import QueueRecord

log = logging.getLogger("enclave.state")

RESTART_SECONDS = 0.5  #: seconds before a failed watch of the queue records starts again


async def declared(store: Store, pattern: str = ">") -> list[QueueRecord]:
    """The records of the queues that are not being deleted, by key (``pattern``: ``<project>.*``
    for one project's)."""
    return [record for _, record, _ in sorted(await store.queues.items(pattern), key=lambda item: item[0])
            if not record.deleting]


async def live_queues(store: Store, applied: Collection[str]) -> list[QueueRecord]:
    """The queues whose depth can be read: not being deleted, their account loaded in the broker
    (``applied``: the account ids it runs; a queue waiting for a reload would only make its reads
    wait for no responders)."""
    return [record for record in await declared(store) if record.id in applied]


def depth_reads(records: list[QueueRecord]) -> list[tuple[str, Optional[str]]]:
    """``broker.depth.read_depths``' arguments: each queue's id and its dead-letter queue's id (if
    it is among ``records``)."""
    ids = {record.key: record.id for record in records}
    return [(r.id, ids.get(queue_key(r.spec.project, r.spec.dead_letter_queue)) if r.spec.dead_letter_queue
             else None) for r in records]


async def dead_letter_queue_of(store: Store, record: QueueRecord) -> Optional[QueueRecord]:
    """The record of the queue's dead-letter queue, if it has one that is live."""
    if not record.spec.dead_letter_queue:
        return None
    found = await store.queues.get(queue_key(record.spec.project, record.spec.dead_letter_queue))
    return found[0] if found and not found[0].deleting else None


async def dead_letter_users(store: Store, project: str, name: str) -> list[str]:
    """The names of the live queues of ``project`` whose dead-letter queue is ``name``."""
    return [r.spec.name for _, r, _ in await store.queues.items(f"{project}.*")
            if r.spec.dead_letter_queue == name and not r.deleting]


class QueueIndex:
    """Queue records by queue id (the account id the broker's subjects carry); the key of each id
    is remembered, so a lookup is one read.

    ``start`` keeps a copy of every record in memory, from a watch of the bucket (nats-py's
    ordered consumer: the broker pushes each write as it stores it, and the watch starts again
    if it fails). The dead-letter mover's lookups (``cached=True``) read that copy: under load
    its reads of the bucket were a round trip and two of its requests a batch. A record the copy
    does not hold (a queue created a moment ago, the watch not started or failing) is read
    fresh, as every other lookup is."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ids: dict[str, str] = {}  #: queue id -> queue key (read or watched; checked against the record)
        self._watched: dict[str, QueueRecord] = {}  #: queue key -> record, from the watch
        self._task: Optional[asyncio.Task[None]] = None
        self._reconnects = -1  #: the connection's reconnects when the watch began: the copy holds only while they stay so

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="queue-index")

    async def stop(self) -> None:
        task, self._task = self._task, None
        # cancelled again until it ends: Python 3.11's wait_for can drop a cancel that comes as its
        # inner wait completes, and the watch loops for ever (a failed start then hung the stop)
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=0.5)
        self._watched.clear()

    async def _follow(self) -> None:
        while True:
            try:
                self._reconnects = self.store.queues.reconnects()
                async with contextlib.aclosing(self.store.queues.watch()) as watch:
                    async for key, record in watch:
                        self._seen(key, record)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker restarting, say: read fresh until the watch is back
                log.warning("watch of the queue records interrupted (%s); starting it again", exc)
            self._watched.clear()
            await asyncio.sleep(RESTART_SECONDS)

    def _seen(self, key: str, record: Optional[QueueRecord]) -> None:
        if record is None:
            self._watched.pop(key, None)
        else:
            self._watched[key] = record
            self._ids[record.id] = key

    def _current(self) -> bool:
        """Whether the copy can be believed: not once the connection has been lost since the watch
        began (the broker may have restarted, and forgotten the watch, which starts again soon)."""
        return self.store.queues.reconnects() == self._reconnects

    def watched(self, queue_id: str) -> Optional[QueueRecord]:
        """The watch's copy of the record of the queue that owns ``queue_id``, if it holds one."""
        if not self._current():
            return None
        record = self._watched.get(self._ids.get(queue_id, ""))
        return record if record is not None and record.id == queue_id else None

    async def record_of(self, queue_id: str, hint: Optional[str] = None, *, cached: bool = False) -> Optional[QueueRecord]:
        """The current record of the queue that owns ``queue_id`` (read fresh: a changed DLQ
        applies to the next dead letter; ``cached``: the watch's copy, if it holds one). ``hint``:
        the key the caller says it is (checked)."""
        if cached and (record := self.watched(queue_id)) is not None:
            return record
        for key in (self._ids.get(queue_id), hint):
            if key is not None:
                found = await self.store.queues.get(key)
                if found is not None and found[0].id == queue_id:
                    self._ids[queue_id] = key
                    return found[0]
        self._ids = {record.id: key for key, record, _ in await self.store.queues.items()}
        key = self._ids.get(queue_id)
        if key is None:
            return None
        found = await self.store.queues.get(key)
        return found[0] if found is not None and found[0].id == queue_id else None

    async def dead_letter_queue_of(self, record: QueueRecord) -> Optional[QueueRecord]:
        """``dead_letter_queue_of``, from the watch's copy if it holds the DLQ's record."""
        if record.spec.dead_letter_queue and self._current() and (
                found := self._watched.get(queue_key(record.spec.project, record.spec.dead_letter_queue))) is not None:
            return found if not found.deleting else None
        return await dead_letter_queue_of(self.store, record)

    def forget(self, queue_id: str) -> None:
        """A queue was deleted: its id names nothing any more."""
        if (key := self._ids.pop(queue_id, None)) is not None:
            self._watched.pop(key, None)
