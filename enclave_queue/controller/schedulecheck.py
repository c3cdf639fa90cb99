"""Only one-shot delays on a queue's delay subjects: what an app stored there otherwise is removed.

A delayed put is a JetStream message schedule on ``queue.<project>.<name>.delay.<token>``
(``Nats-Schedule: @at <time>``, ``Nats-Schedule-Target``: the queue's subject; envelope.py), and
the queue's user may publish there, so any NATS client can delay its messages. But nats-server
takes other schedules on such a stream as well: repeating ones (``@every 1s``, a cron line), ones
that copy another subject's last message (``Nats-Schedule-Source``) or target a subject of the
stream that is not the queue's. One publish of ``@every 1s`` made a message every second for good,
whether or not its app was still connected, or still had a password; a message stored there
without a schedule was never delivered and counted as delayed for ever.

So after each depth sample (controller/sampler.py), each queue that holds messages it does not
deliver (its ``delayed``) has the delay subjects it has not looked at yet read (a batched direct
get from where it left off: each schedule once) and every message there that is not a one-shot
delay into the queue is deleted, with a warning naming the queue.
"""

from __future__ import annotations

import logging

from ..broker.connection import BrokerConnection, delete_message
from ..broker.direct import direct_batch, direct_get_subject
from ..envelope import PRIORITY_TOKEN, SCHEDULE, SCHEDULE_TARGET, delay_subjects, due_at
from ..names import stream_name
from ..spec import subject_for
from ..state.records import QueueRecord

log = logging.getLogger("enclave.schedules")

READ_BATCH = 256  #: stored schedules read at once
#: headers that make a schedule do more than deliver its own body once
FORBIDDEN = ("Nats-Schedule-Source", "Nats-Schedule-Rollup")


def one_shot_delay(headers: dict[str, str], queue_subject: str) -> bool:
    """Whether a message stored on a delay subject is a delayed put as the SDK and the API make
    them: ``@at`` a time, into the queue's subject or one of its priority lanes, and nothing else."""
    target = headers.get(SCHEDULE_TARGET, "")
    lane = target.removeprefix(f"{queue_subject}.{PRIORITY_TOKEN}.")
    return (due_at(headers) is not None and not any(h in headers for h in FORBIDDEN)
            and (target == queue_subject or (lane != target and lane.isdigit() and len(lane) == 1 and lane != "0")))


class ScheduleCheck:
    """Reads each queue's new delay-subject messages once and removes those that are not one-shot delays."""

    def __init__(self, conn: BrokerConnection) -> None:
        self.conn = conn
        self.removed = 0  #: messages removed since start
        self._checked: dict[str, int] = {}  #: queue id -> the last sequence looked at

    async def check(self, record: QueueRecord) -> int:
        """Look at ``record``'s delay subjects past where the last look ended; how many it removed."""
        stream = stream_name(record.id)
        queue_subject = subject_for(record.spec.project, record.spec.name)
        after = self._checked.get(record.id, 0)
        removed = 0
        while True:
            async with self.conn.account(record.id) as nc:
                batch = await direct_batch(nc, direct_get_subject(stream), {
                    "seq": after + 1, "batch": READ_BATCH, "next_by_subj": delay_subjects(queue_subject)},
                    f"the delayed messages of queue '{record.spec.name}'")
            js = self.conn.queue_js(record.id)
            for stored in batch.messages:
                after = max(after, stored.sequence)
                if not one_shot_delay(stored.headers, queue_subject):
                    removed += await delete_message(js, stream, stored.sequence)
                    log.warning("removed message %d of queue %s from its delay subjects: not a one-shot delay "
                                "into the queue (Nats-Schedule %r)", stored.sequence, record.key,
                                stored.headers.get(SCHEDULE, "none")[:64])
            if not batch.more or not batch.messages:
                break
        self._checked[record.id] = after
        self.removed += removed
        return removed

    def keep_only(self, queue_ids: set[str]) -> None:
        """Forget where the look ended for queues that are gone."""
        self._checked = {queue_id: seq for queue_id, seq in self._checked.items() if queue_id in queue_ids}
