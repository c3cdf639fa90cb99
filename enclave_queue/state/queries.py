"""Questions asked of the queue records by several layers: the live queues, a queue's
dead-letter queue and the queues that use it as theirs, and a queue found by its id.

Everything here reads the state store only (kv.py); the broker is asked nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Optional

from ..spec import queue_key
from .kv import Store
from .records import QueueRecord


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
    """Queue records by queue id (the account id the broker's subjects carry), read fresh each
    time; the key of each id is remembered, so a lookup is one read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ids: dict[str, str] = {}  #: queue id -> queue key

    async def record_of(self, queue_id: str, hint: Optional[str] = None) -> Optional[QueueRecord]:
        """The current record of the queue that owns ``queue_id`` (read fresh: a changed DLQ
        applies to the next dead letter). ``hint``: the key the caller says it is (checked)."""
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

    def forget(self, queue_id: str) -> None:
        """A queue was deleted: its id names nothing any more."""
        self._ids.pop(queue_id, None)
