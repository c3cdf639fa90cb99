"""How many letters each source queue has on a dead-letter queue, which several queues may share:
what the queue list's dead-letter column and a queue's Dead letters tab count, rather than the
whole dead-letter queue for each of its sources.

The broker counts a stream's messages, not their headers, so the letters are read by sequence
(letters.py: batched direct gets, nothing leased) and each is counted for the source its vouched
headers name (auth/provenance.py). What was read is kept per dead-letter queue (its sequences and
their sources), so a later count reads only what was added since: letters arriving at the end are
read, those gone below the stream's first sequence are dropped, and only a letter removed from the
middle (a retry, a discard, a redrive, a clear) makes the whole queue be read again. A dead-letter
queue holding more than MAX_TALLIED messages is not counted by source (None).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

from ..broker.connection import BrokerConnection
from ..envelope import SOURCE_PROJECT, SOURCE_QUEUE
from ..state.records import QueueRecord
from .letters import READ_BATCH, Letters
from .streams import stream_info

MAX_TALLIED = 50_000  #: messages a dead-letter queue may hold to be counted by source
READ_BYTES = 4 * 1024 * 1024  #: bytes one batched direct get returns at most

Source = tuple[str, str]  #: (project, queue) a letter came from


@dataclass
class _Seen:
    """What was read of one dead-letter queue: each stored sequence's source (None: a message
    that is no letter of the control plane's), up to ``upto``."""

    upto: int = 0
    sources: dict[int, Optional[Source]] = field(default_factory=dict)
    #: each letter's time of dead-lettering (a queue deleted and made again is not counted the old one's)
    times: dict[int, Optional[datetime]] = field(default_factory=dict)


class DeadLetterTally:
    """Letters by source queue, for the service's overview and depth and the dead-letter counts."""

    def __init__(self, conn: BrokerConnection, letters: Letters) -> None:
        self.conn = conn
        self.letters = letters
        self._seen: dict[str, _Seen] = {}  #: by dead-letter queue id
        self._locks: dict[str, asyncio.Lock] = {}

    async def by_source(self, dlq: QueueRecord,
                        since: Optional[Mapping[Source, datetime]] = None) -> Optional[Counter[Source]]:
        """How many letters on ``dlq`` came from each (project, queue) (with ``since``, a source's
        only from its time on: the queue of that name now, made then); None when it holds more
        than MAX_TALLIED messages. Conflict (not ready) if its stream does not answer."""
        lock = self._locks.setdefault(dlq.id, asyncio.Lock())
        async with lock:
            state = (await stream_info(self.conn, dlq)).state
            if state.messages > MAX_TALLIED:
                self._seen.pop(dlq.id, None)
                return None
            seen = self._seen.setdefault(dlq.id, _Seen())
            first = state.first_seq or 0
            for seq in [s for s in seen.sources if s < first]:  # past retention, or purged
                del seen.sources[seq]
                seen.times.pop(seq, None)
            await self._read(dlq, seen, state.last_seq)
            if len(seen.sources) != state.messages:  # some went from the middle: read it all again
                seen.upto, seen.sources, seen.times = 0, {}, {}
                await self._read(dlq, seen, state.last_seq)
            since = since or {}
            return Counter(source for seq, source in seen.sources.items() if source is not None and (
                source not in since or (at := seen.times.get(seq)) is None or at >= since[source]))

    async def count(self, dlq: QueueRecord, source: QueueRecord) -> Optional[int]:
        """How many letters on ``dlq`` came from ``source``; None when not counted by source."""
        key = (source.spec.project, source.spec.name)
        counts = await self.by_source(dlq, {key: source.created_at})
        return None if counts is None else counts[key]

    async def _read(self, dlq: QueueRecord, seen: _Seen, last: int) -> None:
        """Read ``dlq``'s messages stored after ``seen.upto``, up to ``last``, into ``seen``."""
        more = seen.upto < last
        while more:
            batch, more = await self.letters.batch(dlq, seen.upto, limit=READ_BATCH, max_bytes=READ_BYTES)
            if not batch:
                break
            for letter in self.letters.vouched(dlq, batch):
                if letter.sequence > last:
                    more = False
                    break
                h = letter.headers
                seen.sources[letter.sequence] = (h[SOURCE_PROJECT], h[SOURCE_QUEUE]) if (
                    SOURCE_PROJECT in h and SOURCE_QUEUE in h) else None
                seen.times[letter.sequence] = letter.dead_lettered_at
                seen.upto = letter.sequence
            more = more and seen.upto < last

    def forget(self, queue_id: str) -> None:
        """Drop what was read of a queue (it is being deleted)."""
        self._seen.pop(queue_id, None)
        self._locks.pop(queue_id, None)
