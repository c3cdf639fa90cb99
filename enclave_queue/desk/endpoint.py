"""The desk's request endpoint: what a queue's apps ask the control plane about their own queue.

An app (the SDK, as the queue's user) reaches the desk with a request to ``enclave.desk.<verb>``
in its own account; the broker delivers it to the control account as ``desk.<queue id>.<verb>``
(broker/config.py). The queue id comes from that import, not from the request, so an app can ask
only about its own queue. Answers are JSON: ``{"result": …}`` or ``{"error": <problem>}`` (the
API's problem shape, which the SDK turns back into the same exception class).

Verbs: ``release`` and ``release_many`` (hand a message back without spending an attempt: a copy
that keeps its id, attempts, put time and deadline replaces it), ``notes`` (the last errors of some
messages), ``expire`` (drop messages past their start deadline, counted: queues/expiry.py),
``metrics`` (queues/counters.py), ``schedules`` (turn on delayed messages: queues/schedules.py),
``history``, ``dead_letters`` / ``retry`` / ``discard`` (this queue's letters on its dead-letter
queue), ``clear`` and ``export`` (queues/contents.py), ``broker`` (how it syncs writes: the SDK
group-commits puts on a broker that fsyncs each one).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from .. import envelope
from ..broker.connection import BrokerConnection, delete_message, publish_into, stored_seq
from ..broker.depth import read_depth
from ..broker.tasks import stop_tasks
from ..controller.errornotes import last_errors
from ..controller.naks import NakCounter
from ..errors import EnclaveError, NotFound, SpecError, field_error
from ..names import desk_subject, stream_name
from ..queues.counters import outcomes
from ..queues.expiry import drop_expired
from ..queues.samples import check_hours, history
from ..queues.schedules import publish_delayed, turn_on
from ..recent import Recent
from ..retry import retry_unavailable
from ..service import QueueService
from ..spec import MAX_SEQUENCE, subject_for
from ..state.kv import Store
from ..state.queries import QueueIndex
from ..state.records import QueueRecord

log = logging.getLogger("enclave.desk")

MAX_IDS = 1000  #: messages one ``notes`` or ``expire`` request may name
MAX_LIST = 100  #: dead letters one ``dead_letters`` request may return
EXPORT_PAGE_BYTES = 512 * 1024  #: bytes of JSON one ``export`` page holds at most (the reply fits a message)


def _problem(exc: EnclaveError) -> dict[str, Any]:
    return {"status": exc.status, "title": exc.title, "detail": exc.message, "errors": exc.errors}


def _int(body: dict[str, Any], field: str, low: int, high: int, default: Optional[int] = None) -> int:
    value = body.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise field_error(field, f"must be an integer from {low} to {high} (got {value!r})")
    return value


def _ids(body: dict[str, Any], field: str) -> list[int]:
    values = body.get(field)
    if not isinstance(values, list) or len(values) > MAX_IDS or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_SEQUENCE for v in values):
        raise field_error(field, f"must be a list of at most {MAX_IDS} integers from 1 to {MAX_SEQUENCE}")
    return values


#: verbs that only read, asked often (``broker`` at every connect, ``notes`` for every receive
#: that holds a message tried before): they find their queue in the watch's copy of the records
#: when it holds it, not in a read of the store each
READ_FROM_WATCH = frozenset({"broker", "notes"})


class Desk:
    """Answers the apps' requests, in the control process (``desk.*.*``, a queue group)."""

    def __init__(self, store: Store, conn: BrokerConnection, service: QueueService, index: QueueIndex,
                 naks: NakCounter, *, sync: str = "always") -> None:
        self.store = store
        self.conn = conn
        self.service = service  #: its queues/ parts: lookup, letters, contents, dead_letters
        self.index = index  #: finds the queue of a request by its id
        self.naks = naks
        self.sync = sync  #: how the broker syncs writes (ENCLAVE_SYNC): the SDK group-commits on "always"
        self.recent = Recent()  #: releases answered lately, answered the same when asked again
        self._sub: Any = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._sub = await self.conn.control.subscribe(desk_subject("*"), queue="desk", cb=self._on_request)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        await stop_tasks(list(self._tasks))

    # -- requests -------------------------------------------------------------------------------

    async def _on_request(self, request: Msg) -> None:
        task = asyncio.create_task(self._answer(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, request: Msg) -> None:
        _, queue_id, verb = request.subject.split(".", 2)
        try:
            body = envelope.parse_json(request.data or b"{}")
            if not isinstance(body, dict):
                raise SpecError("The request must be a JSON object.")
            record = await self.index.record_of(queue_id, cached=verb in READ_FROM_WATCH)
            if record is None or record.deleting:
                raise NotFound("The queue does not exist any more.")
            handler = getattr(self, f"_verb_{verb}", None)
            if handler is None:
                raise NotFound(f"The desk has no verb '{verb}'.")
            reply: dict[str, Any] = {"result": await handler(record, body)}
        except EnclaveError as exc:
            reply = {"error": _problem(exc)}
        except (ValueError, KeyError, TypeError) as exc:
            reply = {"error": _problem(SpecError(f"Bad request: {exc}."))}
        except Exception as exc:  # answered, so the app fails at once instead of timing out
            log.warning("desk %s for %s failed: %r", verb, queue_id, exc)
            reply = {"error": _problem(EnclaveError(f"The control plane failed: {exc!r}."))}
        with contextlib.suppress(nats.errors.Error):
            await request.respond(json.dumps(reply).encode())

    async def _verb_release(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Any]:
        """Replace message ``seq`` by a copy that has spent ``receive_count - 1`` receives of its
        own (so the attempt being released is given back), visible after ``delay_s``."""
        seq = _int(body, "seq", 1, 2**63)
        receive_count = _int(body, "receive_count", 1, 2**31)
        delay = envelope.check_delay(body.get("delay_s", 0))
        # asked again after a reconnect: the same answer, not "not on the queue any more"
        return await self.recent.once((record.id, "release", seq, receive_count, delay),
                                      lambda: self._release(record, seq, receive_count, delay))

    async def _verb_release_many(self, record: QueueRecord, body: dict[str, Any]) -> int:
        """``release`` for many messages at once (``messages``: ``[{"seq", "receive_count"}]``),
        visible again at once: what an iteration left early hands back. How many were released
        (one gone meanwhile is skipped)."""
        given = body.get("messages")
        if not isinstance(given, list) or len(given) > MAX_IDS:
            raise field_error("messages", f"must be a list of at most {MAX_IDS} objects with seq and receive_count")
        wanted = tuple((_int(item, "seq", 1, 2**63), _int(item, "receive_count", 1, 2**31)) for item in given)

        async def release_all() -> int:
            released = 0
            for seq, receive_count in wanted:
                with contextlib.suppress(NotFound):
                    await self._release(record, seq, receive_count, 0.0)
                    released += 1
            return released

        return await self.recent.once((record.id, "release_many", wanted), release_all)

    async def _release(self, record: QueueRecord, seq: int, receive_count: int, delay: float) -> dict[str, Any]:
        source = self.conn.queue_js(record.id)
        stream = stream_name(record.id)
        try:
            msg = await retry_unavailable(lambda: source.get_msg(stream, seq=seq, direct=True))
        except nats.js.errors.NotFoundError:
            raise NotFound(f"Message {seq} is not on the queue any more (deleted, or its lease ran out and "
                           "someone else took it and deleted it).") from None
        headers = dict(msg.headers or {})
        copy = envelope.clean_headers(headers)
        copy[envelope.ID] = str(envelope.message_id(headers, seq))
        copy[envelope.PRIOR_ATTEMPTS] = str(envelope.prior_attempts(headers) + receive_count - 1)
        copy[envelope.ENQUEUED_AT] = headers.get(envelope.ENQUEUED_AT) or envelope.rfc3339(msg.time or datetime.now(UTC))
        copy["Nats-Msg-Id"] = self.service.letters.provenance.release_id(record.id, seq)  # one copy a message
        if envelope.DEADLINE in headers:
            copy[envelope.DEADLINE] = headers[envelope.DEADLINE]
        subject = subject_for(record.spec.project, record.spec.name)
        lane = envelope.lane_subject(subject, envelope.priority_of(msg.subject or ""))  # it keeps its priority
        target = lane
        if delay > 0:
            copy.update(envelope.schedule_headers(lane, datetime.now(UTC) + timedelta(seconds=delay)))
            target = envelope.delay_subject(subject, f"r{record.id}{seq}")
        def publish() -> Any:
            return publish_into(self.conn, record.id, target, msg.data or b"", copy)

        sequence = stored_seq(await (publish_delayed(self.conn, record, publish) if delay > 0 else publish()),
                              record.spec)
        await delete_message(source, stream, seq)
        await self.store.count(record.key, "released")
        if delay > 0:
            await self.store.count(record.key, "scheduled")
        return {"id": int(copy[envelope.ID]), "sequence": sequence}

    async def _verb_schedules(self, record: QueueRecord, body: dict[str, Any]) -> bool:
        """Turn on the queue's delayed messages (its stream's schedules) for the SDK's delayed put
        the broker refused for the lack of them; False for a queue with ``max_messages``."""
        return await turn_on(self.conn, record)

    async def _verb_broker(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, str]:
        """How the broker commits writes: ``{"sync": "always"}`` when it fsyncs each one first."""
        return {"sync": self.sync}

    async def _verb_notes(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Optional[str]]:
        """The last error reported for each message id (null where none was)."""
        ids = _ids(body, "ids")
        notes = await last_errors(self.conn.control, record.id, ids)
        return {str(i): notes.get(i) for i in ids}

    async def _verb_expire(self, record: QueueRecord, body: dict[str, Any]) -> int:
        """Drop the messages ``seqs`` that are past their start deadline; how many were dropped."""
        dropped = 0
        for seq in _ids(body, "seqs"):
            dropped += await drop_expired(self.conn, self.store, record, seq, taken_ok=True)
        return dropped

    async def _verb_metrics(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, int]:
        depth = await read_depth(self.conn, record.id)
        counts, unsaved = await self.naks.counts(record)
        return outcomes(depth, counts, unsaved)

    async def _verb_history(self, record: QueueRecord, body: dict[str, Any]) -> list[dict[str, Any]]:
        hours = check_hours(_int(body, "hours", 1, 10**6, default=24))
        await self.service.lookup.live(record.spec.project, record.spec.name)
        return await history(self.conn, record.id, hours)

    async def _dead_letter_queue(self, record: QueueRecord) -> QueueRecord:
        if not record.spec.dead_letter_queue:
            raise NotFound(f"Queue '{record.spec.name}' has no dead-letter queue.")
        return await self.service.lookup.live(record.spec.project, record.spec.dead_letter_queue)

    async def _verb_dead_letters(self, record: QueueRecord, body: dict[str, Any]) -> list[dict[str, Any]]:
        """This queue's oldest ``limit`` dead letters (its DLQ may hold other queues' letters too)."""
        limit = _int(body, "limit", 1, MAX_LIST, default=10)
        if not record.spec.dead_letter_queue:
            return []
        dlq = await self._dead_letter_queue(record)
        found: list[dict[str, Any]] = []
        after = 0
        while len(found) < limit:
            letters = await self.service.letters.read(dlq, after, MAX_LIST)  # vouched for: their source is sure
            found += [letter.view() for letter in letters if letter.of_queue(record)]
            if len(letters) < MAX_LIST:
                break
            after = letters[-1].sequence
        return found[:limit]

    async def _our_letter(self, record: QueueRecord, body: dict[str, Any]) -> tuple[QueueRecord, int]:
        seq = _int(body, "seq", 1, 2**63)
        dlq = await self._dead_letter_queue(record)
        letters = await self.service.letters.read(dlq, seq - 1, 1)
        if not letters or letters[0].sequence != seq or not letters[0].of_queue(record):
            raise NotFound(f"Dead letter {seq} of queue '{record.spec.name}' does not exist.")
        return dlq, seq

    async def _verb_retry(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Any]:
        dlq, seq = await self._our_letter(record, body)
        return await self.service.dead_letters.retry(dlq.spec.project, dlq.spec.name, seq)

    async def _verb_discard(self, record: QueueRecord, body: dict[str, Any]) -> None:
        dlq, seq = await self._our_letter(record, body)
        await self.service.dead_letters.discard(dlq.spec.project, dlq.spec.name, seq)

    async def _verb_clear(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, int]:
        return await self.service.contents.clear(record.spec.project, record.spec.name)

    async def _verb_export(self, record: QueueRecord, body: dict[str, Any]) -> dict[str, Any]:
        cursor = body.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise field_error("cursor", "must be the text a previous page returned")
        lines, after = await self.service.contents.export_page(record.spec.project, record.spec.name, cursor,
                                                               max_bytes=EXPORT_PAGE_BYTES)
        return {"messages": lines, "cursor": after}
