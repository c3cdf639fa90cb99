"""Queue accounts on the broker: their records, their claims pushed to the broker, password
versions and their rotation, and removal.

Every queue owns one broker account (a JWT the operator signs, broker/claims.py), named by the
queue's id; its apps log in with a username and password that the auth callout checks against
the account's record (controller/callout.py). A change reaches the broker as the account's new
claims (``$SYS.REQ.CLAIMS.UPDATE``, about 1 ms): no configuration file changes and nothing is
reloaded, so a create costs the same with 3 queues or 3,000, and no spare accounts are kept.

A password rotation makes a new version and keeps the old one live for a grace period: both log
in, each signed by its version's signing key; when the grace ends, the old key leaves the
account's claims and the broker closes every connection it signed.

The records (with each password's bcrypt hash and the sealed current password) live in the state
store; this class keeps them in memory too, as the only writer of that bucket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hmac
import json
import logging
import re
import secrets
import shutil
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Optional

import bcrypt
import nats.errors
import nats.js.errors

from ..auth import jwt
from ..auth.keys import OperatorKeys
from ..auth.secrets import MasterKey, SealError, generate_password, hash_password, write_private
from ..broker.claims import queue_account, restored_account
from ..broker.config import DEFAULT_ACCOUNT_BYTES, BrokerConfig, control_reserve, render
from ..broker.connection import BrokerConnection
from ..broker.supervisor import Supervisor
from ..broker.tasks import log_failure, stop_tasks
from ..broker.upgrade import config_mode_accounts, upgrade_store
from ..errors import Conflict, EnclaveError, StorageFull
from ..metrics.instruments import ControlMetrics
from ..names import CONTROL_ACCOUNT, stream_name
from ..state.kv import Store
from ..state.records import AccountRecord, EarlierPassword
from .logins import Logins

log = logging.getLogger("enclave.controller")

CHANGE_TRIES = 3  #: writes of one change of an account's record, each after reading what another node wrote
ACCOUNT_KEY = re.compile(r"A[A-Z2-7]{55}")  #: an account's public nkey: the name of its directory in the store
SEAL_PURPOSE = "queue-password"
WRONG_KEY = ("The master key does not open this data directory's secrets: ENCLAVE_MASTER_KEY or master.key is "
             "not the key the data directory was created with.")
PUSH_CONCURRENCY = 32  #: account claims pushed at once when many change (start, freeze, thaw)
REMOVE_WAIT = 15.0  #: seconds the clean-up gives one leftover account's removal from the broker
#: passwords older than the previous one kept in their grace: rotations in a row (a plan applied
#: twice) keep each one's promise; past this many, the oldest grace ends early
MAX_EARLIER = 3


def new_account_id() -> str:
    """A stable unique id: ``q`` and 16 base32 characters (80 random bits)."""
    return "q" + base64.b32encode(secrets.token_bytes(10)).decode().lower()


def account_bytes(record: AccountRecord) -> int:
    """The storage limit of an account (an older record without one has the default)."""
    return record.max_bytes if record.max_bytes is not None else DEFAULT_ACCOUNT_BYTES


def in_grace(record: AccountRecord, now: Optional[datetime] = None) -> bool:
    """Whether the record's previous password still logs in."""
    return record.previous_hash is not None and record.previous_until is not None and \
        record.previous_until > (now or datetime.now(UTC))


def graces(record: AccountRecord, now: Optional[datetime] = None) -> list[EarlierPassword]:
    """The passwords before the current one that still log in: the previous one (in its grace)
    and the earlier ones whose graces have not ended, newest first."""
    now = now or datetime.now(UTC)
    live = [p for p in record.earlier if p.until > now]
    if record.previous_hash is not None and record.previous_until is not None and record.previous_until > now:
        live.insert(0, EarlierPassword(version=record.password_version - 1, hash=record.previous_hash,
                                       until=record.previous_until))
    return live


async def _grace_ended(record: AccountRecord, *, now: datetime) -> AccountRecord:
    """``record`` without the passwords whose grace ended by ``now``."""
    gone = not in_grace(record, now)
    return record.model_copy(update={
        "previous_hash": None if gone else record.previous_hash,
        "previous_until": None if gone else record.previous_until,
        "earlier": tuple(p for p in record.earlier if p.until > now)})


def grace_ends(record: AccountRecord) -> list[datetime]:
    """When each grace the record holds ends (ended ones too, until they are forgotten)."""
    return ([record.previous_until] if record.previous_until is not None else []) + [p.until for p in record.earlier]


class Accounts:
    def __init__(self, base: BrokerConfig, supervisor: Supervisor, master: MasterKey,
                 metrics: Optional[ControlMetrics] = None) -> None:
        self.base = base
        self.metrics = metrics
        self.supervisor = supervisor
        self.master = master
        self.keys = OperatorKeys(master)
        self.store: Optional[Store] = None
        self.conn: Optional[BrokerConnection] = None
        self._pushed: dict[str, tuple[int, bool, tuple[int, ...]]] = {}  #: what each was pushed with
        self._records: dict[str, tuple[AccountRecord, int]] = {}
        self._changing: dict[str, asyncio.Lock] = {}  #: per account: its record's read-change-write (``_change``)
        self.logins = Logins()  #: what password checks may cost
        self._claiming = asyncio.Lock()
        self._graces: Optional[asyncio.Task[None]] = None
        self._watcher: Optional[asyncio.Task[None]] = None
        self._readded: set[str] = set()  #: accounts the last sync gave back to the broker
        self._grace_changed = asyncio.Event()
        self.frozen = False  #: the queue accounts' puts are refused (broker/storage.py)

    # -- start-up -----------------------------------------------------------------------------

    async def start_broker(self) -> None:
        """Start the broker in operator mode; a store written in configuration-file mode is
        upgraded in place first (broker/upgrade.py). A master key that is not the data dir's is
        refused before anything is renamed or started: every key of the store derives from it."""
        self._check_store_key()
        await asyncio.to_thread(upgrade_store, Path(self.base.store_dir), self.keys)
        await asyncio.to_thread(self._restore_lost_claims)
        await self.supervisor.start(render(self.base, self.keys))

    def _restore_lost_claims(self) -> None:
        """Stand-in claims (``restored_account``) for each queue account that has streams in the
        store and no JWT in the resolver directory."""
        root, resolver = Path(self.base.store_dir) / "jetstream", Path(self.base.resolver_dir)
        if not root.is_dir():
            return
        platform = {self.keys.public(self.keys.platform_account(role)) for role in ("system", "control", "auth")}
        for entry in root.iterdir():
            key = entry.name
            # (a ``.jwt.deleted``: the account was deleted, and its directory is a leftover the
            # clean-up removes; it is not brought back)
            if (ACCOUNT_KEY.fullmatch(key) and key not in platform and entry.is_dir()
                    and not (resolver / f"{key}.jwt").exists() and not (resolver / f"{key}.jwt.deleted").exists()):
                resolver.mkdir(mode=0o700, parents=True, exist_ok=True)
                write_private(resolver / f"{key}.jwt", jwt.encode(restored_account(key), self.keys.operator))
                log.warning("the broker's claims of account %s were missing from %s: stand-in claims written "
                            "(its own are given once the broker is up)", key, resolver)

    def _check_store_key(self) -> None:
        store = Path(self.base.store_dir)
        control = self.keys.public(self.keys.platform_account("control"))
        if config_mode_accounts(store):  # written before operator mode: its config names our control user
            try:
                old = json.loads(self.supervisor.config_path.read_text(encoding="utf-8"))
                users = old["accounts"][CONTROL_ACCOUNT]["users"]
            except (OSError, ValueError, KeyError, TypeError):
                return
            if all(user.get("nkey") != self.master.nkey("control").public for user in users):
                raise EnclaveError(WRONG_KEY)
            return
        root = store / "jetstream"
        accounts = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
        if accounts and control not in accounts:
            raise EnclaveError(WRONG_KEY)

    async def attach(self, store: Store, conn: BrokerConnection, *, watch: bool = False) -> None:
        """Load the account records, clean up what an interrupted run (or the spare pool of a
        configuration-file version) left behind, and give the broker every account's claims.
        ``watch`` (a cluster): the records other nodes write are followed, and the clean-up is
        left to the node that holds the control-plane lease (``clean_up``)."""
        self.store, self.conn = store, conn
        self._records = {key: (record, revision) for key, record, revision in await store.accounts.items()}
        self.check_master_key()
        if watch:
            self._watcher = asyncio.create_task(self._follow_records(), name="account-records")
            self._watcher.add_done_callback(log_failure)
        else:
            await self.clean_up()
        await self._push_all()
        self._remove_store_dirs()

    async def clean_up(self, grace: float = 0.0) -> None:
        """Remove the accounts no queue owns (an interrupted create left them: claimed, and the
        queue's record never written), claimed at least ``grace`` seconds ago (on a cluster another
        node's create may be between its claim and its record now). One whose stream holds
        messages is kept, with a warning: no create gets as far as storing one without its queue
        record, so the record was lost
        (a state bucket damaged or restored from an older copy), and the messages are an
        operator's to recover, not this process's to delete."""
        assert self.store is not None
        store = self.store
        owners = {record.id for _, record, _ in await store.queues.items()}
        claimed_before = datetime.now(UTC) - timedelta(seconds=grace)
        for record, _ in list(self._records.values()):
            if (record.owner is None or record.id not in owners) and record.created_at <= claimed_before:
                if record.owner is not None:  # a spare of the old pool never had a stream
                    held = await self._stream_messages(record.id)
                    if held != 0:
                        log.warning("account %s was claimed by queue %s, which has no record; kept, as its stream "
                                    "holds %s message(s) (restore the queue records, or delete the account's "
                                    "directory by hand)", record.id, record.owner,
                                    "some" if held is None else held)
                        continue
                    log.warning("account %s was claimed by a queue that does not exist; removing it", record.id)
                    if self.conn is not None:  # from the broker too: its claims had stayed there for good
                        try:
                            await asyncio.wait_for(self.remove(record.id), REMOVE_WAIT)
                            continue
                        except (TimeoutError, nats.errors.Error, EnclaveError) as exc:
                            log.warning("account %s was not removed from the broker (%s); its record goes",
                                        record.id, exc)
                await store.accounts.delete(record.id)
                self._records.pop(record.id, None)

    async def _stream_messages(self, account_id: str) -> Optional[int]:
        """How many messages an account's stream holds: 0 without a stream, None if unknown."""
        if self.conn is None:
            return 0
        try:
            info = await self.conn.queue_js(account_id).stream_info(stream_name(account_id))
        except nats.js.errors.NotFoundError:
            return 0
        except (TimeoutError, nats.errors.Error, EnclaveError):
            return None
        return int(info.state.messages)

    def start_graces(self) -> None:
        """End each rotation's grace on time from now on (the node that does the work that must
        happen once)."""
        if self._graces is None or self._graces.done():
            self._graces = asyncio.create_task(self._end_graces(), name="password-graces")
            self._graces.add_done_callback(log_failure)

    async def _follow_records(self) -> None:
        """Keep the records as other nodes of the cluster write them (creates, rotations, deletes):
        this node's callout and credentials read them."""
        assert self.store is not None
        accounts = self.store.accounts
        while True:
            try:
                # closed as the loop ends: a cancel during a get (not in the watch) would leave it open
                async with contextlib.aclosing(accounts.watch_keys()) as keys:
                    async for key in keys:
                        found = await accounts.get(key)
                        if found is None:
                            self._records.pop(key, None)
                            self._pushed.pop(key, None)
                        elif key not in self._records or self._records[key][1] < found[1]:
                            self._records[key] = found
                            self._grace_changed.set()
            except (nats.errors.Error, EnclaveError) as exc:
                log.warning("watch of the account records interrupted (%s); restarting it", exc)
                await asyncio.sleep(0.5)

    # -- the broker's claims ------------------------------------------------------------------

    @property
    def applied(self) -> frozenset[str]:
        """The account ids whose claims the broker has been given (the queues it runs)."""
        return frozenset(self._pushed)

    def _versions(self, record: AccountRecord) -> tuple[int, ...]:
        return (*sorted(p.version for p in graces(record)), record.password_version)

    def _claims(self, record: AccountRecord) -> dict[str, object]:
        signers = tuple(self.keys.public(self.keys.queue_signer(record.id, v)) for v in self._versions(record))
        control = self.keys.public(self.keys.platform_account("control"))
        return queue_account(record.id, self.keys.queue_account_public(record.id), control,
                             max_bytes=account_bytes(record), signing_keys=signers, frozen=self.frozen)

    def claims_of(self, record: AccountRecord) -> str:
        """The account's claims as the broker gets them, signed by the operator."""
        return jwt.encode(self._claims(record), self.keys.operator)

    def _held(self, record: AccountRecord) -> bool:
        """Whether the broker's resolver directory holds the account's claims as they are now
        (signed by our operator): pushing them again would change nothing."""
        path = Path(self.base.resolver_dir) / f"{self.keys.queue_account_public(record.id)}.jwt"
        try:
            held = jwt.decode(path.read_text().strip(), issuer_prefix="O")
        except (OSError, jwt.JWTError):
            return False
        want = self._claims(record)
        return held.get("iss") == self.keys.public(self.keys.operator) and \
            {key: held.get(key) for key in want} == want

    def _pushed_form(self, record: AccountRecord) -> tuple[int, bool, tuple[int, ...]]:
        return account_bytes(record), self.frozen, self._versions(record)

    async def push(self, record: AccountRecord) -> None:
        """Give the broker the account's claims as the record says (no reload)."""
        assert self.conn is not None
        await self.conn.push_account(self.claims_of(record))
        self._pushed[record.id] = self._pushed_form(record)
        if self.metrics is not None:
            self.metrics.account_pushes.inc()

    async def _push_all(self) -> None:
        """Give the broker every account's claims, but those its resolver holds as they are already
        (at a start, most of them: a restart with 3,000 queues pushed 3,000 JWTs before)."""
        gate = asyncio.Semaphore(PUSH_CONCURRENCY)

        async def one(record: AccountRecord) -> None:
            async with gate:
                await self.push(record)

        records = [record for record, _ in list(self._records.values())]
        held = await asyncio.to_thread(lambda: {record.id for record in records if self._held(record)})
        for record in records:
            if record.id in held:
                self._pushed[record.id] = self._pushed_form(record)
        await asyncio.gather(*(one(record) for record in records if record.id not in held))

    async def sync(self) -> None:
        """Repair drift: give the broker the claims of every account it does not list (an account
        JWT removed behind the control plane's back) or holds in another form."""
        assert self.conn is not None
        listed = set(await self.conn.list_accounts())
        # an account given back to the broker is given again at the next sync: nats-server 2.15
        # can take the first push of an account it deleted with no connections or subscriptions
        # allowed (logins refused "maximum account active connections exceeded" for ~13 s)
        again, self._readded = self._readded, set()
        for record, _ in list(self._records.values()):
            key = self.keys.queue_account_public(record.id)
            if key not in listed or record.id in again or self._pushed.get(record.id) != self._pushed_form(record):
                await self.push(record)
                if key not in listed:
                    self._readded.add(record.id)

    async def ensure_applied(self, account_id: str) -> None:
        """Return once the broker has the account as its record says (its limit, its passwords)."""
        record = self.get(account_id)
        if record is not None and self._pushed.get(account_id) != self._pushed_form(record):
            await self.push(record)

    async def set_frozen(self, frozen: bool) -> None:
        """Refuse (``frozen``) or take the queue accounts' puts (broker/storage.py): every account's
        claims map its queue subjects to the refusal, or stop mapping them."""
        self.frozen = frozen
        await self._push_all()

    async def restart_broker(self) -> None:
        """Restart the broker (broker/storage.py: the only way to clear its store's write errors),
        then give it every account thawed (the resolver kept the frozen claims)."""
        self.frozen = False
        await self.supervisor.restart()
        await self._push_all()

    # -- storage reservations -------------------------------------------------------------------

    def reserved(self, excluding: Optional[str] = None) -> int:
        """Bytes of the broker's store reserved: the control state's and every account's limit."""
        return control_reserve(self.base.max_file_store) + sum(
            account_bytes(r) for r, _ in self._records.values() if r.id != excluding)

    def check_room(self, max_bytes: int, account_id: Optional[str] = None, what: str = "The queue") -> None:
        """StorageFull unless ``max_bytes`` fits in the store beside every other reservation
        (``account_id``: the account whose own limit it would replace). The broker would take the
        claims and leave the account without JetStream, so the room is checked here first."""
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
        The broker gets it with the next ``ensure_applied``."""
        assert self.store is not None
        record, _ = self._records[account_id]
        if account_bytes(record) == max_bytes:
            return False
        self.check_room(max_bytes, account_id)

        async def limited(current: AccountRecord) -> AccountRecord:
            return current.model_copy(update={"max_bytes": max_bytes})

        await self._change(account_id, limited)
        return True

    # -- records --------------------------------------------------------------------------------

    async def fetch(self, account_id: str) -> Optional[AccountRecord]:
        """``get``, reading the state store when this node has not seen the record yet (on a
        cluster, one another node wrote a moment ago: the watch may not have brought it)."""
        if account_id not in self._records and self.store is not None:
            found = await self.store.accounts.get(account_id)
            if found is not None:
                self._records[account_id] = found
        return self.get(account_id)

    def get(self, account_id: str) -> Optional[AccountRecord]:
        found = self._records.get(account_id)
        return found[0] if found else None

    async def _save(self, record: AccountRecord, revision: int) -> AccountRecord:
        assert self.store is not None
        self._records[record.id] = (record, await self.store.accounts.update(record.id, record, revision))
        return record

    async def _change(self, account_id: str,
                      change: Callable[[AccountRecord], Awaitable[AccountRecord]]) -> AccountRecord:
        """Write ``change`` of the account's record as it is now: one change of an account at a time
        in this process (a rotation hashes between its read and its write, and a limit or a grace's
        end written meanwhile made it a 409 naming the account, or left a grace running on), and
        one another node wrote meanwhile is read and changed again (CHANGE_TRIES in all)."""
        assert self.store is not None
        async with self._changing.setdefault(account_id, asyncio.Lock()):
            tries = 1
            while True:
                record, revision = self._records[account_id]
                try:
                    return await self._save(await change(record), revision)
                except Conflict:
                    if tries == CHANGE_TRIES or (found := await self.store.accounts.get(account_id)) is None:
                        raise
                    self._records[account_id] = found
                    tries += 1

    def claimed(self) -> set[str]:
        """The ids of the accounts queues own (a queue's id is its account's)."""
        return {record.id for record, _ in self._records.values() if record.owner is not None}

    def password(self, account_id: str) -> str:
        """The app user's current password, unsealed."""
        record = self.get(account_id)
        if record is None:
            raise EnclaveError(f"Account {account_id} does not exist.")
        return self.password_of(record)

    def password_of(self, record: AccountRecord) -> str:
        """The current password of ``record``, unsealed."""
        return self.master.unseal(record.sealed_password, SEAL_PURPOSE, record.id).decode()

    def check_master_key(self) -> None:
        """Fail fast if the master key cannot open this data dir's sealed passwords (for example
        ENCLAVE_MASTER_KEY set to another key than the one the data dir was created with)."""
        for record, _ in self._records.values():
            try:
                self.master.unseal(record.sealed_password, SEAL_PURPOSE, record.id)
            except SealError:
                raise EnclaveError(WRONG_KEY) from None
            return

    async def verify(self, username: str, password: str) -> Optional[int]:
        """The password version ``password`` is for account ``username`` (the auth callout's
        question), or None: the current one, or an earlier one during its grace. On a cluster a
        record another node changed a moment ago (a create, a rotation) is read again before a no.
        What a login may cost is bounded (logins.py)."""
        if not self.logins.well_formed(username, password):
            return None
        version = await self._check_password(username, self.get(username), password)
        if version is None and self._watcher is not None and self.store is not None:
            found = await self.store.accounts.get(username)
            if found is not None and found != self._records.get(username):
                self._records[username] = found
                version = await self._check_password(username, found[0], password)
        return version

    async def _check_password(self, username: str, record: Optional[AccountRecord], password: str) -> Optional[int]:
        if record is None:
            return None
        candidates = [(record.password_version, record.password_hash), *((p.version, p.hash) for p in graces(record))]
        known = self.logins.known(username, password, [version for version, _ in candidates])
        if known is not None:
            return known
        # the current password is compared with its sealed copy (microseconds, no hash), before any
        # throttle: a stranger's flood of wrong passwords for a username (the queue's id, no secret)
        # kept its app's right password out, a new instance's or a rotation's
        if self._is_current(record, password):
            self.logins.checked(username, password, record.password_version)
            return record.password_version
        if self.logins.throttled(username):
            return None
        found = None
        for version, hashed in candidates:
            if await asyncio.to_thread(bcrypt.checkpw, password.encode(), hashed.encode()):
                found = version
                break
        self.logins.checked(username, password, found)
        return found

    def _is_current(self, record: AccountRecord, password: str) -> bool:
        try:
            current = self.master.unseal(record.sealed_password, SEAL_PURPOSE, record.id)
        except SealError:  # check_master_key refuses such a start; the hash check decides
            return False
        return hmac.compare_digest(current, password.encode())

    async def claim(self, owner: str, max_bytes: int = DEFAULT_ACCOUNT_BYTES) -> AccountRecord:
        """A new account for the queue ``owner`` that may store ``max_bytes``, with a new password,
        given to the broker at once. StorageFull if ``max_bytes`` does not fit in the store."""
        assert self.store is not None
        async with self._claiming:
            self.check_room(max_bytes, what=f"Queue '{owner.split('.', 1)[-1]}'")
            account_id = new_account_id()
            password = generate_password()
            record = AccountRecord(
                id=account_id,
                password_hash=await asyncio.to_thread(hash_password, password),
                sealed_password=self.master.seal(password.encode(), SEAL_PURPOSE, account_id),
                owner=owner,
                max_bytes=max_bytes,
            )
            self._records[account_id] = (record, await self.store.accounts.create(account_id, record))
        await self.push(record)
        return record

    async def release(self, account_id: str) -> None:
        """Remove an account claimed for a queue that was never made."""
        await self.remove(account_id)

    async def rotate(self, account_id: str, grace_seconds: int) -> AccountRecord:
        """A new password for the account; the current one keeps logging in for ``grace_seconds``
        (0: refused at once, and its connections closed, and so are those of every earlier
        password still in its grace: an emergency). Otherwise the earlier graces run on (the newest
        MAX_EARLIER of them). Returns the updated record."""
        async def rotation(record: AccountRecord) -> AccountRecord:
            password = generate_password()
            now = datetime.now(UTC)
            until = now + timedelta(seconds=grace_seconds)
            return record.model_copy(update={
                "password_version": record.password_version + 1,
                "password_hash": await asyncio.to_thread(hash_password, password),
                "sealed_password": self.master.seal(password.encode(), SEAL_PURPOSE, account_id),
                "previous_hash": record.password_hash if grace_seconds > 0 else None,
                "previous_until": until if grace_seconds > 0 else None,
                "earlier": tuple(graces(record, now)[:MAX_EARLIER]) if grace_seconds > 0 else (),
            })

        rotated = await self._change(account_id, rotation)
        await self.push(rotated)
        self._grace_changed.set()
        return rotated

    async def _end_graces(self) -> None:
        """End each rotation's grace on time: the old password is forgotten and its signing key
        leaves the account's claims (the broker closes the connections it signed). Ends with
        ``stop_graces``."""
        while True:
            now = datetime.now(UTC)
            ends = [end for r, _ in self._records.values() for end in grace_ends(r)]
            for record, _ in list(self._records.values()):
                if any(end <= now for end in grace_ends(record)):
                    try:
                        ended = await self._change(record.id, functools.partial(_grace_ended, now=now))
                        await self.ensure_applied(ended.id)  # pushed at the start already, if it ended meanwhile
                    except (EnclaveError, nats.errors.Error, OSError) as exc:
                        log.warning("could not end the password grace of %s yet: %s", record.id, exc)
            later = [end for end in ends if end > now]
            wait = min((end - now).total_seconds() for end in later) if later else 3600.0
            self._grace_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._grace_changed.wait(), max(wait, 0.05))

    async def remove(self, account_id: str) -> None:
        """Delete an account: its record and sealed password (its logins are refused from then
        on), its stream, then the account from the broker (which closes its connections), then
        its directory in the store."""
        assert self.store is not None and self.conn is not None
        await self._delete_stream(account_id)
        await self.store.accounts.delete(account_id)
        self._records.pop(account_id, None)
        self._pushed.pop(account_id, None)
        self._changing.pop(account_id, None)
        await self.conn.pool.forget(account_id)
        key = self.keys.queue_account_public(account_id)
        notice = jwt.encode({"sub": self.keys.public(self.keys.operator),
                             "nats": {"type": "generic", "version": jwt.VERSION, "accounts": [key]}},
                            self.keys.operator)
        await self.conn.delete_accounts(notice)
        self._remove_store_dirs()

    async def stop(self) -> None:
        """Stop ending graces (and following the records, if it did)."""
        await self.stop_graces()
        await stop_tasks([self._watcher])
        self._watcher = None

    async def stop_graces(self) -> None:
        await stop_tasks([self._graces])
        self._graces = None

    # -- clean-up -------------------------------------------------------------------------------

    async def _delete_stream(self, account_id: str) -> None:
        """Delete an account's stream (its files go with it), if the broker still has it."""
        if self.conn is None:
            return
        with contextlib.suppress(nats.js.errors.NotFoundError, nats.errors.NoRespondersError,
                                 nats.js.errors.ServiceUnavailableError):
            await self.conn.queue_js(account_id).delete_stream(stream_name(account_id))

    def _remove_store_dirs(self) -> None:
        """Remove JetStream directories of accounts the broker no longer has (streams are deleted
        through the API first; this clears what remains, such as empty folders)."""
        root = Path(self.base.store_dir) / "jetstream"
        if not root.is_dir():
            return
        keep = {self.keys.queue_account_public(account_id) for account_id in self._records}
        keep |= {self.keys.public(self.keys.platform_account(role)) for role in ("system", "control", "auth")}
        for path in root.iterdir():
            if path.is_dir() and path.name not in keep:
                try:
                    blocks = any(found.is_file() for found in path.rglob("*.blk"))
                except OSError:  # changing under the walk (a stream being deleted): looked at next time
                    continue
                if blocks:  # messages: not ours to delete
                    log.warning("JetStream directory %s belongs to no account Enclave knows, and holds message "
                                "blocks; kept (its account record was lost?). Delete it by hand if its queue is "
                                "gone for good.", path)
                    continue
                shutil.rmtree(path, ignore_errors=True)
