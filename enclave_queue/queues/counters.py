"""Outcome arithmetic: what happened to a queue's messages, from its depth (the broker's
sequences, broker/depth.py) and the counters the control plane stored (state/records.py).

The broker counts what was stored and what left the stream, not why it left; the control plane
counts what it removed itself. A worker's delete is what remains. The desk's ``metrics`` verb
(desk/endpoint.py) and the scrape-time metrics (metrics/collector.py) both derive theirs here.
"""

from __future__ import annotations

from typing import Any

from ..state.records import QueueCounters


def removed_otherwise(counts: QueueCounters, delayed_now: int) -> int:
    """Messages a queue's stream removed that no worker acked: those the control plane removed
    itself (dead-lettered, discarded, expired, cleared, released originals) and the delayed
    messages' schedules that fired (stored and not cleared, less those still waiting)."""
    fired = max(counts.scheduled - delayed_now, 0)
    return counts.dead_lettered + counts.discarded + counts.expired + counts.cleared + counts.released + fired


def outcomes(depth: Any, counts: QueueCounters, unsaved_naks: int = 0) -> dict[str, int]:
    """A queue's outcome counts since it was created, from its depth (a ``Depth``: the broker's
    sequences) and its stored counters.

    - processed: receives that spent an attempt (``received`` less the ones released);
    - succeeded: messages a worker deleted: everything removed from the stream except what the
      control plane removed (dead-lettered, discarded, expired, cleared, released originals) and
      schedules that fired (stored and not cleared, less those still waiting);
    - failed: attempts a worker reported failed (nacked or rejected; a lease that runs out is
      not seen: it shows in ``processed`` only); retried: nacked;
    - expired, dead_lettered (a reject included), discarded.
    """
    nacked = counts.nacked + unsaved_naks
    succeeded = depth.removed - removed_otherwise(counts, depth.delayed)
    return {
        "processed": max(depth.received - counts.released, 0),
        "succeeded": max(succeeded, 0),
        "failed": nacked + counts.rejected,
        "retried": nacked,
        "expired": counts.expired,
        "dead_lettered": counts.dead_lettered,
        "discarded": counts.discarded,
    }
