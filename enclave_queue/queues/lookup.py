"""A queue by its name: its record if it exists (``live``), and if its stream is there (``ready``).

What touches a queue's stream (messages, stats, dead letters, export, clear) first asks
``ready``: a queue the reconciler has not made Ready yet is a Conflict, "not ready yet", never a
broker error. Once a queue has been Ready its stream exists until it is deleted, so its id is
remembered and the status is read once per queue, not once per message.
"""

from __future__ import annotations

from typing import Optional

from ..errors import Conflict, NotFound
from ..spec import PROJECT_PATTERN, QUEUE_NAME_PATTERN, queue_key
from ..state.kv import Store
from ..state.queries import dead_letter_queue_of
from ..state.records import QueueRecord, QueueStatus


def queue_missing(project: str, name: str) -> NotFound:
    """The NotFound of a queue that does not exist (or is being deleted)."""
    return NotFound(f"Queue '{name}' does not exist in project '{project}'.")


def not_ready(record: QueueRecord) -> Conflict:
    """The Conflict of a queue whose stream is not there yet (just created, or its account is
    being loaded by the broker)."""
    name, project = record.spec.name, record.spec.project
    return Conflict(f"Queue '{name}' in project '{project}' is not ready yet; wait until its status is Ready "
                    f"(GET /v1/projects/{project}/queues/{name}/status?wait_seconds=30).")


def was_ready(status: QueueStatus) -> bool:
    """Whether the reconciler has made the queue Ready at some generation: it is Ready now, or its
    Ready condition has a reason (a condition that was never true keeps ``NotObserved``, see
    ``QueueStatus.transition``). A queue Ready once keeps its stream until it is deleted."""
    return status.state == "Ready" or any(c.type == "Ready" and c.reason != "NotObserved" for c in status.conditions)


class Lookup:
    """Queue records by project and name, and which of them are ready."""

    def __init__(self, store: Store) -> None:
        self.store = store
        #: ids of queues seen Ready (account ids are never reused: a deleted queue's account goes)
        self._ready: set[str] = set()

    async def get(self, project: str, name: str) -> tuple[QueueRecord, int]:
        """The record (even one being deleted) and its revision; NotFound if there is none."""
        if not (PROJECT_PATTERN.fullmatch(project) and QUEUE_NAME_PATTERN.fullmatch(name)):
            raise queue_missing(project, name)  # names nothing (and is no state-store key)
        found = await self.store.queues.get(queue_key(project, name))
        if found is None:
            raise queue_missing(project, name)
        return found

    async def live(self, project: str, name: str) -> QueueRecord:
        """The record of a queue that exists and is not being deleted; NotFound otherwise."""
        record, _ = await self.get(project, name)
        if record.deleting:
            raise queue_missing(project, name)
        return record

    async def ready(self, project: str, name: str) -> QueueRecord:
        """The record of a live queue whose stream is there; NotFound, or Conflict (``not_ready``)
        while the reconciler has not made it Ready yet. The status is read until it has been."""
        record = await self.live(project, name)
        if record.id not in self._ready:
            found = await self.store.status.get(record.key)
            if found is None or not was_ready(found[0]):
                raise not_ready(record)
            self._ready.add(record.id)
        return record

    def deleting(self, queue_id: str) -> None:
        """The queue is being deleted: its stream is going."""
        self._ready.discard(queue_id)

    async def dead_letter_queue(self, record: QueueRecord) -> Optional[QueueRecord]:
        """The record of the queue's dead-letter queue, if it has one that is live."""
        return await dead_letter_queue_of(self.store, record)
