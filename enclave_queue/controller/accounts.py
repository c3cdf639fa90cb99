"""Queue accounts on the broker: the spare pool, claims, removal, and the broker configuration.

Every queue owns one broker account and one app user (see auth/users.py). A reload of the
broker's configuration costs about 0.2–0.5 s at 1000 accounts, so the controller keeps a few
accounts ready in advance (``ENCLAVE_ACCOUNT_POOL``, default 4): creating a queue claims one that
the running broker already knows, and the pool is refilled in the background. Reloads are
coalesced: any number of changes that arrive while one reload runs share the next one.

The records (with each user's bcrypt hash and sealed password) live in the state store; this
class keeps them in memory too, as the only writer of that bucket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import nats.errors
import nats.js.errors

from ..auth.secrets import MasterKey, SealError, generate_password, hash_password
from ..broker.config import DEFAULT_ACCOUNT_BYTES, AccountEntry, BrokerConfig, Refusal, control_reserve, render
from ..broker.connection import BrokerConnection
from ..broker.supervisor import Supervisor
from ..broker.tasks import log_failure
from ..errors import EnclaveError, StorageFull
from ..metrics.instruments import ControlMetrics
from ..names import PLATFORM_ACCOUNTS, stream_name
from ..state.kv import Store
from ..state.records import AccountRecord

log = logging.getLogger("enclave.controller")

SEAL_PURPOSE = "queue-password"
#: seconds between the end of one reload and the start of the next: changes that arrive
#: meanwhile share the next reload (each reload briefly disturbs every account's JetStream API)
RELOAD_GAP = 0.05
#: share of the store the spare accounts may reserve together: on a small store the pool shrinks
#: (to none below 256 MiB with the default 64 MiB a spare) rather than take the room of queues
SPARE_SHARE = 0.25
REFILL_RETRY = (1.0, 30.0)  #: seconds: first and longest wait before a failed refill tries again


def new_account_id() -> str:
    """A stable unique id: ``q`` and 16 base32 characters (80 random bits)."""
    return "q" + base64.b32encode(secrets.token_bytes(10)).decode().lower()


def accounts_in_config(text: str) -> dict[str, AccountEntry]:
    """The queue accounts a rendered configuration holds (to start from the last good one)."""
    try:
        accounts = json.loads(text)["accounts"]
    except (ValueError, KeyError, TypeError):
        return {}
    entries = {}
    for name, body in accounts.items():
        try:
            if name not in PLATFORM_ACCOUNTS:
                limits = body.get("jetstream")
                max_bytes = limits.get("max_file") if isinstance(limits, dict) else None
                entries[name] = AccountEntry(name, body["users"][0]["password"],
                                             max_bytes if isinstance(max_bytes, int) else DEFAULT_ACCOUNT_BYTES)
        except (KeyError, IndexError, TypeError):
            continue  # not a queue account of ours: the next render drops it
    return entries


def account_bytes(record: AccountRecord) -> int:
    """The storage limit of an account (an older record without one has the default)."""
    return record.max_bytes if record.max_bytes is not None else DEFAULT_ACCOUNT_BYTES


class Accounts:
    def __init__(self, base: BrokerConfig, supervisor: Supervisor, master: MasterKey, pool_size: int,
                 metrics: Optional[ControlMetrics] = None) -> None:
        self.base = base
        self.metrics = metrics
        self.supervisor = supervisor
        self.master = master
        self.pool_size = pool_size
        self.store: Optional[Store] = None
        self.conn: Optional[BrokerConnection] = None
        self.applied: frozenset[str] = frozenset()  #: account ids the running broker has loaded
        self._applied_bytes: dict[str, int] = {}  #: the storage limit of each, as loaded
        self.reloads = 0
        self.reload_seconds = 0.0  #: total time spent in reloads
        self._records: dict[str, tuple[AccountRecord, int]] = {}
        self._lock = asyncio.Lock()
        self._requested = 0
        self._done = 0
        self._loaded_text: Optional[str] = None
        self._last_reload = 0.0  #: monotonic time the last reload ended
        self._refill: Optional[asyncio.Task[None]] = None
        self._claiming = asyncio.Lock()
        self.refusal: Refusal = "off"  #: how far the queue accounts' puts are refused (broker/storage.py)

    # -- start-up -----------------------------------------------------------------------------

    async def start_broker(self) -> None:
        """Start the broker from the last good configuration's accounts (rendered afresh for
        this run's ports and keys), so queues work before the state store is even read."""
        try:
            previous = accounts_in_config(self.supervisor.config_path.read_text())
        except OSError:
            previous = {}
        text = render(replace(self.base, accounts=tuple(previous.values())))
        await self.supervisor.start(text)
        self._loaded_text = text
        self.applied = frozenset(previous)
        self._applied_bytes = {entry.id: entry.max_bytes for entry in previous.values()}

    async def attach(self, store: Store, conn: BrokerConnection) -> None:
        """Load the account records, clean up what an interrupted run left behind, and bring the
        broker in step with the records."""
        self.store, self.conn = store, conn
        self._records = {key: (record, revision) for key, record, revision in await store.accounts.items()}
        self.check_master_key()
        owners = {record.id for _, record, _ in await store.queues.items()}
        for record, _ in list(self._records.values()):
            if record.owner is not None and record.id not in owners:
                log.warning("account %s was claimed by a queue that does not exist; removing it", record.id)
                await self._delete_stream(record.id)
                await store.accounts.delete(record.id)
                del self._records[record.id]
        for orphan in self.applied - set(self._records):
            log.warning("account %s is in the broker but in no record; removing it", orphan)
            await self._delete_stream(orphan)
        await self.sync()
        self._remove_store_dirs(keep=set(self._records))
        # the pool is filled by the caller once its subscriptions are made (``refill``): a reload
        # that adds accounts while a subscription of the control account is being matched to the
        # queue accounts' stream imports crashed nats-server 2.15.1 (nil Sublist in addShadowSub)

    # -- the broker configuration -------------------------------------------------------------

    def entries(self) -> tuple[AccountEntry, ...]:
        return tuple(AccountEntry(r.id, r.password_hash, account_bytes(r))
                     for r, _ in sorted(self._records.values(), key=lambda x: x[0].id))

    async def sync(self) -> None:
        """Make the running broker's configuration match the records. Coalesced: returns once a
        reload that started after this call has finished."""
        self._requested += 1
        ticket = self._requested
        async with self._lock:
            if self._done >= ticket:
                return
            gap = self._last_reload + RELOAD_GAP - time.monotonic()
            if gap > 0:
                await asyncio.sleep(gap)  # let more changes join this reload
            target = self._requested
            entries = self.entries()
            text = await self._render(entries)
            rewritten = await self.supervisor.write_config(text)  # True: the file had been changed
            if rewritten or text != self._loaded_text:
                started = time.perf_counter()
                assert self.conn is not None
                try:
                    await self.conn.reload()
                except Exception:
                    if self.metrics is not None:
                        self.metrics.reload_errors.inc()
                    raise
                finally:
                    self._last_reload = time.monotonic()
                elapsed = time.perf_counter() - started
                self.reload_seconds += elapsed
                self.reloads += 1
                if self.metrics is not None:
                    self.metrics.reloads.inc()
                    self.metrics.reload_seconds.observe(elapsed)
                self._loaded_text = text
            self.applied = frozenset(e.id for e in entries)
            self._applied_bytes = {e.id: e.max_bytes for e in entries}
            self._done = target

    async def _render(self, entries: tuple[AccountEntry, ...]) -> str:
        # ~0.15 s at 1000 accounts: rendered in a thread so the API and reconciles go on
        return await asyncio.to_thread(render, replace(self.base, accounts=entries, refusal=self.refusal))

    async def set_frozen(self, frozen: bool) -> None:
        """Refuse (``frozen``) or take the queue accounts' puts (broker/storage.py): the running
        broker gets it in two reloads, "ready" between (broker/config.py ``queue_account``)."""
        steps: tuple[Refusal, Refusal] = ("ready", "frozen" if frozen else "off")
        for step in steps:
            self.refusal = step
            await self.sync()

    async def restart_broker(self) -> None:
        """Restart the broker from the configuration, thawed (broker/storage.py: the only way to
        clear its store's write errors). Under the reload lock, so that no reload is sent to the
        broker while it stops (it would be lost, and hold the lock until it timed out)."""
        async with self._lock:
            self.refusal = "off"
            text = await self._render(self.entries())
            await self.supervisor.write_config(text)
            self._loaded_text = text  # what the restarted broker runs
            await self.supervisor.restart()

    def broker_restarted(self) -> None:
        """The supervisor restarted the broker from the file on disk: that file is what runs."""
        with contextlib.suppress(OSError):
            self._loaded_text = self.supervisor.config_path.read_text()

    async def ensure_applied(self, account_id: str) -> None:
        """Return once the running broker has the account as its record says (with its limit)."""
        record = self.get(account_id)
        if account_id not in self.applied or (
                record is not None and self._applied_bytes.get(account_id) != account_bytes(record)):
            await self.sync()

    # -- storage reservations -------------------------------------------------------------------

    def reserved(self, excluding: Optional[str] = None) -> int:
        """Bytes of the broker's store reserved: the control state's and every account's limit."""
        return control_reserve(self.base.max_file_store) + sum(
            account_bytes(r) for r, _ in self._records.values() if r.id != excluding)

    def check_room(self, max_bytes: int, account_id: Optional[str] = None, what: str = "The queue") -> None:
        """StorageFull unless ``max_bytes`` fits in the store beside every other reservation
        (``account_id``: the account whose own limit it would replace)."""
        capacity = self.base.max_file_store
        if not capacity:
            return
        taken = self.reserved(excluding=account_id)
        if taken + max_bytes > capacity:
            raise StorageFull(
                f"{what} needs max_bytes {max_bytes}, but only {max(capacity - taken, 0)} bytes of the broker's store "
                f"(ENCLAVE_MAX_FILE_STORE, {capacity} bytes) are not reserved by other queues and the control state; "
                "lower max_bytes, delete a queue, or give the broker a larger store."
            )

    async def reserve(self, account_id: str, max_bytes: int) -> bool:
        """Set the account's storage limit (StorageFull if it does not fit); True if it changed.
        The broker gets it with the next ``sync``."""
        assert self.store is not None
        record, revision = self._records[account_id]
        if account_bytes(record) == max_bytes:
            return False
        self.check_room(max_bytes, account_id)
        changed = record.model_copy(update={"max_bytes": max_bytes})
        self._records[account_id] = (changed, await self.store.accounts.update(account_id, changed, revision))
        return True

    # -- records --------------------------------------------------------------------------------

    def get(self, account_id: str) -> Optional[AccountRecord]:
        found = self._records.get(account_id)
        return found[0] if found else None

    def password(self, account_id: str) -> str:
        """The app user's password, unsealed."""
        record = self.get(account_id)
        if record is None:
            raise EnclaveError(f"Account {account_id} does not exist.")
        return self.master.unseal(record.sealed_password, SEAL_PURPOSE, record.id).decode()

    def check_master_key(self) -> None:
        """Fail fast if the master key cannot open this data dir's sealed passwords (for example
        ENCLAVE_MASTER_KEY set to another key than the one the data dir was created with)."""
        for record, _ in self._records.values():
            try:
                self.master.unseal(record.sealed_password, SEAL_PURPOSE, record.id)
            except SealError:
                raise EnclaveError(
                    "The master key does not open this data directory's secrets: ENCLAVE_MASTER_KEY or "
                    "master.key is not the key the data directory was created with."
                ) from None
            return

    def pooled(self) -> list[AccountRecord]:
        return [r for r, _ in self._records.values() if r.owner is None]

    async def _new_record(self, owner: Optional[str], max_bytes: Optional[int] = None) -> AccountRecord:
        assert self.store is not None
        account_id = new_account_id()
        password = generate_password()
        record = AccountRecord(
            id=account_id,
            password_hash=await asyncio.to_thread(hash_password, password),
            sealed_password=self.master.seal(password.encode(), SEAL_PURPOSE, account_id),
            owner=owner,
            max_bytes=max_bytes,
        )
        revision = await self.store.accounts.create(account_id, record)
        self._records[account_id] = (record, revision)
        return record

    async def claim(self, owner: str, max_bytes: int = DEFAULT_ACCOUNT_BYTES) -> AccountRecord:
        """An account for the queue ``owner`` that may store ``max_bytes``: a spare one the broker
        already runs if there is one (with that limit, no reload), else a new one (whose first use
        then waits for a reload). StorageFull if ``max_bytes`` does not fit in the store."""
        assert self.store is not None
        async with self._claiming:
            spare = sorted(self.pooled(), key=lambda r: (r.id not in self.applied or account_bytes(r) != max_bytes,
                                                         r.created_at))
            self.check_room(max_bytes, spare[0].id if spare else None, f"Queue '{owner.split('.', 1)[-1]}'")
            if spare:
                record, revision = self._records[spare[0].id]
                claimed = record.model_copy(update={"owner": owner, "max_bytes": max_bytes})
                self._records[record.id] = (claimed, await self.store.accounts.update(record.id, claimed, revision))
            else:
                claimed = await self._new_record(owner, max_bytes)
        self.refill()
        return claimed

    async def release(self, account_id: str) -> None:
        """Give a claimed account that was never used back to the pool."""
        assert self.store is not None
        record, revision = self._records[account_id]
        spare = record.model_copy(update={"owner": None})
        self._records[account_id] = (spare, await self.store.accounts.update(account_id, spare, revision))

    async def remove(self, account_id: str) -> None:
        """Delete an account: its record and sealed password, then the account and user from the
        broker (which cuts the user's connections), then its directory in the store."""
        assert self.store is not None
        await self.store.accounts.delete(account_id)
        self._records.pop(account_id, None)
        await self.sync()
        self._remove_store_dirs(keep=set(self._records))

    def spare_room(self) -> bool:
        """Whether one more spare account fits: in the store beside every reservation, and within
        SPARE_SHARE of it with the other spares."""
        capacity = self.base.max_file_store
        if not capacity:
            return True
        spares = sum(account_bytes(r) for r in self.pooled())
        if spares + DEFAULT_ACCOUNT_BYTES > capacity * SPARE_SHARE:
            return False
        try:
            self.check_room(DEFAULT_ACCOUNT_BYTES, what="A spare account")
        except StorageFull:
            return False
        return True

    def refill(self) -> None:
        """Top the pool up in the background (one reload for the lot)."""
        if self._refill is None or self._refill.done():
            self._refill = asyncio.create_task(self._refill_pool(), name="account-pool")
            self._refill.add_done_callback(log_failure)  # nothing it raises goes unseen

    async def _refill_pool(self) -> None:
        """Until the pool is full of accounts the broker runs: claims made while a refill reloads
        are topped up by the next round of the same task. A round that fails (the broker down, its
        disk full) is tried again after a wait that grows, so the pool never stays empty unseen."""
        delay = REFILL_RETRY[0]
        while True:
            try:
                while len(self.pooled()) < self.pool_size and self.spare_room():
                    await self._new_record(owner=None)
                if all(r.id in self.applied for r in self.pooled()):
                    return
                await self.sync()
                delay = REFILL_RETRY[0]
            except asyncio.CancelledError:
                raise
            except (EnclaveError, nats.errors.Error, OSError, TimeoutError) as exc:
                log.warning("could not refill the account pool (trying again in %.0f s): %s", delay, exc)
            except Exception:
                log.exception("could not refill the account pool (trying again in %.0f s)", delay)
            else:
                continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, REFILL_RETRY[1])

    async def stop(self) -> None:
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill

    # -- clean-up -------------------------------------------------------------------------------

    async def _delete_stream(self, account_id: str) -> None:
        """Delete an account's stream (its files go with it), if the broker still has it."""
        if account_id not in self.applied or self.conn is None:
            return
        with contextlib.suppress(nats.js.errors.NotFoundError, nats.errors.NoRespondersError):
            await self.conn.queue_js(account_id).delete_stream(stream_name(account_id))

    def _remove_store_dirs(self, keep: set[str]) -> None:
        """Remove JetStream directories of accounts the broker no longer has (streams are deleted
        through the API first; this clears what remains, such as empty folders)."""
        root = Path(self.base.store_dir) / "jetstream"
        if not root.is_dir():
            return
        for path in root.iterdir():
            if path.is_dir() and path.name not in keep | PLATFORM_ACCOUNTS | {"$G", "$SYS"}:
                shutil.rmtree(path, ignore_errors=True)
