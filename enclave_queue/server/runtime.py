"""The running control plane (``Runtime``): every part of ``enclave up`` started in order, and
stopped in reverse.

Start order: the data dir's lock (one ``enclave up`` per data dir; a second one stops there,
having touched nothing); a check that its filesystem has room to start (else StorageFull, exit
9); a broker a killed predecessor left running is stopped; a check that the ports are free (those
three: preflight.py); the master key; the broker (from the last good configuration); the control
plane's connections; the state store; the accounts and their configuration; the storage guard
(broker/storage.py: a full disk refuses puts instead of wedging the broker); the admin token
(first start only); the error notes, the dead-letter mover, nak counter, reconciler and depth
sampler (controller/); the queue service (service.py) and the desk (desk/); then the HTTP API and
the console on 127.0.0.1 (app.py). ``Runtime.stop`` undoes it in reverse, the broker last, so
nothing is left running.

A broker that dies while the parts after it start (the supervisor restarts it) does not leave a
half-started control plane: those parts are stopped and started again, in order, on the restarted
broker, for up to START_PATIENCE seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import logging
import os
import signal
import socket
import time
from typing import Any, Optional

import nats.errors
import uvicorn

from ..api.guard import HEAD_READ_LIMIT
from ..api.problems import BROKER_ERRORS
from ..auth.provenance import Provenance
from ..auth.secrets import MasterKey, write_private
from ..auth.tokens import generate_token, token_digest
from ..broker.config import CONTROL_STREAM_BYTES, BrokerConfig, control_replicas, route_env, route_password
from ..broker.connection import BrokerConnection
from ..broker.liveness import Liveness
from ..broker.process import free_port
from ..broker.storage import StorageGuard
from ..broker.supervisor import Supervisor
from ..controller.accounts import Accounts
from ..controller.callout import Callout
from ..controller.errornotes import ErrorNotes
from ..controller.lease import Lease
from ..controller.mover import Mover
from ..controller.naks import NakCounter
from ..controller.reconciler import Reconciler
from ..controller.sampler import Sampler
from ..desk.deadlines import Deadlines
from ..desk.endpoint import Desk
from ..errors import BrokerUnavailable, Conflict, EnclaveError, SpecError
from ..metrics.collector import QueueMetrics
from ..metrics.instruments import ControlMetrics
from ..service import QueueService
from ..settings import ADMIN_TOKEN_FILE, RUNTIME_FILE, EnclaveSettings
from ..state.kv import Store
from ..state.queries import QueueIndex
from ..state.records import TokenRecord
from ..web.sessions import Sessions
from .app import create_app
from .connections import BoundedH11Protocol, raise_file_limit
from .preflight import DataDirLock, bind, check_ports, check_room, no_room

log = logging.getLogger("enclave")

START_PATIENCE = 30.0  #: seconds a start rides out a broker that dies under it
#: seconds an account claimed for no queue is left alone on a cluster: another node's create writes
#: its queue record within seconds of its claim
CLAIM_GRACE = 120.0
#: what a broker that died under the start raises from the parts that talk to it
BROKER_DOWN = (*BROKER_ERRORS, BrokerUnavailable)


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the runtime owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[override]
        yield


class Runtime:
    """The running control plane. ``await start()``, then ``await stop()``."""

    def __init__(self, settings: EnclaveSettings) -> None:
        self.settings = settings
        self.master: Optional[MasterKey] = None
        self.supervisor: Optional[Supervisor] = None
        self.accounts: Optional[Accounts] = None
        self.callout: Optional[Callout] = None
        self.conn: Optional[BrokerConnection] = None
        self.store: Optional[Store] = None
        self.reconciler: Optional[Reconciler] = None
        self.index: Optional[QueueIndex] = None
        self.error_notes: Optional[ErrorNotes] = None
        self.mover: Optional[Mover] = None
        self.naks: Optional[NakCounter] = None
        self.sampler: Optional[Sampler] = None
        self.storage: Optional[StorageGuard] = None
        self.liveness: Optional[Liveness] = None  #: whether the broker answers (a PING a second)
        self.metrics = ControlMetrics()  #: this runtime's own registry, served at /metrics
        self.service: Optional[QueueService] = None
        self.desk: Optional[Desk] = None
        self.deadlines: Optional[Deadlines] = None
        self.lease: Optional[Lease] = None  #: on a cluster: which node does the work that must happen once
        self.leading = False  #: whether this node does that work now
        self.api_url = ""
        self.ready = False
        self._http: Optional[_Uvicorn] = None
        self._http_task: Optional[asyncio.Task[None]] = None
        self._tokens: dict[str, str] = {}
        self.sessions = Sessions()
        self._lock = DataDirLock(settings.home)

    @property
    def broker_url(self) -> str:
        assert self.supervisor is not None
        host = "127.0.0.1" if self.settings.broker_host in ("0.0.0.0", "") else self.settings.broker_host
        return f"nats://{host}:{self.supervisor.port}"

    @property
    def broker_urls(self) -> list[str]:
        """This node's broker URL, then the other nodes' the broker told of (a cluster's)."""
        urls = [self.broker_url]
        for uri in self.conn.control.discovered_servers if self.conn is not None else ():
            url = f"nats://{uri.hostname}:{uri.port}"
            if url not in urls:
                urls.append(url)
        return urls

    async def start(self) -> None:
        """Start everything (see the module's docstring). A filesystem that fills up on the way
        gives StorageFull, like one too full to start on."""
        raise_file_limit()
        try:
            await self._start()
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise no_room(self.settings.home) from exc
            raise

    async def _start(self) -> None:
        s = self.settings
        s.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock.acquire()  # before anything else touches the data dir
        os.chmod(s.home, 0o700)
        check_room(s.home)
        with contextlib.suppress(OSError):
            (s.home / RUNTIME_FILE).unlink()  # a dead process's: the lock was free
        if s.routes and not s.cluster_port:
            raise SpecError("A node with routes to others needs a cluster port of its own (--cluster-port, "
                            "ENCLAVE_CLUSTER_PORT).")
        port = s.broker_port or free_port(s.broker_host)
        self.master = MasterKey.load_or_create(s.home, s.master_key)
        base = BrokerConfig(
            host=s.broker_host, port=port, store_dir=s.broker_dir, log_file=s.log_dir / "nats-server.log",
            sync=s.sync, max_file_store=s.file_store, max_memory_store=s.broker_memory // 4,
            server_name=s.node_name, cluster_port=s.cluster_port, routes=s.routes,
        )
        self.supervisor = Supervisor(s.broker_dir / "nats.conf", s.broker_host, port, log_path=s.log_dir / "nats-server.out",
                                     memory_limit=s.broker_memory, secret_env=route_env(base, route_password(self.master)),
                                     store_dir=s.broker_dir)
        await self.supervisor.stop_stale()  # before the port check: it may hold the broker port
        check_ports(s)
        try:
            s.log_dir.mkdir(exist_ok=True)
            if not s.log_dir.is_dir():
                raise FileExistsError
        except (FileExistsError, NotADirectoryError):
            raise EnclaveError(f"{s.log_dir} must be a directory (the broker's logs go there); it is a file: move it "
                               "away.") from None
        # the control streams' sizes and replicas, before their owners create them
        CONTROL_STREAM_BYTES.size_for(s.file_store, replicas=control_replicas(s.nodes))
        self.accounts = Accounts(base, self.supervisor, self.master, metrics=self.metrics)
        try:
            await self.accounts.start_broker()
        except BrokerUnavailable:
            check_ports(s)  # a port taken since the check is the likely cause: name it
            raise
        self.supervisor.on_restart = self._broker_restarted
        deadline = time.monotonic() + START_PATIENCE
        while True:
            try:
                await self._start_parts_unless_broker_dies(port)
                break
            except BROKER_DOWN as exc:  # the broker died under the start (its watch restarts it)
                if time.monotonic() > deadline:
                    raise
                log.warning("the broker went away while the control plane started; starting again: %s",
                            str(exc) or type(exc).__name__)
                await self._stop_parts()
                if not await self.supervisor.wait_running(max(deadline - time.monotonic(), 1.0)):
                    raise BrokerUnavailable(f"nats-server did not come back within {START_PATIENCE:g} s "
                                            "while Enclave started.") from exc
        self.ready = True
        write_private(s.home / RUNTIME_FILE, json.dumps(
            {"pid": os.getpid(), "api_url": self.api_url, "broker_url": self.broker_url,
             "broker_pid": self.supervisor.pid}) + "\n")

    async def _start_parts_unless_broker_dies(self, port: int) -> None:
        """``_start_parts``, given up at once (BrokerUnavailable) if the broker exits meanwhile:
        what it was waiting on would only time out."""
        assert self.supervisor is not None
        attempt = asyncio.create_task(self._start_parts(port), name="start-parts")
        died = asyncio.create_task(self.supervisor.exited(), name="start-broker-exit")
        try:
            await asyncio.wait({attempt, died}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            attempt.cancel()
            died.cancel()
            raise
        died.cancel()
        if not attempt.done():
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError, *BROKER_DOWN):
                await attempt
            raise BrokerUnavailable("nats-server exited while the control plane started.")
        attempt.result()

    async def _start_parts(self, port: int) -> None:
        """Everything that talks to the broker, in order: run again from the top (after
        ``_stop_parts``) if the broker dies on the way. The work that must happen once (``_lead``)
        starts here on a single node; on a cluster, when this node holds the lease."""
        s = self.settings
        assert self.supervisor is not None and self.accounts is not None and self.master is not None
        replicas = CONTROL_STREAM_BYTES.replicas  # sized for this cluster in _start
        self.conn = await BrokerConnection.connect(
            f"nats://127.0.0.1:{port}" if s.broker_host in ("0.0.0.0", "") else self.supervisor.url,
            self.accounts.keys,
        )
        self.conn.nodes = s.nodes  # a JSZ waits for each node's answer (the leaders' counts)
        self.liveness = Liveness(self.conn.control)
        await self.liveness.start()
        # a cluster's first start waits for its peers (placement of the replicated buckets)
        self.store = await Store.open(self.conn.js, replicas=replicas, attempts=600 if s.clustered else 100)
        await self.accounts.attach(self.store, self.conn, watch=s.clustered)
        self.callout = Callout(self.conn.callout, self.accounts.verify, self.accounts.keys)
        await self.callout.start()  # apps log in from here on
        self.storage = StorageGuard(s.broker_dir, s.file_store, self.conn, self.accounts.set_frozen,
                                    self.accounts.restart_broker, shared=s.clustered)
        self.storage.queue_ids = self.accounts.claimed
        if not s.clustered:
            await self.storage.start()
        await self._ensure_admin_token()
        self.index = QueueIndex(self.store)
        await self.index.start()
        self.error_notes = ErrorNotes(self.conn)
        self.mover = Mover(self.store, self.conn, self.index, s.sweep_seconds, Provenance.from_master(self.master))
        self.naks = NakCounter(self.store, self.conn)  # its counts are read on every node, kept by the leader's
        self.reconciler = Reconciler(self.store, self.conn, self.accounts, s.resync_seconds,
                                     on_deleted=self._queue_deleted, metrics=self.metrics, storage=self.storage)
        self.storage.on_change = self.reconciler.reconcile_all  # the queues' statuses tell of the store
        self.sampler = Sampler(self.store, self.conn, self.accounts, s.sample_seconds, storage=self.storage)
        self.deadlines = Deadlines(self.store, self.conn, self.index)
        accounts, supervisor, liveness = self.accounts, self.supervisor, self.liveness
        self.metrics.attach(QueueMetrics(self.store, self.conn, lambda: accounts.applied, self.naks.counted,
                                         lambda: supervisor.restarts, self.storage, lambda: liveness.answering))
        self.service = QueueService(self.store, self.conn, self.accounts, self.master,
                                    lambda: self.broker_url, s.internal_broker_url, self._status_changed,
                                    broker_urls=lambda: self.broker_urls, nodes=s.nodes)
        if s.clustered:
            self.lease = Lease(self.conn.js, s.node_name, replicas, self._lead, self._follow)
            await self.lease.start()
        else:
            await self._lead()
        self.desk = Desk(self.store, self.conn, self.service, self.index, self.naks, sync=self.settings.sync)
        await self.desk.start()
        await self._start_http()

    async def _lead(self) -> None:
        """Start the work that must happen once: this node holds the lease (or is alone)."""
        assert self.error_notes and self.mover and self.naks and self.reconciler and self.sampler and self.deadlines
        assert self.accounts is not None and self.storage is not None
        self.leading = True
        if self.settings.clustered:
            try:  # housekeeping: it must not keep the work below from starting
                await self.accounts.clean_up(grace=CLAIM_GRACE)  # other nodes may be creating queues now
            except (EnclaveError, nats.errors.Error, TimeoutError) as exc:
                log.warning("the clean-up of unclaimed accounts failed (%s); the next start tries again", exc)
            await self.storage.start()
        await self.error_notes.start()
        await self.mover.start()
        await self.naks.start()
        await self.reconciler.start()
        await self.sampler.start()
        await self.deadlines.start()
        self.accounts.start_graces()

    async def _follow(self) -> None:
        """Stop the work that must happen once (the lease went to another node, or we stop), in
        the reverse order."""
        if not self.leading:
            return
        self.leading = False
        if self.accounts is not None:
            await self.accounts.stop_graces()
            # a freeze is the lease holder's to keep: pushed from here later (a create answered on
            # this node), frozen claims would freeze accounts the new holder's guard thawed
            self.accounts.frozen = False
        # the storage guard early: no freeze or restart of the broker from here on; the nak
        # counter last, storing its last counts
        await stop_each(self.deadlines, self.storage, self.sampler, self.reconciler, self.mover, self.error_notes,
                        self.naks)

    async def _status_changed(self, key: str, timeout: float) -> None:
        """Wait for the reconciler's next status write of ``key`` (here, if this node reconciles),
        or a moment (the leader reconciles elsewhere: the status is read again)."""
        if self.leading and self.reconciler is not None:
            await self.reconciler.changed(key, timeout)
        else:
            await asyncio.sleep(min(0.05, timeout))

    async def _queue_deleted(self, queue_id: str) -> None:
        """The reconciler deleted a queue: its id names nothing any more, its notes go."""
        assert self.index is not None and self.mover is not None and self.error_notes is not None
        self.index.forget(queue_id)
        self.mover.forget(queue_id)
        await self.error_notes.forget(queue_id)

    async def _broker_restarted(self) -> None:
        assert self.supervisor is not None  # the broker's resolver directory kept every account's claims
        with contextlib.suppress(OSError, ValueError):
            path = self.settings.home / RUNTIME_FILE
            data = json.loads(path.read_text())
            write_private(path, json.dumps({**data, "broker_pid": self.supervisor.pid}) + "\n")

    async def _ensure_admin_token(self) -> None:
        """Create the admin token on the first start and write it to ENCLAVE_HOME/admin-token (0600).
        Without that file (deleted to rotate the token), a new admin token replaces the old one. On
        a cluster each node has its own (``admin@<node>``), good on every node."""
        assert self.store is not None
        name = f"admin@{self.settings.node_name}" if self.settings.clustered else "admin"
        path = self.settings.home / ADMIN_TOKEN_FILE
        if path.is_dir() or (path.exists() and not path.is_file()):
            raise EnclaveError(f"{path} must be the admin token's file (it is not a file); remove it, and a new "
                               "token is written there.")
        token = path.read_bytes().decode("utf-8", "replace").strip() if path.exists() else ""  # not UTF-8: replaced
        if not token or await self.store.tokens.get(token_digest(token)) is None:
            token = generate_token()
            with contextlib.suppress(Conflict):
                await self.store.tokens.create(token_digest(token), TokenRecord(name=name))
            write_private(path, token + "\n")
            log.info("admin token written to %s", path)
        # at every start, not only the one that wrote the file: a start stopped between the two
        # had left the token it replaced valid for good
        for digest, record, _ in await self.store.tokens.items():
            if record.name == name and digest != token_digest(token):
                await self.store.tokens.delete(digest)

    async def token_name(self, digest: str) -> Optional[str]:
        """The name of the token with this digest, or None (positive answers are cached)."""
        if digest in self._tokens:
            return self._tokens[digest]
        assert self.store is not None
        found = await self.store.tokens.get(digest)
        if found is None:
            return None
        self._tokens[digest] = found[0].name
        return found[0].name

    def health(self) -> tuple[str, str]:
        """``(status, detail)``: ``ok``; ``starting``; ``unavailable`` (the broker is down or the
        control plane cut off from it); ``degraded`` (serving reads, receives and deletes, but the
        broker's store refuses puts: a full disk, with the guard's sentence as the detail)."""
        if not self.ready:
            return "starting", "starting"
        if self.supervisor is None or self.supervisor.pid is None:
            return "unavailable", "the broker is not running"
        if self.conn is None or not self.conn.control.is_connected:
            return "unavailable", "the control plane is not connected to the broker"
        if self.liveness is not None and not self.liveness.answering:
            return "unavailable", f"the broker has not answered for {self.liveness.silent_for:.0f} s"
        problem = self.storage.health.problem if self.storage is not None else None
        if problem is not None:
            return "degraded", problem
        return "ok", "ready"

    async def _start_http(self) -> None:
        s = self.settings
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
        # listening socket says TCP, and without it every keep-alive response waits ~40 ms (Nagle)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            bind(sock, s.api_host, s.api_port, "ENCLAVE_API_PORT", "--api-port")
        except BaseException:
            sock.close()
            raise
        sock.set_inheritable(True)
        host, port = sock.getsockname()[:2]
        shown = "127.0.0.1" if host == "0.0.0.0" else host
        self.api_url = f"http://{shown}:{port}"
        # proxy_headers off: uvicorn would otherwise take the client address and scheme from
        # X-Forwarded-* sent by any local client; the console trusts only ENCLAVE_TRUSTED_PROXIES
        config = uvicorn.Config(create_app(self), log_config=None, access_log=False, lifespan="off",
                                log_level=s.log_level, timeout_graceful_shutdown=5, proxy_headers=False,
                                # heads up to 1 MiB reach the app, which refuses those over 16 KiB
                                # with a JSON problem (api/guard.py) instead of h11's plain-text 400
                                h11_max_incomplete_event_size=HEAD_READ_LIMIT,
                                http=BoundedH11Protocol)  # heads on time, connections bounded
        self._http = _Uvicorn(config)
        self._http_task = asyncio.create_task(self._http.serve(sockets=[sock]), name="http")
        while not self._http.started:
            if self._http_task.done():
                self._http_task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop everything this runtime started, the broker last, then release the data dir.
        A runtime that did not get the lock started nothing and touches nothing."""
        if not self._lock.held:
            return
        try:
            await self._stop_started()
        finally:
            self._lock.release()

    async def _stop_started(self) -> None:
        self.ready = False
        with contextlib.suppress(OSError):
            (self.settings.home / RUNTIME_FILE).unlink()
        await self._stop_parts()
        if self.supervisor is not None:
            await self.supervisor.stop()

    async def _stop_parts(self) -> None:
        """Stop what ``_start_parts`` started, in reverse; the broker and the lock stay."""
        if self.conn is not None:
            self.conn.closing = True  # long polls under way end, answered, within the HTTP server's grace
        if self._http is not None and self._http_task is not None:
            self._http.should_exit = True
            with contextlib.suppress(Exception):
                await self._http_task
        await stop_each(self.desk, self.lease)  # the work that must happen once stops with the lease (``_follow``)
        await self._follow()
        await stop_each(self.service.dead_letters if self.service else None, self.storage, self.callout, self.accounts,
                        self.index, self.liveness)
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
        self._http = self._http_task = self.lease = self.liveness = None
        self.desk = self.deadlines = self.storage = self.service = self.reconciler = self.mover = None
        self.error_notes = self.sampler = self.naks = self.callout = self.conn = self.store = self.index = None


async def stop_each(*parts: Any) -> None:
    """``await part.stop()`` for each part that was made (not None), in order."""
    for part in parts:
        if part is not None:
            await part.stop()


def _settle_heap() -> None:
    """Keep what start-up made (about 100,000 objects: modules, the API's routes and models, the
    broker connections) out of the garbage collector's way for the life of the process. Every full
    collection walked it: 68–109 ms of CPU, with 100 queues failing at once, in which the mover, the
    desk and the API all waited. Collected first, so nothing that is garbage already is kept."""
    gc.collect()
    gc.freeze()


async def serve(settings: EnclaveSettings, *, announce: Any = print) -> None:
    """Run until SIGINT or SIGTERM, then stop cleanly."""
    runtime = Runtime(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started = time.perf_counter()
    try:
        await runtime.start()
        _settle_heap()
        announce(f"Enclave Queues is up in {time.perf_counter() - started:.1f} s")
        announce(f"  API:     {runtime.api_url}")
        announce(f"  broker:  {runtime.broker_url}")
        announce(f"  data:    {settings.home}")
        announce(f"  token:   {settings.home / ADMIN_TOKEN_FILE}")
        await stop.wait()
        announce("Stopping…")
    finally:
        await runtime.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
