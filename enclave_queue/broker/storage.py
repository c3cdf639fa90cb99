"""The broker's store and the disk under it: what the control plane does when the disk fills.

What nats-server 2.15.1 does on a full filesystem (measured on a tmpfs filled up by another file;
tests/integration/test_disk_faults.py):

- a publish whose write fails with ENOSPC gets **no answer at all** (its PubAck is never sent;
  the server logs "Critical write error … no space left on device", if its log, often on the
  same disk, can still be written). The stream keeps the error: it answers no publish again,
  and its purges fail, until the server restarts, even after space is freed. KV buckets alike.
- JetStream stays enabled; VARZ and JSZ show nothing. Only HEALTHZ with details names each such
  stream (``JetStream stream 'A > S' write error: write …/1.blk: no space left on device``).
- reads, receives and acks go on; a restart with room on the disk clears the errors, and every
  acknowledged message is still there. So is every message acked meanwhile: the consumer moved
  past it, but its delete from the work-queue stream was never written (``drop_acked`` removes
  those after the guard's restart).

So the control plane keeps watch itself (``StorageGuard``, every POLL_SECONDS): the free space of
the store's filesystem (statvfs) and the broker's HEALTHZ. When the disk is short (less free than
``headroom``) or a stream reports a write error, the broker configuration is reloaded *frozen*
(broker/config.py ``queue_account``): every queue subject is mapped to ``refused.<id>.…``, which
this guard answers with the refusal the broker gives when its store is out of room
(``insufficient resources``, err_code 10023; errors.publish_refused makes it ``StorageFull``). A
put so fails at once, saying why, instead of timing out, and no queue write takes the room the
control state needs. Reads, receives and deletes go on, so workers can drain the queues.

Once the disk has room again (twice the headroom), the guard restarts the broker if a stream
had reported a write error (nothing else clears it), else reloads it thawed. To be able to write
the frozen configuration on a disk with no byte left, it keeps a reserve file of RESERVE_BYTES in
the broker directory, deleted to make that room and written again when there is room.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from nats.aio.msg import Msg

from ..names import REFUSED_ROOT, stream_name
from .connection import BrokerConnection
from .tasks import keep_running, log_failure, stop_tasks

log = logging.getLogger("enclave.storage")

POLL_SECONDS = 0.5  #: between two looks at the disk
HEALTHZ_EVERY = 4  #: polls between two HEALTHZ reads while the disk has room (every poll when it is short)
HEALTHZ_TIMEOUT = 2.0  #: seconds
RESTART_BACKOFF = (1.0, 60.0)  #: seconds between restarts of a broker whose store keeps failing with room on the disk
RESERVE_FILE = "reserve"  #: in the broker directory
RESERVE_BYTES = 4 << 20  #: the reserve file: room to write the frozen configuration on a full disk
MIN_HEADROOM, MAX_HEADROOM = 4 << 20, 64 << 20  #: bytes: the bounds of ``headroom``
START_ROOM = 16 << 20  #: bytes free the data dir's filesystem needs for ``enclave up`` to start
#: the broker's answer to a publish when its store is out of room (JetStream's JSInsufficientResourcesErr);
#: the control plane gives it for the broker while frozen
INSUFFICIENT_RESOURCES = {"code": 503, "err_code": 10023, "description": "insufficient resources"}
_MIB = 1 << 20


def headroom(max_file_store: int, disk_bytes: Optional[int] = None) -> int:
    """Bytes of free disk below which puts are refused: 1/64 of the store, 4 to 64 MiB, and at most
    1/16 of the disk (a store configured larger than its disk, which may be overcommitted, must
    still leave a disk that is emptied free enough to take puts again: twice the headroom). What
    is left is for the control state (its KV records, statuses, notes) and for deletes."""
    by_store = min(max(max_file_store // 64, MIN_HEADROOM), MAX_HEADROOM)
    return by_store if disk_bytes is None else min(by_store, max(disk_bytes // 16, MIN_HEADROOM))


def disk_bytes(path: Path) -> int:
    """The size of the filesystem of ``path`` (or of its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    stat = os.statvfs(path)
    return stat.f_blocks * stat.f_frsize


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged process may still write on the filesystem of ``path`` (or of its
    nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def write_errors(health: dict[str, Any]) -> tuple[str, ...]:
    """The store faults in a HEALTHZ answer (``BrokerConnection.healthz``): each stream whose
    store failed to write, and JetStream disabled (what nats-server does on some write failures).
    Other findings (a stream not recovered at start) are not the disk's and a restart does not help."""
    found = []
    for error in health.get("errors") or ():
        kind, text = str(error.get("type", "")).upper(), str(error.get("error", ""))
        # a cluster node cut off from its peers says so as a JETSTREAM error too: that is no disk's
        # fault, and freezing every queue for it left puts refused as "disk full" for good
        meta = any(words in text.lower() for words in ("meta leader", "not current", "no leader", "leaderless"))
        if (kind == "STREAM" and "write error" in text) or (kind == "JETSTREAM" and not meta):
            found.append(text)
    return tuple(found)


#: the stream a HEALTHZ write error names: ``JetStream stream '<account> > <stream>' write error: …``
_ERROR_STREAM = re.compile(r"stream '[^']* > ([^']+)'")
_QUEUE_STREAM = re.compile(r"Q[A-Z2-7]{16}")  #: ``stream_name`` of a queue id (``new_account_id``)


def queues_of(errors: tuple[str, ...]) -> Optional[set[str]]:
    """The ids of the queues whose streams ``write_errors`` names; None when one of the errors is
    not a stream's (JetStream's own: any stream may have been hit)."""
    found: set[str] = set()
    for error in errors:
        match = _ERROR_STREAM.search(error)
        if match is None:
            return None
        if _QUEUE_STREAM.fullmatch(match.group(1)):
            found.add(match.group(1).lower())
    return found


async def drop_acked(conn: BrokerConnection, queue_id: str) -> int:
    """Purge the messages of a queue's stream that its consumers acked and the stream kept: those at
    or below a consumer's ack floor, on that consumer's subjects. A work-queue stream deletes a
    message as it is acked, but an ack taken while the stream held a write error (a full disk)
    moves the consumer's floor and the delete is never written: after the restart that clears
    the error the message stays for good, never delivered again (the consumer is past it), shown
    as delayed, in the queue's bytes, and out of reach of a clear (nats-server 2.15.1). Everything
    at or below the floor was acked (it stops before a message out of receives, which the mover
    still has to move), so only those go. How many went."""
    body = await conn.account_jsz(queue_id)
    stream = next((s for s in body.get("stream_detail") or [] if s.get("name") == stream_name(queue_id)), None)
    if stream is None:
        return 0
    first = int((stream.get("state") or {}).get("first_seq") or 0)
    purged = 0
    for consumer in stream.get("consumer_detail") or []:
        floor = int((consumer.get("ack_floor") or {}).get("stream_seq") or 0)
        config = consumer.get("config") or {}
        subjects = config.get("filter_subjects") or ([config["filter_subject"]] if config.get("filter_subject") else [])
        if not floor or floor < first or not subjects:
            continue
        for subject in subjects:
            answer = await conn.queue_request(queue_id, f"STREAM.PURGE.{stream_name(queue_id)}",
                                              json.dumps({"filter": subject, "seq": floor + 1}).encode())
            if "error" in answer:
                raise RuntimeError(f"the broker refused the purge: {answer['error'].get('description')}")
            purged += int(answer.get("purged", 0))
    return purged


@dataclass(frozen=True)
class StoreHealth:
    """What the guard last saw."""

    free_bytes: int
    headroom: int  #: free bytes below which puts are refused
    resume: int  #: free bytes from which puts are taken again
    short: bool = False  #: less free than the headroom (and not yet ``resume`` again)
    write_errors: tuple[str, ...] = ()  #: the broker's own reports of a store that failed to write
    frozen: bool = False  #: the broker runs the frozen configuration: puts are refused

    @property
    def ok(self) -> bool:
        return not (self.short or self.write_errors or self.frozen)

    @property
    def problem(self) -> Optional[str]:
        """One sentence for health checks and queue statuses, or None when the store is fine."""
        if self.short:
            return (f"the broker's disk is full: {self.free_bytes / _MIB:.1f} MiB free; puts are refused (StorageFull) "
                    f"until {self.resume // _MIB} MiB are free again (the last {self.headroom // _MIB} MiB are kept "
                    "for the control state)")
        if self.write_errors:
            return (f"the broker's store failed to write ({self.write_errors[0]}); puts are refused "
                    "(StorageFull) until the disk has room and the broker is restarted")
        if self.frozen:
            return "the broker's store is recovering from a full disk; puts are refused (StorageFull) for a moment"
        return None


class Reserve:
    """A file of zeros that only holds room: deleted when the frozen configuration must be
    written on a full disk, written again once there is room."""

    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size

    @property
    def present(self) -> bool:
        try:
            return self.path.stat().st_size >= self.size
        except OSError:
            return False

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
            log.warning("removed the disk reserve %s to make room", self.path)

    def restore(self) -> bool:
        """Write the file (blocking: call it in a thread); False if the disk had no room for it."""
        chunk = bytes(1 << 20)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                for _ in range(0, self.size, len(chunk)):
                    os.write(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            with contextlib.suppress(OSError):
                self.path.unlink()
            return False
        return True


class StorageGuard:
    """Watches the disk and the broker's store; freezes and thaws the broker's queue accounts
    through ``set_frozen(frozen)``, and restarts the broker thawed through ``restart()`` (both the
    account manager's, which renders the configuration: controller/accounts.py); answers the puts
    of frozen accounts. ``on_change`` is called (no arguments) when ``health.ok`` flips."""

    def __init__(self, store_dir: Path, max_file_store: int, conn: BrokerConnection,
                 set_frozen: Callable[[bool], Awaitable[None]], restart: Callable[[], Awaitable[None]],
                 *, shared: bool = False) -> None:
        self.store_dir = store_dir
        self.conn = conn
        self.set_frozen = set_frozen
        self.restart = restart
        self.headroom = headroom(max_file_store, disk_bytes(store_dir))
        self.resume = 2 * self.headroom  #: free bytes at which puts are taken again
        self.reserve = Reserve(store_dir / RESERVE_FILE)
        self.health = StoreHealth(free_bytes(store_dir), self.headroom, self.resume)
        self.on_change: Optional[Callable[[], Awaitable[None]]] = None
        #: the ids of every queue: the write error of JetStream itself may have hit any of them
        self.queue_ids: Callable[[], set[str]] = set
        self.refused = 0  #: puts answered with the refusal since start
        self._frozen = False
        #: other nodes' guards act on the same accounts (a cluster): one that starts thaws them
        self.shared = shared
        self._next_restart = 0.0
        self._restart_delay = RESTART_BACKOFF[0]
        self._polls = 0
        self._task: Optional[asyncio.Task[None]] = None
        self._sub: Any = None

    async def start(self) -> None:
        """Answer frozen accounts' puts, look once (a start on a short disk freezes at once), then keep watch."""
        self._sub = await self.conn.control.subscribe(f"{REFUSED_ROOT}.*.>", cb=self._refuse)
        await self.check()
        if self.shared and not self._frozen:
            # the accounts as the broker holds them may be frozen though this guard never froze them:
            # by the guard of a node that lost the lease in the middle of a freeze (or before its
            # thaw). Thawed here, each account whose claims are not as they should be (alone, the
            # start's own push of every account did that already)
            try:
                await self.set_frozen(False)
            except Exception as exc:  # the next thaw or freeze pushes them all again
                log.warning("could not make sure the queue accounts are thawed: %s", exc)
        self._task = keep_running(self._watch, "storage-guard")

    async def stop(self) -> None:
        await stop_tasks([self._task])
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            await self.check()

    async def _refuse(self, msg: Msg) -> None:
        """A frozen account's put: answer as the broker does when its store has no room."""
        if not msg.reply:
            return
        self.refused += 1
        stream = stream_name(msg.subject.split(".", 2)[1])
        with contextlib.suppress(Exception):  # the client gave up, or the connection is reconnecting
            await msg.respond(json.dumps({"stream": stream, "error": INSUFFICIENT_RESOURCES}).encode())

    async def check(self) -> StoreHealth:
        """Look at the disk and the broker once, and act: freeze, thaw, restart, keep the reserve."""
        before = self.health
        free = free_bytes(self.store_dir)
        short = free < (self.resume if before.short else self.headroom)
        errors = before.write_errors
        if short or errors or self._polls % HEALTHZ_EVERY == 0:
            errors = await self._read_errors(errors)
        self._polls += 1
        if short:  # write errors now are the disk's: the restart once it has room is meant to clear them
            self._restart_delay, self._next_restart = RESTART_BACKOFF[0], 0.0
        self._seen(StoreHealth(free, self.headroom, self.resume, short, errors, self._frozen))
        if (short or errors) and not self._frozen:
            await self._freeze(free, short, errors)
        elif errors and not short and time.monotonic() >= self._next_restart:
            await self._restart(errors)
            errors = ()
        elif not (short or errors) and self._frozen:
            await self._thaw(free)
        if not self._frozen and not self.reserve.present and free >= self.resume + self.reserve.size \
                and await asyncio.to_thread(self.reserve.restore):
            free = free_bytes(self.store_dir)
        self._seen(StoreHealth(free, self.headroom, self.resume, short, errors, self._frozen))
        return self.health

    def _seen(self, health: StoreHealth) -> None:
        """Make ``health`` what readers see (before acting on it too: freezing takes two reloads)."""
        flipped = health.ok != self.health.ok
        self.health = health
        if flipped and self.on_change is not None:
            task = asyncio.create_task(self.on_change(), name="storage-changed")
            task.add_done_callback(log_failure)

    async def _read_errors(self, previous: tuple[str, ...]) -> tuple[str, ...]:
        try:
            return write_errors(await self.conn.healthz(HEALTHZ_TIMEOUT))
        except Exception as exc:  # down or restarting (the supervisor sees to that): as last seen
            log.debug("broker health not read: %s", exc)
            return previous

    async def _freeze(self, free: int, short: bool, errors: tuple[str, ...]) -> None:
        if short:
            log.error("the broker's disk has %.1f MiB free, less than %d MiB: refusing puts until space is freed",
                      free / _MIB, self.headroom // _MIB)
        else:
            log.error("the broker's store failed to write (%s): refusing puts until it is restarted", errors[0])
        if free < self.reserve.size:
            self.reserve.release()  # room for the configuration file
        try:
            await self.set_frozen(True)
        except Exception as exc:  # the next poll tries again
            log.error("could not freeze the broker's queue accounts: %s", exc)
            return
        self._frozen = True

    async def _thaw(self, free: int) -> None:
        try:
            await self.set_frozen(False)
        except Exception as exc:
            log.error("could not thaw the broker's queue accounts: %s", exc)
            return
        self._frozen = False
        log.warning("the broker's disk has room again (%.1f MiB free): taking puts", free / _MIB)

    async def _restart(self, errors: tuple[str, ...]) -> None:
        """The disk has room but the broker's store keeps its write errors until it restarts: restart
        it, from the thawed configuration. A failure that is not the disk's (none since it was
        last short) comes back after the restart, and is met again after a wait that doubles,
        RESTART_BACKOFF."""
        self._next_restart = time.monotonic() + self._restart_delay
        self._restart_delay = min(self._restart_delay * 2, RESTART_BACKOFF[1])
        log.warning("restarting the broker to clear its store's write errors (%s)", errors[0])
        try:
            await self.restart()
            self._frozen = False
        except Exception as exc:
            log.error("the restart to clear the store's write errors failed: %s", exc)
            return
        log.warning("the broker restarted with room on its disk (%.1f MiB free): taking puts",
                    free_bytes(self.store_dir) / _MIB)
        await self._drop_acked(errors)

    async def _drop_acked(self, errors: tuple[str, ...]) -> None:
        """After the restart: the messages acked while their stream could not write (``drop_acked``)."""
        named = queues_of(errors)
        for queue_id in sorted(self.queue_ids() if named is None else named):
            try:
                if dropped := await drop_acked(self.conn, queue_id):
                    log.warning("queue %s: %d message(s) acked while its store could not write removed after "
                                "the restart", queue_id, dropped)
            except Exception as exc:  # its stream is gone, say; the others still
                log.warning("queue %s: acked messages left by the store's write error not checked: %s", queue_id, exc)
