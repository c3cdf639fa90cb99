"""A queue's messages as the SQS endpoint (sqs/) uses them: send with the message's SQS attributes
in headers, receive with the headers and timestamps SQS reports, change visibility, delete, purge.

Sends go through messages.py (``Messages.send``: the size check, dedupe keys, delays as message
schedules). A receive pulls from the queue's consumer as the SDK does; its receipt handle seals the
message's ack subject, its receive count and when its lease ends, under the master key for this
queue. Changing the visibility is a ``-NAK`` with that delay (0: visible again at once); deleting is
an ``+ACK``. Both need the lease to be the handle's own and not over: a handle whose lease has
ended may belong to a message another worker now holds (JetStream acks by stream sequence, not by
delivery), so such a delete deletes nothing, as SQS allows, and a visibility change is refused as
not in flight. The leases the endpoint gave out (extended by visibility changes) are kept here, in
memory: the control process is the one that answers the endpoint.

Purge removes every message of the queue's stream, in flight and delayed ones too (as SQS's
PurgeQueue), counted as ``cleared``; its dead letters on another queue stay.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Optional

import nats.errors

from ..auth.secrets import MasterKey, SealError
from ..broker.connection import BrokerConnection
from ..broker.direct import direct_batch, direct_get_subject
from ..envelope import DEAD_GRACE, ENQUEUED_AT, deadline_of, delay_subjects, last_receive, nak_payload, parse_time
from ..errors import BrokerUnavailable, Conflict, EnclaveError, NotFound, SpecError
from ..names import CONSUMER, stream_name
from ..spec import subject_for
from ..state.kv import Store
from ..state.records import QueueRecord, SqsLease
from .expiry import drop_expired
from .messages import LEASE_MARGIN, Messages, lease_key, settle, take, tell_mover

log = logging.getLogger("enclave.sqs")

RECEIPT_PURPOSE = "sqs-receipt"
MAX_TOTAL_VISIBILITY = 43200  #: seconds a receive may keep a message hidden in all, as in SQS
MAX_LEASES = 200_000  #: leases remembered; past this, those that ended are forgotten


class ReceiptInvalid(SpecError):
    """A receipt handle that is not one this queue gave out."""


class NotInFlight(Conflict):
    """A receipt handle whose lease is over (or was replaced by a later receive)."""


class MessageGone(NotFound):
    """A receipt handle whose message is no longer stored (deleted, purged, dead-lettered)."""


@dataclass
class Lease:
    receive_count: int
    until: float  #: epoch seconds
    first_received: Optional[float]  #: epoch seconds of the message's first receive, if known
    stored: bool = False  #: kept in the store too (a visibility change's): deleted there with the message


@dataclass(frozen=True)
class Received:
    """One message a receive took."""

    sequence: int
    receipt: str
    data: bytes
    headers: dict[str, str]
    receive_count: int
    sent_at: Optional[datetime]
    first_received: Optional[float]


class SqsMessages:
    """Send, receive, change visibility, delete and purge for the SQS endpoint."""

    def __init__(self, messages: Messages, conn: BrokerConnection, store: Store, master: MasterKey) -> None:
        self.messages = messages
        self.conn = conn
        self.store = store
        self.master = master
        self._leases: dict[tuple[str, int], Lease] = {}

    async def send(self, project: str, name: str, body: bytes, headers: dict[str, str],
                   dedupe_key: Optional[str] = None, delay: float = 0) -> dict[str, Any]:
        """Store one message (``Messages.send``): its ``sequence`` and whether it was a ``duplicate``."""
        return await self.messages.send(project, name, body, "text/plain; charset=utf-8", dedupe_key, delay, headers)

    # -- receive --------------------------------------------------------------------------------

    async def receive(self, record: QueueRecord, count: int, wait: float,
                      visibility: Optional[int] = None) -> list[Received]:
        """Take up to ``count`` messages, waiting up to ``wait`` seconds for the first; each hidden
        for ``visibility`` seconds (None: the queue's own lease)."""
        msgs = await self._take(record, count, wait)
        now = time.time()
        taken = []
        for msg in msgs:
            headers = dict(msg.headers or {})
            deadline = deadline_of(headers)
            if deadline is not None and deadline <= datetime.now(UTC):  # past its start deadline
                await drop_expired(self.conn, self.store, record, msg.metadata.sequence.stream, taken_ok=True)
                with contextlib.suppress(nats.errors.Error):
                    await msg.ack()
                continue
            count_now = msg.metadata.num_delivered
            lease = self._queue_lease(record, count_now)
            if visibility is not None and visibility != lease:
                await settle(self.conn, record, msg.reply, self._nak(record, visibility, count_now), "visibility change")
                lease = visibility
            taken.append(self._received(record, msg, headers, now, lease))
        return taken

    async def _take(self, record: QueueRecord, count: int, wait: float) -> list[Any]:
        return await take(self.conn, record, CONSUMER, count, wait)

    @staticmethod
    def _queue_lease(record: QueueRecord, receive_count: int) -> int:
        """Seconds the broker hides a message at this receive: the retry schedule's entry, or the
        visibility timeout."""
        if record.spec.retry_backoff_seconds:
            return int(record.spec.retry_delay(receive_count))
        return record.spec.visibility_timeout_seconds

    @staticmethod
    def _nak(record: QueueRecord, delay: float, receive_count: int) -> bytes:
        return nak_payload(delay, receive_count, [float(s) for s in record.spec.retry_backoff_seconds or ()])

    def _received(self, record: QueueRecord, msg: Any, headers: dict[str, str], now: float, lease: int) -> Received:
        meta = msg.metadata
        seq, count = meta.sequence.stream, meta.num_delivered
        until = now + lease - LEASE_MARGIN
        known = self._leases.get((record.id, seq))
        first = now if count == 1 else (known.first_received if known else None)
        self._remember(record.id, seq, Lease(count, until, first))
        receipt = self.master.seal_handle(json.dumps({"r": msg.reply, "s": seq, "n": count, "u": until,
                                                      "t": now}).encode(), RECEIPT_PURPOSE, record.id)
        sent = parse_time(headers.get(ENQUEUED_AT)) or meta.timestamp
        return Received(seq, receipt, msg.data or b"", headers, count, sent, first)

    def _remember(self, queue_id: str, seq: int, lease: Lease) -> None:
        if len(self._leases) >= MAX_LEASES:
            now = time.time()
            self._leases = {k: v for k, v in self._leases.items() if v.until > now}
            if len(self._leases) >= MAX_LEASES:  # all live: forget the oldest half
                self._leases = dict(list(self._leases.items())[MAX_LEASES // 2:])
        self._leases[(queue_id, seq)] = lease

    # -- by receipt -----------------------------------------------------------------------------

    def _open(self, record: QueueRecord, receipt: str) -> dict[str, Any]:
        try:
            sealed = json.loads(self.master.unseal_handle(receipt, RECEIPT_PURPOSE, record.id))
            if not isinstance(sealed, dict) or not {"r", "s", "n", "u"} <= sealed.keys():
                raise ValueError("not a receipt")
            return sealed
        except (SealError, ValueError, UnicodeError):
            raise ReceiptInvalid(f"The receipt handle is not one of queue '{record.spec.name}' in project "
                                 f"'{record.spec.project}'.") from None

    async def _live_until(self, record: QueueRecord, sealed: dict[str, Any]) -> Optional[float]:
        """When the handle's lease ends, or None if a later receive has replaced it: as this process
        knows it, else as a visibility change stored it (this process restarted since, or another
        node gave the handle), else the lease the handle was given. A stored lease of an earlier
        receive than the handle's is one the handle's receive replaced (a receive stores nothing):
        read as the handle's, it made a restart's delete delete nothing, answered as done."""
        lease = self._leases.get((record.id, sealed["s"]))
        if lease is None:
            with contextlib.suppress(EnclaveError):
                found = await self.store.sqs_leases.get(lease_key(record.id, sealed["s"]))
                if found is not None and found[0].receive_count >= sealed["n"]:
                    stored = found[0]
                    lease = Lease(stored.receive_count, stored.until, stored.first_received, stored=True)
                    self._remember(record.id, sealed["s"], lease)
        if lease is None:
            return float(sealed["u"])
        return lease.until if lease.receive_count == sealed["n"] else None

    async def change_visibility(self, record: QueueRecord, receipt: str, timeout: int) -> None:
        """Hide the message for ``timeout`` seconds from now (0: visible again at once).
        ReceiptInvalid, NotInFlight once its lease is over, MessageGone once it is not stored."""
        sealed = self._open(record, receipt)
        until = await self._live_until(record, sealed)
        now = time.time()
        if until is None or now > until:
            raise NotInFlight(f"The message of this receipt handle is not in flight on queue '{record.spec.name}': "
                              "its visibility timeout has ended (it may have been received again).")
        if "t" in sealed and now + timeout - float(sealed["t"]) > MAX_TOTAL_VISIBILITY:  # a handle since stop 41
            raise SpecError(f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                            f"VisibilityTimeout for the message is beyond the limit [{MAX_TOTAL_VISIBILITY} seconds] "
                            "(counted from its receive, as in SQS).")
        if not await self._stored(record, sealed["s"]):  # a nak of it would be answered all the same
            raise MessageGone(f"The message of this receipt handle is no longer on queue '{record.spec.name}'.")
        # visible again at once after its last receive: dead now, so the mover is told (messages.py)
        dead = timeout == 0 and last_receive(sealed["n"], record.spec.max_receives)
        await settle(self.conn, record, sealed["r"], self._nak(record, DEAD_GRACE if dead else timeout, sealed["n"]),
                     "visibility change")
        if dead:
            await tell_mover(self.conn, record, sealed["r"])
        known = self._leases.get((record.id, sealed["s"]))
        lease = Lease(sealed["n"], now + timeout - LEASE_MARGIN, known.first_received if known else None,
                      stored=bool(known and known.stored))
        try:  # past a restart of this process too
            await self.store.sqs_leases.put(lease_key(record.id, sealed["s"]),
                                            SqsLease(receive_count=lease.receive_count, until=lease.until,
                                                     first_received=lease.first_received))
            lease = replace(lease, stored=True)
        except EnclaveError as exc:
            log.warning("the lease of message %s of queue %s was not stored (%s): it holds until this process "
                        "stops", sealed["s"], record.key, exc)
        self._remember(record.id, sealed["s"], lease)

    async def _stored(self, record: QueueRecord, seq: int) -> bool:
        async with self.conn.account(record.id) as nc:
            batch = await direct_batch(nc, direct_get_subject(stream_name(record.id)), {"seq": seq, "batch": 1},
                                       f"message {seq} of queue '{record.spec.name}'")
        return bool(batch.messages) and batch.messages[0].sequence == seq

    async def delete(self, record: QueueRecord, receipt: str) -> bool:
        """Delete the message of a receipt handle; whether it was (False: its lease was over, so it
        may be another worker's now, and is left). ReceiptInvalid for a handle not of this queue."""
        sealed = self._open(record, receipt)
        until = await self._live_until(record, sealed)
        if until is None or time.time() > until:
            return False
        await settle(self.conn, record, sealed["r"], b"+ACK", "delete")
        lease = self._leases.pop((record.id, sealed["s"]), None)
        if lease is not None and lease.stored:  # a delete costs no write of the store otherwise
            with contextlib.suppress(EnclaveError):  # it would lapse by itself
                await self.store.sqs_leases.delete(lease_key(record.id, sealed["s"]))
        return True

    # -- purge ----------------------------------------------------------------------------------

    async def purge(self, record: QueueRecord) -> int:
        """Remove every message of the queue (waiting, in flight, delayed); how many went."""
        delayed = await self._purge(record, {"filter": delay_subjects(subject_for(record.spec.project,
                                                                                  record.spec.name))})
        rest = await self._purge(record, {})
        if delayed + rest:
            await self.store.count(record.key, "cleared", delayed + rest)
        if delayed:
            await self.store.count(record.key, "scheduled", -delayed)
        self._leases = {k: v for k, v in self._leases.items() if k[0] != record.id}
        return delayed + rest

    async def _purge(self, record: QueueRecord, request: dict[str, Any]) -> int:
        answer = await self.conn.queue_request(record.id, f"STREAM.PURGE.{stream_name(record.id)}",
                                               json.dumps(request).encode())
        if "error" in answer:
            raise BrokerUnavailable(f"The broker refused to purge queue '{record.spec.name}': "
                                    f"{answer['error'].get('description')}.")
        return int(answer.get("purged", 0))
