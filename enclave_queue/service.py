"""The one layer the HTTP API, the console (and through the API the CLI and the provider) call
about queues: declarations (create, list, get, update, delete), status, depth, credentials and
secrets. What a queue holds, by hand, is composed here from queues/: ``messages`` (send, receive,
delete, nack, peek), ``contents`` (export, clear) and ``dead_letters`` (list, retry, discard,
redrive). Every method raises errors from ``errors.py`` with one sentence naming the object.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from .auth.provenance import Provenance
from .auth.secrets import MasterKey
from .broker.connection import BrokerConnection
from .broker.depth import Depth, read_depth, read_depths
from .controller.accounts import Accounts, in_grace
from .errors import Conflict, NotFound, field_error, out_of_range
from .names import CONSUMER, inbox_prefix, stream_name, username
from .queues.contents import Contents
from .queues.deadletters import DeadLetterOps
from .queues.letters import Letters
from .queues.lookup import Lookup, not_ready, queue_missing
from .queues.messages import Messages
from .queues.samples import check_hours, history
from .queues.streams import stream_info
from .queues.tally import DeadLetterTally
from .retry import UNAVAILABLE
from .spec import (
    DEFAULT_GRACE,
    GRACE_RULE,
    MAX_GRACE,
    REPLICAS_RULE,
    Queue,
    QueuePatch,
    QueueSpec,
    given,
    password_secret_name,
    queue_key,
    subject_for,
)
from .state.kv import Store
from .state.queries import dead_letter_users, declared, depth_reads
from .state.records import AccountRecord, QueueRecord, QueueStatus

DELETE_ATTEMPTS = 5  #: times a delete reads the record again when another write came first


class QueueService:
    """Queue declarations, status and credentials, and the queues/ parts over the same store and
    connection: ``lookup``, ``letters``, ``messages``, ``contents``, ``dead_letters``."""

    def __init__(self, store: Store, conn: BrokerConnection, accounts: Accounts, master: MasterKey,
                 broker_url: Callable[[], str], internal_broker_url: str,
                 status_changed: Optional[Callable[[str, float], Awaitable[None]]] = None,
                 broker_urls: Optional[Callable[[], list[str]]] = None, nodes: int = 1) -> None:
        self.store = store
        self.nodes = nodes  #: the nodes of the cluster (1: a single node)
        #: every node's broker URL, this one's first (a cluster: apps may connect to any)
        self.broker_urls = broker_urls or (lambda: [broker_url()])
        self.status_changed = status_changed
        self.conn = conn
        self.accounts = accounts
        self.broker_url = broker_url
        self.internal_broker_url = internal_broker_url
        self.lookup = Lookup(store)
        self.letters = Letters(conn, self.lookup, Provenance.from_master(master))
        self.messages = Messages(conn, store, self.lookup, self.letters, master)
        self.contents = Contents(conn, store, self.lookup, self.letters)
        self.tally = DeadLetterTally(conn, self.letters)
        self.dead_letters = DeadLetterOps(conn, store, self.lookup, self.letters, self.tally)
        #: by project: held while a write that adds or removes a dead-letter link checks the links
        #: and is made, so that two writes each fine alone (a → b and b → a; a DLQ deleted while
        #: a queue naming it is created) cannot both pass their checks. One control process
        #: answers the API, so a lock of this process is enough.
        self._links: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    # -- declarations ---------------------------------------------------------------------------

    def view(self, record: QueueRecord) -> Queue:
        spec = record.spec
        return Queue(
            id=record.id,
            **spec.model_dump(),
            username=username(record.id),
            password_secret=password_secret_name(spec.name),
            subject=subject_for(spec.project, spec.name),
            broker_url=self.broker_url(),
            internal_broker_url=self.internal_broker_url,
        )

    async def list(self, project: str) -> list[Queue]:
        """The project's queues (not those being deleted), by name."""
        return [self.view(r) for r in await declared(self.store, f"{project}.*")]

    async def get(self, project: str, name: str) -> Queue:
        """The queue; NotFound if it does not exist (or is being deleted)."""
        return self.view(await self.lookup.live(project, name))

    async def _check_dead_letter_queue(self, spec: QueueSpec) -> None:
        """SpecError naming dead_letter_queue if it names no live queue of the project, or a queue
        whose own chain of dead-letter queues leads back here: a cycle (a → b → a) would leave
        each queue of it another's DLQ, so none could ever be deleted."""
        dlq = spec.dead_letter_queue
        if dlq is None:
            return
        found = await self.store.queues.get(queue_key(spec.project, dlq))
        if found is None or found[0].deleting:
            raise field_error("dead_letter_queue", f"names queue '{dlq}', which does not exist in project "
                                                   f"'{spec.project}'")
        chain = [spec.name, dlq]
        record = found[0]
        while record.spec.dead_letter_queue is not None and record.spec.dead_letter_queue not in chain[1:]:
            chain.append(record.spec.dead_letter_queue)
            if chain[-1] == spec.name:
                message = f"names queue '{dlq}', which would form a cycle {' → '.join(chain)}"
                raise field_error("dead_letter_queue", message,
                                  f"dead_letter_queue {message}: a queue's dead letters must end somewhere.")
            nxt = await self.store.queues.get(queue_key(spec.project, chain[-1]))
            if nxt is None or nxt[0].deleting:
                return
            record = nxt[0]

    def _placed(self, spec: QueueSpec, given: bool) -> QueueSpec:
        """``spec`` with the cluster's default replicas unless ``given``; SpecError naming replicas
        if the cluster has fewer nodes than it asks for."""
        if not given and self.nodes >= 3:
            spec = spec.model_copy(update={"replicas": 3})
        if spec.replicas > self.nodes:
            raise field_error("replicas", f"must be {REPLICAS_RULE}",
                              f"replicas {spec.replicas} needs a cluster of {spec.replicas} nodes or more; this one "
                              f"has {self.nodes}. Use replicas 1.")
        return spec

    async def create(self, spec: QueueSpec) -> Queue:
        """Declare a queue. Conflict if the name is taken; SpecError if the DLQ does not exist, or it
        asks for more replicas than the cluster has nodes; StorageFull if its max_bytes does not
        fit in the broker's store."""
        spec = self._placed(spec, "replicas" in spec.model_fields_set)
        if spec.dead_letter_queue is None:
            return await self._create(spec)
        async with self._links[spec.project]:
            return await self._create(spec)

    async def _create(self, spec: QueueSpec) -> Queue:
        existing = await self.store.queues.get(spec.key)
        if existing is not None:
            raise self._taken(spec.project, spec.name, existing[0])
        await self._check_dead_letter_queue(spec)
        account = await self.accounts.claim(spec.key, spec.max_bytes)
        record = QueueRecord(id=account.id, spec=spec)
        try:
            await self.store.queues.create(spec.key, record)
        except Conflict:
            await self.accounts.release(account.id)
            found = await self.store.queues.get(spec.key)
            raise self._taken(spec.project, spec.name, found[0] if found else None) from None
        return self.view(record)

    @staticmethod
    def _taken(project: str, name: str, record: Optional[QueueRecord]) -> Conflict:
        if record is not None and record.deleting:
            return Conflict(f"Queue '{name}' in project '{project}' is still being deleted; try again shortly.")
        return Conflict(f"Queue '{name}' already exists in project '{project}'.")

    async def update(self, project: str, name: str, patch: QueuePatch) -> Queue:
        """Change settings in place; the reconciler applies them to the broker."""
        for _ in range(5):
            record, revision = await self.lookup.get(project, name)
            if record.deleting:
                raise queue_missing(project, name)
            spec = self._placed(patch.apply(record.spec), True)
            if spec == record.spec:
                return self.view(record)
            if spec.max_bytes > record.spec.max_bytes:  # refused now, not found Errored later
                self.accounts.check_room(spec.max_bytes, record.id, f"Queue '{name}'")
            changed = record.model_copy(update={"spec": spec, "generation": record.generation + 1})
            try:
                if spec.dead_letter_queue == record.spec.dead_letter_queue:
                    await self.store.queues.update(record.key, changed, revision)
                else:
                    async with self._links[project]:
                        await self._check_dead_letter_queue(spec)
                        await self.store.queues.update(record.key, changed, revision)
            except Conflict:
                continue  # changed by someone else meanwhile: apply the patch to the new version
            return self.view(changed)
        raise Conflict(f"Queue '{name}' in project '{project}' kept changing; try again.")

    async def delete(self, project: str, name: str) -> None:
        """Start deleting a queue (the reconciler finishes it); a queue already being deleted is
        left to it. Conflict if it is another live queue's DLQ; NotFound if it does not exist. A
        record written by someone else meanwhile (a PATCH, another delete, the reconciler removing
        it) is read again, not answered as a Conflict: those are the store's compare-and-set."""
        for _ in range(DELETE_ATTEMPTS):
            record, revision = await self.lookup.get(project, name)
            if record.deleting:
                return
            changed = record.model_copy(update={"deleting": True, "generation": record.generation + 1})
            async with self._links[project]:
                users = await dead_letter_users(self.store, project, name)
                if users:
                    raise Conflict(
                        f"Queue '{name}' is the dead-letter queue of queue '{users[0]}' in project '{project}'; "
                        "change or delete that queue first."
                    )
                try:
                    await self.store.queues.update(record.key, changed, revision)
                except Conflict:
                    continue
            self.lookup.deleting(record.id)
            self.tally.forget(record.id)
            return
        raise Conflict(f"Queue '{name}' in project '{project}' kept changing while being deleted; try again.")

    async def status(self, project: str, name: str) -> dict[str, Any]:
        """The queue's state and conditions. A spec the reconciler has not applied yet reads as
        ``Reconciling``, whatever the last outcome was."""
        record, _ = await self.lookup.get(project, name)
        found, counts = await asyncio.gather(self.store.status.get(record.key), self.store.counts(record.key))
        status = found[0] if found else QueueStatus.initial()
        state, message = status.state, status.message
        if record.deleting and state != "Deleting":
            state, message = "Deleting", "Waiting for the controller to delete the queue."
        elif not record.deleting and status.observed_generation < record.generation:
            state, message = "Reconciling", f"Waiting for the controller to apply generation {record.generation}."
        return {
            "state": state,
            "message": message,
            "generation": record.generation,
            "observed_generation": status.observed_generation,
            "conditions": [c.model_dump(mode="json") for c in status.conditions],
            "dead_lettered": counts.dead_lettered,
            "discarded": counts.discarded,
        }

    async def wait_settled(self, project: str, name: str, timeout: float) -> dict[str, Any]:
        """The status once the latest spec is applied (``Ready`` or ``Errored``), or as it stands
        after ``timeout`` seconds. NotFound once a deleted queue is gone."""
        deadline = time.monotonic() + timeout
        key = queue_key(project, name)
        while True:
            status = await self.status(project, name)
            settled = status["state"] in ("Ready", "Errored") and status["observed_generation"] >= status["generation"]
            remaining = deadline - time.monotonic()
            if settled or remaining <= 0:
                return status
            if self.status_changed is None:
                await asyncio.sleep(min(0.05, remaining))
            else:
                # wake on the reconciler's next write, and look again now and then in case the
                # change came from elsewhere (another control process, a restart)
                await self.status_changed(key, min(1.0, remaining))

    # -- depth --------------------------------------------------------------------------------

    async def depth(self, project: str, name: str) -> Depth:
        """How many messages the queue holds now, and where they are (see broker/depth.py);
        ``dead`` counts this queue's own letters on its dead-letter queue (queues/tally.py), which
        other queues may share."""
        record = await self.lookup.ready(project, name)
        dlq = await self.lookup.dead_letter_queue(record)
        try:
            depth = await read_depth(self.conn, record.id, dlq.id if dlq else None)
        except UNAVAILABLE:
            raise not_ready(record) from None
        own = await self._own_letters([record], [depth], {dlq.key: dlq} if dlq else {})
        return own[0] or depth

    async def depths(self, project: str) -> list[tuple[Queue, Optional[Depth]]]:
        """Every queue of a project with its depth (None where it could not be read: not ready);
        ``dead`` as ``depth`` counts it."""
        records = await declared(self.store, f"{project}.*")
        found = await read_depths(self.conn, depth_reads(records))
        depths = [d if isinstance(d, Depth) else None for d in found]
        depths = await self._own_letters(records, depths, {r.key: r for r in records})
        return [(self.view(r), d) for r, d in zip(records, depths, strict=True)]

    async def _own_letters(self, records: list[QueueRecord], depths: list[Optional[Depth]],
                           known: dict[str, QueueRecord]) -> list[Optional[Depth]]:
        """``depths`` with each ``dead`` counting only the queue's own letters on its dead-letter
        queue (one of ``known``, by key), where those can be counted by source."""
        dlqs = {r.key: known.get(queue_key(r.spec.project, r.spec.dead_letter_queue))
                for r, d in zip(records, depths, strict=True) if d is not None and r.spec.dead_letter_queue}
        wanted = {dlq.key: dlq for dlq in dlqs.values() if dlq is not None}
        # a source's letters from its time on: those of a queue of its name deleted since are not its own
        since = {(r.spec.project, r.spec.name): r.created_at for r in records if r.key in dlqs}
        found = await asyncio.gather(*(self.tally.by_source(dlq, since) for dlq in wanted.values()),
                                     return_exceptions=True)
        counts = {key: c for key, c in zip(wanted, found, strict=True) if not isinstance(c, BaseException)}
        out = []
        for record, depth in zip(records, depths, strict=True):
            dlq = dlqs.get(record.key)
            tally = counts.get(dlq.key) if dlq is not None else None
            if depth is not None and tally is not None:
                depth = dataclasses.replace(depth, dead=tally[(record.spec.project, record.spec.name)])
            out.append(depth)
        return out

    async def dead_letter_counts(self, project: str, name: str) -> dict[str, Any]:
        """Queue ``name``'s messages, and how many of them are letters from each source queue (a
        dead-letter queue may serve several): ``{"total", "by_source": {queue: n}, "sources"}``,
        ``by_source`` None when it holds too many to count (queues/tally.py), ``sources`` the queues
        of the project that name it as their dead-letter queue."""
        record = await self.lookup.ready(project, name)
        counts, users = await asyncio.gather(self.tally.by_source(record), self.dead_letter_sources(project, name))
        total = int((await stream_info(self.conn, record)).state.messages)
        by_source = None if counts is None else {
            queue: n for (source_project, queue), n in sorted(counts.items()) if source_project == project}
        return {"total": total, "by_source": by_source, "sources": users}

    async def dead_letter_sources(self, project: str, name: str) -> list[str]:
        """The live queues of the project that name queue ``name`` as their dead-letter queue."""
        return sorted(await dead_letter_users(self.store, project, name))

    async def overview(self, project: str) -> list[dict[str, Any]]:
        """One row a queue of the project: its state and depth (what the console's table shows)."""
        rows, statuses = await asyncio.gather(self.depths(project), self.store.status.items(f"{project}.*"))
        state_of = {key: status for key, status, _ in statuses}
        out = []
        for queue, depth in rows:
            status = state_of.get(queue_key(project, queue.name))
            out.append({
                "name": queue.name,
                "state": status.state if status else "Reconciling",
                "message": status.message if status else "Waiting for the controller.",
                "dead_letter_queue": queue.dead_letter_queue,
                "visibility_timeout_seconds": queue.visibility_timeout_seconds,
                "max_receives": queue.max_receives,
                "depth": depth.view() if depth else None,
            })
        return out

    async def projects(self) -> list[str]:
        """The projects that have queues (and ``default``), sorted."""
        keys = {key.split(".", 1)[0] for key, record, _ in await self.store.queues.items() if not record.deleting}
        return sorted(keys | {"default"})

    async def depth_history(self, project: str, name: str, hours: int = 24) -> list[dict[str, Any]]:
        """The queue's depth samples of the last ``hours`` hours, oldest first: ``{"t", "waiting",
        "in_flight", "delayed", "dead"}`` each (queues/samples.py)."""
        check_hours(hours)
        record = await self.lookup.live(project, name)
        return await history(self.conn, record.id, hours)

    # -- credentials ----------------------------------------------------------------------------

    async def credentials(self, project: str, name: str) -> dict[str, Any]:
        """What a raw NATS client needs to use the queue, and which password it is: its
        ``password_version`` (1 at creation, one more at each rotation) and, while the one before
        it still logs in, until when."""
        record = await self.lookup.live(project, name)
        return self._credentials(record, await self.accounts.fetch(record.id))

    def _credentials(self, record: QueueRecord, account: Optional[AccountRecord]) -> dict[str, Any]:
        project, name = record.spec.project, record.spec.name
        until = account.previous_until if account is not None and in_grace(account) else None
        return {
            "broker_url": self.broker_url(),
            "broker_urls": self.broker_urls(),
            "username": username(record.id),
            "password": self.accounts.password_of(account) if account is not None else self.accounts.password(record.id),
            "subject": subject_for(project, name),
            "inbox_prefix": inbox_prefix(record.id),
            "stream": stream_name(record.id),
            "consumer": CONSUMER,
            "password_version": account.password_version if account is not None else 1,
            "previous_password_valid_until": until.isoformat(timespec="seconds") if until else None,
        }

    async def rotate_password(self, project: str, name: str, grace_seconds: Any = DEFAULT_GRACE) -> dict[str, Any]:
        """A new password for the queue's apps; the current one keeps logging in for
        ``grace_seconds`` (0: refused at once and its connections closed). The new credentials,
        with the version and until when the previous password logs in."""
        if isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int) or not 0 <= grace_seconds <= MAX_GRACE:
            raise out_of_range("grace_seconds", GRACE_RULE, given(grace_seconds))
        record = await self.lookup.live(project, name)
        # the credentials of this rotation, not of one that came right after it
        return self._credentials(record, await self.accounts.rotate(record.id, grace_seconds))

    async def read_secret(self, project: str, secret: str) -> dict[str, str]:
        """A managed secret's value (today: a queue's password, ``<queue>-password``)."""
        name = secret.removesuffix("-password")
        found = await self.store.queues.get(queue_key(project, name)) if name != secret else None
        if found is None or found[0].deleting:
            raise NotFound(f"Secret '{secret}' does not exist in project '{project}'.")
        return {"name": secret, "project": project, "value": self.accounts.password(found[0].id)}
