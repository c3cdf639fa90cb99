"""The dead-letter mover: a message that used up its receives leaves its queue for the queue's
dead-letter queue, exactly once, carrying where it came from and why it failed.

How nats-server 2.15 behaves (DESIGN.md): after ``max_deliver`` receives it stops delivering a
message, keeps it in the stream, and emits a MAX_DELIVERIES advisory — lazily, only while a pull
request is waiting. So there are three ways in:

- **the word** of whoever handed a message back on its last receive (the SDK, the API, the SQS
  endpoint: ``envelope.dead_word`` on the queue's reject subject, with no reply to answer). It
  handed the message back for ``envelope.DEAD_GRACE``, so the move comes first and no advisory is
  written; a lost word leaves the message to its advisory after that;
- **advisories**, imported from every queue account and kept in the ``ENCLAVE_ADVISORIES``
  stream, so none is lost while the mover is down; a durable consumer works through them;
- **the sweep**, every ``sweep_seconds``, for messages whose advisory never came (no pull was
  waiting, ``max_receives`` was lowered): first a *probe*, a pull request for at most 1 byte,
  which makes the server retire exhausted messages (and emit their advisories) while it can
  deliver nothing (measured: it answers 409 and leases nothing; redeliveries are not lost).
  Then, if the consumer has nothing in flight, every message still in the stream at or below
  the last delivered sequence is dead and is moved directly. A queue whose consumers delivered
  and settled nothing since a sweep that left nothing behind cannot have a new dead message: the
  sweep reads every queue's consumers in one system-account request (no connection into the
  account) and probes only the queues that changed.

A move: read the message by sequence; publish it to the DLQ with a ``Nats-Msg-Id`` that is a MAC
of the queue id and the sequence (a repeated move within the DLQ's dedupe window stores nothing
new, and no app can guess the id to pre-empt it) and headers naming the source, the receive
count, the first enqueue time, the last error the app reported and when it was dead-lettered,
signed with an ``Enclave-Provenance`` MAC (auth/provenance.py); then count it (once: a repeated
move counts nothing again); then delete it from the source; then ack the advisory (acked too if
the move failed, say for a full DLQ: this process keeps the move and tries it again). A queue
without a DLQ has the message discarded after its last receive, counted as discarded.

Moves are made a queue's batch at a time (under load most round trips are waits, not work), in
two halves. The queue's record and its DLQ's come from the index's copy of the queue records, kept
by a watch of their bucket (state/queries.py ``QueueIndex``): no read, and a changed DLQ applies
as soon as the broker has pushed the change. The copy: the dead letters of one queue waiting to be
moved are read with one batched direct get, side by side with their notes (one batched read of the
last note of each), and published to the DLQ side by side, a full batch as one atomic batch (one
PubAck, one fsync on the default stack; a batch the broker refuses, say one holding a copy stored
already, goes again one by one; fewer go one by one, which costs the broker less than staging a
batch: broker/connection.py ``publish_many_into``).
The finish: counted with one compare-and-set (on the counters this process last wrote, read only
when another writer changed them; the finishes of one queue that count at the same time share one),
deleted with one delete each, sent together and not erased.
A queue's next batch is copied while the last one finishes; queues are copied side by side,
MOVING_QUEUES at a time, so one slow queue holds up only its own letters; advisories are taken as
they come, up to IN_FLIGHT unsettled. A finish waits until no batch waits for its copy, or
FINISH_DEFER at most (a reject's, REJECT_FINISH_DEFER): in a burst from many queues every copy (what
the DLQs' workers wait for) goes before the counts and deletes, which only a reject's caller and an
advisory's ack wait for (the calm case of bench/deadletters.py: p50 109 -> 79 ms, docs/benchmarks.md).

The last error is the note an app left for the message (state/notes.py; the stream and its
bounds: errornotes.py). ``reject`` asks this process (``enclave.reject`` -> ``deadletter.<id>``)
to move a message at once; concurrent rejects of a queue are batched like advisories.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
from collections.abc import AsyncIterator, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Optional

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from .. import envelope
from ..auth.provenance import Provenance
from ..broker.config import CONTROL_STREAM_BYTES
from ..broker.connection import BrokerConnection, delete_message, ensure_stream, publish_many_into, stored_seq
from ..broker.direct import Stored, direct_batch, direct_get_subject
from ..broker.tasks import stop_tasks
from ..envelope import (
    DEAD_LETTERED_AT,
    FIRST_ENQUEUED,
    LAST_ERROR,
    RECEIVE_COUNT,
    SOURCE_PROJECT,
    SOURCE_QUEUE,
    SOURCE_SEQUENCE,
    broker_status,
    clean_headers,
    one_line,
    parse_time,
)
from ..errors import BrokerUnavailable, Conflict, EnclaveError
from ..names import (
    ADVISORY_STREAM,
    LANES,
    MOVER,
    advisory_subject,
    lane_consumer,
    reject_subject,
    stream_name,
)
from ..recent import Recent
from ..retry import retry_unavailable
from ..spec import MAX_SEQUENCE, subject_for
from ..state.kv import RECENT_EVENTS, Store
from ..state.notes import drop_note, write_note
from ..state.queries import QueueIndex
from ..state.records import QueueCounters, QueueRecord
from .errornotes import last_errors

log = logging.getLogger("enclave.deadletters")
NOTES_WAIT = 3.0  #: seconds a move waits for its messages' last errors before it goes without them

#: the advisories the stream keeps: every queue account sends all its consumer's advisories
#: (broker/config.py), but only a message out of receives needs one kept while this process is down
ADVISORY_SUBJECTS = [advisory_subject("*", "MAX_DELIVERIES")]
KEEP_SECONDS = 14 * 24 * 3600.0  #: advisories live as long as the longest retention
PROBE = json.dumps({"batch": 1, "no_wait": True, "max_bytes": 1}).encode()
#: fault injection for the tests: "exit-after-dlq-publish" kills the process between the copy to
#: the dead-letter queue and the count, "exit-after-dead-letter-count" between the count and the
#: delete from the source, as a crash would
FAULT = os.environ.get("ENCLAVE_FAULT", "")
#: dead letters of one queue moved together; their count tokens must fit in the counters' memory
MOVE_BATCH = min(64, RECENT_EVENTS // 2)
#: moves counted in one compare-and-set at most, however many batches finish together: as many
#: as a batch, so the counters remember them as they remember a batch's. A queue's next count waits
#: until the moves of the last are deleted from the source: so the moves counted and not yet
#: deleted, the ones a crash leaves to be moved (and counted) again, are always among the last the
#: counters remember (RECENT_EVENTS), however many finish at once
COUNTED_TOGETHER = MOVE_BATCH
#: queues whose batches are copied at the same time (two pooled connections each). 32 rather than
#: 128: with 100 queues failing at once, fewer copies side by side cost less CPU a move (4.75 against
#: 5.22 ms in all at 20 msg/s a queue) and the calm case's bursts moved no slower (p50 95–101
#: against 108–114 ms), within a spread of about a fifth from run to run (docs/benchmarks.md)
MOVING_QUEUES = 32
#: advisories taken and not yet acked (each acked once its message is moved): with 100 queues
#: failing at 20 msg/s each, 512 were in flight all the time, and the advisories queued in their
#: stream behind them (their wait there was most of a move's time)
IN_FLIGHT = 2048
#: the advisory consumer's: above IN_FLIGHT, so a restart of this loop never finds the broker
#: holding advisories back for those the last one left unacked (they come again after ack_wait)
MAX_ACK_PENDING = 2 * IN_FLIGHT
FETCH_BATCH = 256  #: advisories asked for by one pull request
PULL_SECONDS = 5.0  #: how long a pull request for advisories stays open
READ_BYTES = 8 * 1024 * 1024  #: at most this much of a batch read in one direct get
READ_SPAN = 4 * MOVE_BATCH  #: at most this many messages read to find a batch's dead letters
SWEEP_PARALLEL = 8  #: queues swept at the same time
#: seconds a copied batch's finish (count, deletes, notes dropped) waits at most for the copies to
#: pause: in a burst the copies, which the DLQs' workers wait for, go first, and the finishes after
#: (the busy case of bench/deadletters.py, in a probe: p50 / p99 299 / 575 and 271 / 498 ms at 0.25 s,
#: 237 / 433 and 260 / 452 at 1 s). A moved message is held from the broker meanwhile: by the SDK
#: for envelope.DEAD_GRACE, or for good once its receives are spent
FINISH_DEFER = 1.0
#: the same for a reject's batch: its caller waits for the answer, and its lease may run out
REJECT_FINISH_DEFER = 0.25
STOP_GRACE = 2.0  #: seconds a stop gives the moves under way to finish
#: the ``type`` of the advisory nats-server writes when a message used up its deliveries
MAX_DELIVER_TYPE = "io.nats.jetstream.advisory.v1.max_deliver"
CONSUMERS = frozenset(lane_consumer(level) for level in (0, *LANES))  #: a queue's consumers' names
QUIET_LOG_SECONDS = 60.0  #: a queue's dropped non-advisories (and its moves that wait) are logged once in this long at most
STUCK_RETRY_SECONDS = 2.0  #: between two tries of the moves from advisories that failed (``Mover._stuck_move``)
STUCK_MAX = 100_000  #: such moves remembered a queue; past it, the sweep finds the rest


class MoveError(EnclaveError):
    """A dead letter could not be moved now (the DLQ refused it, or is missing); it stays put and
    the move is tried again."""


@dataclass(frozen=True)
class Dead:
    """A message to move, with what its way in knows of it."""

    seq: int
    receive_count: Optional[int] = None  #: the advisory's or the consumer's; else the queue's max_receives
    error: Optional[str] = None  #: a reject's reason (else the note the app left)


@dataclass
class _Waiting:
    """A queue's dead letters waiting for their batch, each with the future its caller awaits."""

    record: QueueRecord  #: the newest record a caller brought (a changed DLQ applies to the next batch)
    items: list[tuple[Dead, asyncio.Future[str]]] = field(default_factory=list)


Read = dict[int, Stored]  #: a batch's messages, read already, by sequence
Outcome = str | BaseException  #: 'moved', 'discarded', 'gone', or why the move failed


@dataclass
class _Tally:
    """Moves of one batch waiting for their count (``Mover._counted_once``)."""

    events: list[str]  #: their count tokens, ``move:<seq>``
    counted: asyncio.Future[None]  #: set once they are counted
    ended: asyncio.Future[None]  #: set once the batch is done with them (deleted from the source, or not)


@dataclass
class _Copied:
    """A batch between its two halves: copied to the DLQ (or to be discarded), not yet counted
    nor deleted from its queue."""

    record: QueueRecord
    how: str  #: the way in: 'advisory', 'sweep', 'reject', 'nack'
    letters: list[Stored] = field(default_factory=list)  #: the batch's messages still on the queue
    outcomes: dict[int, Outcome] = field(default_factory=dict)  #: those settled already: gone, or failed
    noted: list[int] = field(default_factory=list)  #: the message ids whose notes to drop once deleted


def _settle_futures(taken: list[tuple[Dead, asyncio.Future[str]]], outcomes: dict[int, Outcome]) -> None:
    for dead, future in taken:
        if future.done():
            continue
        outcome = outcomes[dead.seq]
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


class Mover:
    """The mover, the sweep and the reject service, in the control process."""

    def __init__(self, store: Store, conn: BrokerConnection, index: QueueIndex, sweep_seconds: float,
                 provenance: Provenance) -> None:
        self.store = store
        self.provenance = provenance
        self.conn = conn
        self.index = index  #: finds the queue of an advisory or a reject by its id
        self.recent = Recent()  #: rejects answered lately, answered the same when asked again
        self.sweep_seconds = sweep_seconds
        self.moved = 0
        self.discarded = 0
        self._locks: dict[str, asyncio.Lock] = {}
        #: per (queue id, way in): the dead letters waiting for a batch, and the task moving them
        self._waiting: dict[tuple[str, str], _Waiting] = {}
        self._movers: dict[tuple[str, str], asyncio.Task[None]] = {}
        #: the messages being moved, by queue id and sequence, with the future of each move: a
        #: message that comes another way meanwhile (its advisory and the sweep, after a restart
        #: with a backlog) joins that move rather than being copied, and counted, a second time
        self._moving: dict[str, dict[int, asyncio.Future[str]]] = {}
        self._slots = asyncio.Semaphore(MOVING_QUEUES)
        self._taken = 0  #: advisories fetched and not yet acked or nakked
        self._room = asyncio.Event()
        #: per queue id, its consumers' activity when a sweep last left it with nothing dead or in
        #: flight: while it reads the same, the queue cannot have a new dead message
        self._quiet: dict[str, tuple[Any, ...]] = {}
        #: per queue key, its counters as this process last wrote them, and their revision (a stale
        #: one costs a refused compare-and-set and a read, as before)
        self._counters: dict[str, tuple[QueueCounters, int]] = {}
        #: per (queue key, counter): the moves waiting to be counted, each batch's with the future its
        #: finish awaits (one compare-and-set at a time)
        #: (a key is there while its tally task runs)
        self._tallies: dict[tuple[str, str], list[_Tally]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._running: set[asyncio.Task[Any]] = set()
        #: per queue id, the dead letters its apps told of (``Session.tell_dead``) waiting for its record
        self._told: dict[str, list[Dead]] = {}
        self._lull = asyncio.Event()  #: set while no batch waits for its copy (self._movers is empty)
        self._lull.set()
        self._sub: Any = None
        self._advisory_sub: Any = None
        #: per queue id: non-advisories dropped since the last log line about them, and its time
        self._forged: dict[str, tuple[int, float]] = {}
        #: per queue id: the moves from advisories that failed, by sequence, tried again (``_stuck_move``)
        self._stuck: dict[str, dict[int, Dead]] = {}
        self._stuck_logged: dict[str, float] = {}  #: per queue id: when its waiting moves were last logged

    # -- start and stop -------------------------------------------------------------------------

    async def start(self) -> None:
        await self._ensure_advisories()
        self._sub = await self.conn.control.subscribe(reject_subject("*"), queue="movers", cb=self._on_reject)
        self._tasks = [
            asyncio.create_task(self._advisories(), name="deadletters-advisories"),
            asyncio.create_task(self._sweeps(), name="deadletters-sweep"),
            asyncio.create_task(self._retry_stuck(), name="deadletters-stuck"),
        ]

    async def _ensure_advisories(self) -> None:
        """The advisories' stream and the mover's consumer on it: made at start, and made again
        when a pull finds them gone (deleted behind the control plane's back)."""
        js = self.conn.js
        await ensure_stream(js, api.StreamConfig(
            name=ADVISORY_STREAM, subjects=ADVISORY_SUBJECTS, retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_age=KEEP_SECONDS, max_bytes=CONTROL_STREAM_BYTES[ADVISORY_STREAM],
            discard=api.DiscardPolicy.OLD, num_replicas=1,
        ))
        # created, or updated (one an earlier version made had max_ack_pending 1000)
        await retry_unavailable(lambda: js.add_consumer(ADVISORY_STREAM, api.ConsumerConfig(
            durable_name=MOVER, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30.0, max_deliver=-1,
            max_ack_pending=MAX_ACK_PENDING,
        )))

    async def stop(self) -> None:
        """Nothing new is taken; the moves under way have STOP_GRACE to finish (their finishes go at
        once), and what is left then is cancelled: it stays on its queue, moved after the restart."""
        for sub in (self._sub, self._advisory_sub):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        await stop_tasks(self._tasks)
        self._lull.set()
        until = asyncio.get_running_loop().time() + STOP_GRACE
        # a copy that ends spawns its finish: under way until neither is left
        while (under_way := {*self._running, *self._movers.values()}) and (
                left := until - asyncio.get_running_loop().time()) > 0:
            await asyncio.wait(under_way, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        await stop_tasks([*self._running, *self._movers.values()])
        for waiting in self._waiting.values():
            for _, future in waiting.items:
                future.cancel()

    def forget(self, queue_id: str) -> None:
        """A queue was deleted: nothing of it is moved any more."""
        self._locks.pop(queue_id, None)
        self._quiet.pop(queue_id, None)
        self._forged.pop(queue_id, None)
        self._stuck.pop(queue_id, None)
        self._stuck_logged.pop(queue_id, None)

    def _spawn(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    # -- moving ---------------------------------------------------------------------------------

    async def move(self, record: QueueRecord, seq: int, receive_count: Optional[int] = None,
                   error: Optional[str] = None) -> str:
        """Move message ``seq`` of ``record``'s queue to its DLQ (or discard it if it has none),
        in a batch with the queue's other rejects. Returns 'moved', 'discarded' or 'gone' (no such
        message any more); MoveError (or the broker's error) if it stays put. Safe to repeat."""
        return await self._submit(record, Dead(seq, receive_count, error), "reject")

    def _submit(self, record: QueueRecord, dead: Dead, how: str) -> asyncio.Future[str]:
        """Queue ``dead`` for the next batch of its queue (``how`` it came: 'advisory', 'reject', 'nack');
        the future of its outcome (the move under way's, if the message is being moved already)."""
        moving = self._moving.setdefault(record.id, {})
        if (under_way := moving.get(dead.seq)) is not None:
            return asyncio.shield(under_way)  # a joiner cancelled leaves the move to its first caller
        key = (record.id, how)
        waiting = self._waiting.get(key)
        if waiting is None:
            waiting = self._waiting[key] = _Waiting(record)
        waiting.record = record
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        moving[dead.seq] = future
        future.add_done_callback(functools.partial(self._moved, record.id, dead.seq))
        waiting.items.append((dead, future))
        if key not in self._movers:
            self._lull.clear()
            self._movers[key] = asyncio.create_task(self._move_waiting(key), name=f"deadletters-{how}:{record.id}")
        return future

    def _moved(self, queue_id: str, seq: int, future: asyncio.Future[str]) -> None:
        """A move has an outcome: the message may be moved again (a failed move's advisory comes again)."""
        if not future.cancelled():
            future.exception()  # its callers hear of a failure; one nobody awaits is no news
        moving = self._moving.get(queue_id)
        if moving is not None and moving.get(seq) is future:
            del moving[seq]
            if not moving:
                del self._moving[queue_id]

    async def _move_waiting(self, key: tuple[str, str]) -> None:
        """Move a queue's waiting dead letters, a batch at a time, until none wait. A batch is
        taken once a slot is free, so what arrived meanwhile goes with it. Only the copy to the
        DLQ holds the slot and the queue's turn: the next batch is copied while the last one's
        count and deletes are on their way (its callers hear once it is finished)."""
        try:
            while (waiting := self._waiting.get(key)) is not None and waiting.items:
                async with self._slots:
                    taken, waiting.items = waiting.items[:MOVE_BATCH], waiting.items[MOVE_BATCH:]
                    try:
                        copied = await self._copy_batch(waiting.record, [dead for dead, _ in taken], key[1])
                    except Exception as exc:  # the batch as a whole (the broker did not answer, say)
                        _settle_futures(taken, {dead.seq: exc for dead, _ in taken})
                        continue
                self._spawn(self._finish_and_tell(copied, taken), f"deadletters-finish:{key[0]}")
        finally:  # no await from the last look at the items to here: nothing can be left behind
            self._movers.pop(key, None)
            if (waiting := self._waiting.get(key)) is not None and not waiting.items:
                del self._waiting[key]
            if not self._movers:
                self._lull.set()

    async def _finish_and_tell(self, copied: _Copied, taken: list[tuple[Dead, asyncio.Future[str]]]) -> None:
        defer = REJECT_FINISH_DEFER if copied.how == "reject" else FINISH_DEFER
        with contextlib.suppress(TimeoutError):  # after the copies waiting now, or that long at most
            await asyncio.wait_for(self._lull.wait(), defer)
        try:
            outcomes = await self._finish(copied)
        except Exception as exc:
            outcomes = {d.seq: exc for d, _ in taken}
        _settle_futures(taken, outcomes)

    async def move_batch(self, record: QueueRecord, dead: list[Dead], how: str,
                         read: Optional[Read] = None) -> dict[int, Outcome]:
        """Move messages of ``record``'s queue to its DLQ (or discard them if it has none), as one
        batch; ``read``: the messages, read already. The outcome of each sequence. Safe to repeat;
        a message being moved already (its advisory came) joins that move."""
        moving = self._moving.setdefault(record.id, {})
        joined = {d.seq: asyncio.shield(moving[d.seq]) for d in dead if d.seq in moving}
        loop = asyncio.get_running_loop()
        taken: list[tuple[Dead, asyncio.Future[str]]] = []
        for d in dead:
            if d.seq not in joined:
                future = moving[d.seq] = loop.create_future()
                future.add_done_callback(functools.partial(self._moved, record.id, d.seq))
                taken.append((d, future))
        outcomes: dict[int, Outcome] = {}
        try:
            if taken:
                mine = [d for d, _ in taken]
                given = {d.seq: read[d.seq] for d in mine if d.seq in read} if read is not None else None
                outcomes = await self._finish(await self._copy_batch(record, mine, how, given))
        except Exception as exc:
            _settle_futures(taken, {d.seq: exc for d, _ in taken})
            raise
        except BaseException:  # cancelled (a stop): they stay put
            for _, future in taken:
                future.cancel()
            raise
        _settle_futures(taken, outcomes)
        if joined:
            results = await asyncio.gather(*joined.values(), return_exceptions=True)
            outcomes.update(zip(joined, results, strict=True))
        return outcomes

    async def _copy_batch(self, record: QueueRecord, dead: list[Dead], how: str,
                          read: Optional[Read] = None) -> _Copied:
        """The first half of a move: the messages read (unless ``read``) and copied to the DLQ, in
        the queue's turn (one copy of a queue at a time)."""
        lock = self._locks.setdefault(record.id, asyncio.Lock())
        by_seq = {d.seq: d for d in dead}
        async with lock, self.conn.account(record.id) as nc:
            copied = _Copied(record, how)
            spec = record.spec
            if spec.dead_letter_queue:
                # the messages, the DLQ and the notes read side by side: a message's note is kept
                # under its id, which is its sequence unless it is a copy (read again below)
                found, dlq, notes = await asyncio.gather(
                    _read(nc, stream_name(record.id), sorted(by_seq)) if read is None else _given(read),
                    self.index.dead_letter_queue_of(record),
                    self._notes(record, by_seq))
            else:
                found = read if read is not None else await _read(nc, stream_name(record.id), sorted(by_seq))
                dlq, notes = None, {}
            copied.outcomes = {seq: "gone" for seq in by_seq if seq not in found}
            letters = copied.letters = [found[seq] for seq in sorted(found)]
            if not letters:
                return copied
            ids = {letter.sequence: envelope.message_id(letter.headers, letter.sequence) for letter in letters}
            if not spec.dead_letter_queue:
                copied.noted = list(ids.values())  # dropped unread
                return copied
            if copies := [i for seq, i in ids.items() if i != seq]:
                notes.update(await self._notes(record, copies))
            failed = await self._copy(record, dlq, letters, by_seq, ids, notes)
            if FAULT == "exit-after-dlq-publish":
                os._exit(70)
            copied.outcomes.update(failed)
            copied.noted = [i for seq, i in ids.items() if i in notes and seq not in failed]
        return copied

    async def _notes(self, record: QueueRecord, message_ids: Iterable[int]) -> dict[int, str]:
        """The last errors of these messages, if the errors stream answers: one that does not (one
        app flooding it with notes stalled it for a minute) does not hold up the move, whose letters
        then carry no last error; their notes are left where they are."""
        try:
            return await asyncio.wait_for(last_errors(self.conn.control, record.id, message_ids), NOTES_WAIT)
        except (BrokerUnavailable, TimeoutError) as exc:
            log.warning("dead letters of queue %s moved without their last errors: %s", record.key, exc)
            return {}

    async def _finish(self, copied: _Copied) -> dict[int, Outcome]:
        """The second half of a move: count what was copied (or is discarded), delete it from the
        source and drop its notes. The outcome of each sequence of the batch."""
        record = copied.record
        outcome = "moved" if record.spec.dead_letter_queue else "discarded"
        done = [letter.sequence for letter in copied.letters if letter.sequence not in copied.outcomes]
        if not done:
            return copied.outcomes
        # counted before the delete, once: a move cut short after the count and repeated finds the
        # messages still there and counts nothing again; one cut short before it counts them then
        async with self._counted_once(record.key, "dead_lettered" if outcome == "moved" else "discarded", done):
            if FAULT == "exit-after-dead-letter-count":
                os._exit(70)
            # one delete each, sent together: a purge below the last would be one write, but nats-server
            # 2.15 then drops every nak'd message below the consumer's next sequence from its redelivery
            # queue (consumer.purge), and those wait out their visibility timeout (measured: 30 s)
            async with self.conn.account(record.id) as nc:
                js = nc.jetstream(timeout=5)
                await asyncio.gather(*(delete_message(js, stream_name(record.id), seq) for seq in done))
        # the notes have served; without a DLQ, unread
        await asyncio.gather(*(drop_note(self.conn.js, record.id, noted_as) for noted_as in copied.noted))
        if outcome == "moved":
            self.moved += len(done)
        else:
            self.discarded += len(done)
        log.info("messages %s of queue %s %s (%s)", ",".join(map(str, done)), record.key,
                 f"moved to {record.spec.dead_letter_queue}" if outcome == "moved"
                 else "discarded (no dead-letter queue)", copied.how)
        return {**copied.outcomes, **dict.fromkeys(done, outcome)}

    async def _copy(self, record: QueueRecord, dlq: Optional[QueueRecord], letters: list[Stored],
                    dead: dict[int, Dead], ids: dict[int, int], notes: dict[int, str]) -> dict[int, BaseException]:
        """Publish ``letters`` to the queue's DLQ (``publish_many_into``: one atomic batch, or one by
        one if the broker refuses it). Returns why each that was not stored failed."""
        spec = record.spec
        if dlq is None:
            error = MoveError(f"Dead-letter queue '{spec.dead_letter_queue}' of queue '{spec.name}' does not exist.")
            return dict.fromkeys((letter.sequence for letter in letters), error)
        now = datetime.now(UTC).isoformat()
        messages = []
        for letter in letters:
            seq, given = letter.sequence, dead[letter.sequence]
            reason = given.error if given.error is not None else notes.get(ids[seq])
            headers = {
                **clean_headers(letter.headers),
                "Nats-Msg-Id": self.provenance.move_id(record.id, seq),
                SOURCE_QUEUE: spec.name,
                SOURCE_PROJECT: spec.project,
                SOURCE_SEQUENCE: str(seq),
                RECEIVE_COUNT: str((given.receive_count if given.receive_count is not None else spec.max_receives)
                                   + envelope.prior_attempts(letter.headers)),
                FIRST_ENQUEUED: letter.headers.get(envelope.ENQUEUED_AT) or _stored_time(letter),
                DEAD_LETTERED_AT: now,
            }
            if reason:
                headers[LAST_ERROR] = one_line(reason)
            messages.append((letter.data, self.provenance.sign(dlq.id, headers, letter.data)))
        answers = await publish_many_into(self.conn, dlq.id, subject_for(dlq.spec.project, dlq.spec.name), messages)
        failed: dict[int, BaseException] = {}
        for letter, answer in zip(letters, answers, strict=True):
            try:
                if isinstance(answer, BaseException):
                    raise answer
                stored_seq(answer, dlq.spec)
            except Exception as exc:  # QueueFull, a timeout: this one stays put and is tried again
                failed[letter.sequence] = exc
        return failed

    @contextlib.asynccontextmanager
    async def _counted_once(self, key: str, counter: str, seqs: list[int]) -> AsyncIterator[None]:
        """``Store.count(key, counter, once="move:<seq>")`` for many moves, then the block (their
        deletes): the moves counted already (a batch repeated after a crash) are not counted
        again. The batches of a queue that count at the same time (their finishes wait for the
        same lull) are counted together: the first alone, and those that came while it was
        written in the next compare-and-set (COUNTED_TOGETHER moves at most), rather than each
        refused for the one before and read again; that next one waits until the blocks of the
        last have ended."""
        tally = (key, counter)
        loop = asyncio.get_running_loop()
        entry = _Tally([f"move:{seq}" for seq in seqs], loop.create_future(), loop.create_future())
        if (waiting := self._tallies.get(tally)) is None:
            waiting = self._tallies[tally] = []
            self._spawn(self._tally(key, counter), f"deadletters-count:{key}")
        waiting.append(entry)
        try:
            await entry.counted
            yield
        finally:
            if not entry.ended.done():
                entry.ended.set_result(None)

    async def _tally(self, key: str, counter: str) -> None:
        """Count what waits for ``key``'s ``counter``, a compare-and-set at a time, until nothing waits."""
        tally = (key, counter)
        going: list[_Tally] = []
        try:
            while waiting := self._tallies.get(tally):
                taken, events = 0, []
                while taken < len(waiting) and (not events or len(events) + len(waiting[taken].events) <= COUNTED_TOGETHER):
                    events += waiting[taken].events
                    taken += 1
                going, self._tallies[tally] = waiting[:taken], waiting[taken:]
                try:
                    await self._count_events(key, counter, events)
                except Exception as exc:
                    for entry in going:
                        if not entry.counted.done():
                            entry.counted.set_exception(exc)
                else:
                    for entry in going:
                        if not entry.counted.done():
                            entry.counted.set_result(None)
                    await asyncio.gather(*(entry.ended for entry in going))  # their deletes, before the next count
        finally:  # no await from the last look at the waiting to here: nothing is left behind
            for entry in [*going, *self._tallies.pop(tally, [])]:  # cancelled (a stop): those moves stay put
                if not entry.counted.done():
                    entry.counted.cancel()

    async def _count_events(self, key: str, counter: str, tokens: list[str]) -> None:
        """Count ``tokens`` (``move:<seq>``) not counted already, in one compare-and-set. The
        counters this process last wrote are tried first (no read), and read only if another
        writer (a count of the desk, another node) changed them since."""
        found = self._counters.get(key)
        while True:
            if found is None:
                found = await self.store.counters.get(key)
            current = found[0] if found else QueueCounters()
            events = [event for event in dict.fromkeys(tokens) if event not in current.recent]
            if not events:
                return
            changed = current.model_copy(update={counter: getattr(current, counter) + len(events),
                                                  "recent": (*current.recent, *events)[-RECENT_EVENTS:]})
            try:
                if found is None:
                    revision = await self.store.counters.create(key, changed)
                else:
                    revision = await self.store.counters.update(key, changed, found[1])
            except Conflict:  # changed by another writer since: read it
                self._counters.pop(key, None)
                found = None
                continue
            self._counters[key] = (changed, revision)
            return

    # -- the three ways in ----------------------------------------------------------------------

    async def _advisories(self) -> None:
        """Take the MAX_DELIVERIES advisories as they come, up to IN_FLIGHT unsettled, and hand
        what arrived together to their queues' batches: a slow queue holds up no other. (nats-py's
        ``fetch`` waits for a whole batch or its timeout once the first advisory is in, seconds of
        head-of-line wait under a trickle; this keeps one pull request open and takes each arrival.)"""
        while True:
            try:
                await self._pull_advisories()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker restarting, say: start over
                log.warning("advisory consumer interrupted (%s); restarting it", exc)
                await asyncio.sleep(1)

    async def _pull_advisories(self) -> None:
        nc = self.conn.control
        arrived: list[Msg] = []
        ended: list[str] = []  #: the status that ended the open pull request (408: expired)
        woken = asyncio.Event()

        async def on_message(msg: Msg) -> None:
            status = broker_status(msg)
            if status is None:
                arrived.append(msg)
            elif status != "100":  # 408: expired; 409: refused (the consumer is gone, a limit); 503: no consumer
                ended.append(status)
            woken.set()

        inbox = nc.new_inbox()
        sub = self._advisory_sub = await nc.subscribe(inbox, cb=on_message)
        loop = asyncio.get_running_loop()
        try:
            while True:
                while self._taken >= IN_FLIGHT:
                    self._room.clear()
                    await self._room.wait()
                asked = min(FETCH_BATCH, IN_FLIGHT - self._taken)
                ended.clear()
                await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{ADVISORY_STREAM}.{MOVER}",
                                 json.dumps({"batch": asked, "expires": int(PULL_SECONDS * 1e9)}).encode(), reply=inbox)
                until = loop.time() + PULL_SECONDS + 1  # the broker's end of the request, or a lost one's
                while True:
                    batch, arrived[:] = list(arrived), []
                    asked -= len(batch)
                    self._take(batch)
                    if asked <= 0 or ended or loop.time() >= until:
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), until - loop.time())
                    woken.clear()
                if ended and ended[0] != "408":  # refused, or nobody answers: made again if gone, then asked again
                    if ended[0] in ("409", "503"):
                        await self._repair_advisories(ended[0])
                    await asyncio.sleep(1)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _repair_advisories(self, status: str) -> None:
        """The pull was refused or found nobody: if the stream or the consumer is gone, make it."""
        try:
            await self.conn.js.consumer_info(ADVISORY_STREAM, MOVER)
            return
        except nats.js.errors.NotFoundError:
            log.warning("the dead-letter advisories' stream or its consumer is gone (pull ended %s); making "
                        "them again", status)
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError):
            return  # the broker is restarting, say: asked again in a moment
        await self._ensure_advisories()

    def _take(self, advisories: list[Msg]) -> None:
        """Hand advisories that arrived together to their queues, one task a queue."""
        self._taken += len(advisories)
        by_queue: dict[str, list[Msg]] = {}
        for advisory in advisories:
            by_queue.setdefault(advisory.subject.split(".")[1], []).append(advisory)
        for queue_id, mine in by_queue.items():
            self._spawn(self._queue_advisories(queue_id, mine), f"deadletters-advisories:{queue_id}")

    async def _queue_advisories(self, queue_id: str, advisories: list[Msg]) -> None:
        """One queue's advisories of a fetch: its record read once, each advisory acked once its
        message is moved (or gone), or its move failed (this process tries it again: ``_stuck_move``)."""
        try:
            record: Optional[QueueRecord] = await self.index.record_of(queue_id, cached=True)
        except Exception as exc:
            record, failure = None, exc
        else:
            failure = None
        await asyncio.gather(*(self._advisory(record, advisory, failure) for advisory in advisories))

    async def _advisory(self, record: Optional[QueueRecord], advisory: Msg, failure: Optional[Exception]) -> None:
        dead: Optional[Dead] = None
        try:
            if failure is not None:
                raise failure
            kind = advisory.subject.split(".")[2]
            if kind.lower() == "max_deliveries" and record is not None and not record.deleting:
                # earlier versions stored adv.<id>.max_deliveries
                dead = advised(record.id, advisory.data)
                if dead is None:
                    self._not_advisory(record)
                else:
                    await self._submit(record, dead, "advisory")
            await advisory.ack()
        except Exception as exc:
            if record is not None and dead is not None:  # the move failed: this process tries it again
                self._stuck_move(record, dead, exc)
                with contextlib.suppress(nats.errors.Error):
                    await advisory.ack()
            else:  # its queue not read: the advisory comes again
                log.warning("dead letter from advisory %s not moved yet: %s", advisory.subject, exc)
                with contextlib.suppress(nats.errors.Error):
                    await advisory.nak(delay=2)
        finally:
            self._taken -= 1
            self._room.set()

    def _stuck_move(self, record: QueueRecord, dead: Dead, exc: BaseException) -> None:
        """A move from an advisory that failed (its DLQ full, missing, or not answering): kept here
        and tried again every STUCK_RETRY_SECONDS (``_retry_stuck``), its advisory acked. Nakked to
        come again instead, every one held a place of the advisory consumer's MAX_ACK_PENDING: one
        queue with thousands of messages waiting for room on its DLQ stopped the advisories of every
        other queue, and each logged a warning every 2 s. Lost with this process: then the sweep
        finds them (once their queue has nothing in flight)."""
        stuck = self._stuck.setdefault(record.id, {})
        if len(stuck) < STUCK_MAX:
            stuck[dead.seq] = dead
        self._stuck_said(record, len(stuck), exc)

    def _stuck_said(self, record: QueueRecord, count: int, exc: BaseException) -> None:
        """Log a queue's moves that wait, at the first and then once a minute at most."""
        now = asyncio.get_running_loop().time()
        if now - self._stuck_logged.get(record.id, -QUIET_LOG_SECONDS) >= QUIET_LOG_SECONDS:
            self._stuck_logged[record.id] = now
            log.warning("queue %s: %d dead letter(s) not moved yet, tried again every %g s: %s", record.key, count,
                        STUCK_RETRY_SECONDS, exc)

    async def _retry_stuck(self) -> None:
        """Try the moves that failed again (``_stuck_move``), a batch of a queue at a time while they
        go through."""
        while True:
            await asyncio.sleep(STUCK_RETRY_SECONDS)
            for queue_id in list(self._stuck):
                try:
                    await self._retry_queue(queue_id)
                except Exception as exc:  # its record not read: next time
                    log.debug("stuck dead letters of %s not tried: %s", queue_id, exc)

    async def _retry_queue(self, queue_id: str) -> None:
        record = await self.index.record_of(queue_id, cached=True)
        if record is None or record.deleting:
            self._stuck.pop(queue_id, None)
            return
        while stuck := self._stuck.get(queue_id):
            batch = list(stuck.values())[:MOVE_BATCH]
            outcomes = await asyncio.gather(*(self._submit(record, dead, "advisory") for dead in batch),
                                            return_exceptions=True)
            for dead, outcome in zip(batch, outcomes, strict=True):
                if not isinstance(outcome, BaseException):
                    stuck.pop(dead.seq, None)
            if not stuck:
                self._stuck.pop(queue_id, None)
            failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
            if failed:  # no room yet: the next round
                self._stuck_said(record, len(stuck), failed[0])
                return

    def _not_advisory(self, record: QueueRecord) -> None:
        """Drop (ack) what came as an advisory and is not one the broker wrote (``advised``),
        logged at the first of a queue and then once a minute at most, with how many."""
        count, last = self._forged.get(record.id, (0, -QUIET_LOG_SECONDS))
        now = asyncio.get_running_loop().time()
        if now - last < QUIET_LOG_SECONDS:
            self._forged[record.id] = (count + 1, last)
            return
        self._forged[record.id] = (0, now)
        log.warning("queue %s: %d message(s) on its advisory subject that the broker did not write as "
                    "a MAX_DELIVERIES advisory dropped (its app can have the broker answer its own "
                    "requests there)", record.key, count + 1)

    async def _sweeps(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_seconds)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("dead-letter sweep failed: %s", exc)

    async def sweep(self) -> int:
        """Move every dead message whose advisory never came; returns how many were moved."""
        records = [record for _, record, _ in await self.store.queues.items()
                   if not record.deleting and record.spec.max_receives]
        for queue_id in self._quiet.keys() - {record.id for record in records}:
            del self._quiet[queue_id]
        gate = asyncio.Semaphore(SWEEP_PARALLEL)

        async def one(record: QueueRecord) -> int:
            async with gate:
                try:
                    return await self.sweep_queue(record)
                except (nats.errors.Error, EnclaveError) as exc:
                    log.info("sweep of %s skipped: %s", record.key, exc)
                    return 0

        return sum(await asyncio.gather(*(one(record) for record in records)))

    async def sweep_queue(self, record: QueueRecord) -> int:
        """The sweep of one queue, all its lanes; how many it moved. Nothing is asked of the
        queue's account while its consumers read as they did when a sweep last left it clean."""
        seen = await self._activity(record)
        if seen is not None and self._quiet.get(record.id) == seen:
            return 0
        count, clean = 0, True
        for level in (0, *(LANES if record.spec.priorities else ())):
            moved, lane_clean = await self._sweep_lane(record, level)
            count, clean = count + moved, clean and lane_clean
        if not clean:
            self._quiet.pop(record.id, None)
        elif (now := seen if not count else await self._activity(record)) is not None:
            self._quiet[record.id] = now
        return count

    async def _activity(self, record: QueueRecord) -> Optional[tuple[Any, ...]]:
        """What the queue's consumers have delivered and settled, from one system-account request
        (no connection into the queue's account); any delivery, settle or new limit changes it.
        None if the broker does not say."""
        try:
            body = await self.conn.account_jsz(record.id)
        except EnclaveError:
            return None
        for stream in body.get("stream_detail") or []:
            if stream.get("name") == stream_name(record.id):
                consumers = sorted(
                    (str(c.get("name")), (c.get("delivered") or {}).get("consumer_seq"),
                     (c.get("ack_floor") or {}).get("consumer_seq"), c.get("num_ack_pending"),
                     (c.get("config") or {}).get("max_deliver"))
                    for c in stream.get("consumer_detail") or [])
                return record.spec, tuple(consumers)
        return None

    async def _sweep_lane(self, record: QueueRecord, level: int) -> tuple[int, bool]:
        """The sweep of one consumer: the queue's own (level 0) or a priority lane's. How many it
        moved, and whether it left nothing dead or in flight behind."""
        js = self.conn.queue_js(record.id)
        stream = stream_name(record.id)
        consumer = lane_consumer(level)
        # the probe: the server retires exhausted messages and emits their advisories
        async with self.conn.account(record.id) as nc:
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", PROBE, reply="_INBOX.enclave-probe")
        info = await retry_unavailable(lambda: js.consumer_info(stream, consumer))
        if info.num_ack_pending:
            return 0, False  # something is in flight: only advisories can tell the dead apart
        last = info.delivered.stream_seq
        subject = envelope.lane_subject(subject_for(record.spec.project, record.spec.name), level)
        after, count = 0, 0
        while after < last:
            # every message of the lane from its first: all at or below ``last`` are dead
            async with self.conn.account(record.id) as nc:
                found = await direct_batch(nc, direct_get_subject(stream), {
                    "seq": after + 1, "batch": MOVE_BATCH, "next_by_subj": subject, "max_bytes": READ_BYTES,
                }, f"the dead letters of queue '{record.spec.name}'")
            letters = {m.sequence: m for m in found.messages if m.sequence <= last}
            if not letters:
                break
            dead = [Dead(seq, info.config.max_deliver) for seq in letters]
            outcomes = await self.move_batch(record, dead, "sweep", letters)
            count += sum(outcome in ("moved", "discarded") for outcome in outcomes.values())
            if any(isinstance(outcome, BaseException) for outcome in outcomes.values()):
                return count, False  # left in place: the next sweep tries again
            if not found.more or len(letters) < len(found.messages):
                break
            after = max(letters)
        return count, True

    async def _on_reject(self, request: Msg) -> None:
        if request.reply:
            self._spawn(self._reject(request), "deadletters-reject")
        else:  # nobody waits for an answer: an app telling of a message handed back on its last receive
            self._tell(request)

    def _tell(self, told: Msg) -> None:
        """A dead letter an app told of: its queue's record is read once for all told meanwhile,
        then they go to the queue's batch. Nothing is answered; what is not moved now (a body that
        does not parse, the queue gone, the DLQ refusing it) is left to the advisory and the sweep."""
        queue_id = told.subject.split(".")[1]
        try:
            body = envelope.parse_json(told.data)
            dead = Dead(_counted(body, "seq"), _counted(body, "receive_count"))
            subject = str(body.get("subject", ""))
        except (ValueError, TypeError, KeyError, AttributeError):
            log.debug("a dead letter told by queue %s was not understood; left to the advisory", queue_id)
            return
        if queue_id in self._told:
            if len(self._told[queue_id]) < IN_FLIGHT:  # past that, a flood: the advisories still come
                self._told[queue_id].append(dead)
            return
        self._told[queue_id] = [dead]
        self._spawn(self._move_told(queue_id, ".".join(subject.split(".")[1:3]) or None),
                    f"deadletters-told:{queue_id}")

    async def _move_told(self, queue_id: str, key: Optional[str]) -> None:
        try:
            record = await self.index.record_of(queue_id, key, cached=True)
        except Exception as exc:
            record = None
            log.info("dead letters told by queue %s not moved yet (the advisory will come): %s", queue_id, exc)
        told = self._told.pop(queue_id)
        if record is None or record.deleting:
            return
        # a word about a receive the queue's limit does not make the last (it was raised since the
        # app read it, or the word is wrong) moves nothing: the broker delivers the message again
        limit = record.spec.max_receives or 0
        told = [dead for dead in told if 0 < limit <= (dead.receive_count or 0)]
        outcomes = await asyncio.gather(*(self._submit(record, dead, "nack") for dead in told), return_exceptions=True)
        for dead, outcome in zip(told, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.info("dead letter %d of queue %s not moved yet (the advisory will come): %s",
                         dead.seq, record.key, outcome)

    async def _reject(self, request: Msg) -> None:
        queue_id = request.subject.split(".")[1]
        try:
            body = envelope.parse_json(request.data)
            if not isinstance(body, dict):
                raise EnclaveError("The request must be a JSON object.")
            subject = str(body.get("subject", ""))  # queue.<project>.<name>: a hint, checked against the id
            record = await self.index.record_of(queue_id, ".".join(subject.split(".")[1:3]) or None)
            if record is None or record.deleting:
                raise EnclaveError("The queue does not exist any more.")
            seq, error = _counted(body, "seq"), body.get("error") or None
            if error is not None and not isinstance(error, str):
                raise EnclaveError(f"error must be text (got {type(error).__name__}).")
            noted_as = _counted(body, "id", needed=False) or seq
            receive_count = _counted(body, "receive_count", needed=False)

            async def reject() -> str:
                if error:  # kept as the message's note, should this move fail and a later one happen
                    await write_note(self.conn.js, record.id, noted_as, error)
                outcome = await self.move(record, seq, receive_count, error)
                if outcome != "gone":
                    await self.store.count(record.key, "rejected")
                return outcome

            # asked again after a reconnect: the same answer, not "gone" for the message it moved
            reply: dict[str, Any] = {"result": await self.recent.once((record.id, seq, receive_count), reject)}
        except Exception as exc:  # answered to the app, which raises it
            reply = {"error": str(exc) or type(exc).__name__}
        with contextlib.suppress(nats.errors.Error):
            await request.respond(json.dumps(reply).encode())


#: the most each field of a word may be: a stream sequence is a signed 64-bit number (10**30
#: reached the broker as a malformed request), and a receive count past a million is no real one
#: (it is signed into the dead letter as its receive count)
MOST = {"seq": MAX_SEQUENCE, "id": MAX_SEQUENCE, "receive_count": envelope.MAX_PRIOR_ATTEMPTS}


def advised(queue_id: str, data: bytes) -> Optional[Dead]:
    """The dead letter a MAX_DELIVERIES advisory of queue ``queue_id``'s names, or None if
    ``data`` is not one the broker wrote. A queue's app cannot publish on its advisory subject, but
    it can name that subject as the reply of a request of its own (a reply is not a publish: no
    permission covers it), so the broker's answer (a PubAck, a status, a stored message) lands there
    too; such a message was once nakked to come again, for ever, and enough of them held every
    queue's advisories back (MAX_ACK_PENDING). One the app wrote itself, delivered there by a pull
    of its own, can only name a message of its own queue, which it may reject anyway."""
    try:
        body = json.loads(data)
    except ValueError:  # UnicodeDecodeError too
        return None
    if not isinstance(body, dict) or body.get("type") != MAX_DELIVER_TYPE:
        return None
    seq, deliveries = body.get("stream_seq"), body.get("deliveries")
    if (body.get("stream") != stream_name(queue_id) or body.get("consumer") not in CONSUMERS
            or type(seq) is not int or not 1 <= seq <= MAX_SEQUENCE):
        return None
    return Dead(seq, deliveries if type(deliveries) is int and deliveries > 0 else None)


def _counted(body: Any, field: str, *, needed: bool = True) -> Optional[int]:
    """A positive whole number an app sent in a word or a reject (``envelope.whole_number``: not
    ``int()``, which would cut 2.5 to message 2), at most MOST[field]; ValueError naming the field
    and its range otherwise."""
    value = body.get(field) if isinstance(body, dict) else None
    if value is None and not needed:
        return None
    number = envelope.whole_number(value)
    most = MOST.get(field, MAX_SEQUENCE)
    if number is None or not 1 <= number <= most:
        raise ValueError(f"{field} must be a whole number from 1 to {most} (got {str(value)[:40]!r}).")
    return number


async def _given(read: Read) -> Read:
    return read


def _stored_time(letter: Stored) -> str:
    """When the broker stored ``letter``, as ISO 8601 in UTC (it gives nanoseconds, which Python drops)."""
    return (parse_time(letter.stored_at) or datetime.now(UTC)).isoformat()


async def _read(nc: Client, stream: str, seqs: list[int]) -> Read:
    """Messages ``seqs`` (ascending) of ``stream`` that are still there: one batched read from the
    first of them over the span they cover (at most READ_SPAN messages; under load the messages
    between them are the queue's in flight, few); those it did not reach, one direct get each,
    sent together."""
    span = min(seqs[-1] - seqs[0] + 1, max(READ_SPAN, len(seqs)))
    head = await direct_batch(nc, direct_get_subject(stream), {"seq": seqs[0], "batch": span, "max_bytes": READ_BYTES},
                              f"the dead letters of {stream}")
    wanted = set(seqs)
    found = {m.sequence: m for m in head.messages if m.sequence in wanted}
    missing = [seq for seq in seqs if seq not in found]
    js = nc.jetstream(timeout=5)
    answers = await asyncio.gather(*(retry_unavailable(lambda seq=seq: js.get_msg(stream, seq=seq, direct=True))
                                     for seq in missing), return_exceptions=True)
    for seq, answer in zip(missing, answers, strict=True):
        if isinstance(answer, nats.js.errors.NotFoundError):
            continue  # moved already, or deleted by a worker
        if isinstance(answer, BaseException):
            raise answer
        stamp = (answer.time or datetime.now(UTC)).astimezone(UTC).isoformat()
        found[seq] = Stored(seq, answer.data or b"", dict(answer.headers or {}), stamp)
    return found
