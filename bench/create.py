"""Creating queues on an operator-mode stack: latency at scale, bursts, broker memory, app logins.

Each queue is a NATS account of its own, pushed to the running broker as a JWT (no configuration
reload), and apps log in with the queue's username and password through the auth callout. All on
real ``enclave up`` stacks with the product's periodic work at its defaults (resync 30 s, depth
sampler 60 s, sweep 15 s), each against a baseline from the same run:

1. **Create latency** with each level of queues already there (``--levels``, default 1, 100, 1000,
   3000; the fill is made 48 at a time in another project): ``AdminClient.create_queue`` +
   ``AdminClient.wait_ready`` (API) and the real ``enclave queue create NAME --wait`` subprocess
   (CLI), one after another, each started once the previous one was Ready; p50 and p99. A level's
   measured queues are deleted before the next fill, so each series starts at its level. Baseline:
   the broker work a queue needs, ``add_stream`` + ``add_consumer`` with the queue's own config, on
   a plain nats-server (``sync_interval: always``) holding as many streams.
2. **Bursts** (``--bursts``, default 1000 and 3000), each on a fresh stack: every create at once,
   48 in flight, each waited on until Ready as ``--wait`` does; the failures (a refused create, or
   a wait that ended Errored or timed out) and the wall time. Baseline: as many add_stream +
   add_consumer, 48 in flight, on a fresh plain nats-server.
3. **Broker RSS** (VmRSS) right after each burst and once the stack is idle, against that plain
   nats-server holding the same streams and consumers in one account.
4. **App connect**: nats-py ``connect`` with a queue's username and password (through the
   callout), at each level, one for one with a connect to a plain nats-server as a config-mode user
   whose password has a bcrypt hash of the same cost (auth/secrets.py).

The broker's configuration reloads are counted from its log on every stack (there should be none),
the control process's errors and warnings are kept, and so is the CPU the broker and the control
process used while the stack was let go idle (a stack that never goes idle is busy on its own).
Goals (issue 14): API p50 <= 50 ms and p99 <= 250 ms at 3000 queues, 0 failures in the bursts,
broker RSS <= 200 MiB after 1000 creates and <= 512 MiB after 3000.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Optional

import nats

from enclave_queue.auth.secrets import BCRYPT_COST, generate_password, hash_password
from enclave_queue.controller import mapping
from enclave_queue.errors import EnclaveError
from enclave_queue.names import stream_name
from enclave_queue.spec import QueueSpec
from enclave_queue.testing import EnclaveStack

from . import (
    PRODUCT_PERIODS,
    PROJECT,
    Report,
    cpu_seconds,
    enclave_stack,
    main,
    percentile,
    plain_nats,
    quiet,
    reloads,
    rss_mib,
    say,
    settle,
    wait_ready,
)

NAME = "create"
FILL_PROJECT = "fill"
BURST_PROJECT = "burst"
CONCURRENCY = 48  #: creates in flight at once, in fills and bursts
WAIT_TIMEOUT = 120.0  #: seconds a create may take to be Ready before it counts as failed
SETTLE_TIMEOUT = 120.0  #: seconds a stack is given to go idle before the next measurement
ENCLAVE_CLI = str(Path(sys.executable).with_name("enclave"))  #: the console script next to this Python
GOAL_LEVEL, P50_GOAL, P99_GOAL = 3000, 50, 250  #: queues, ms, ms
RSS_GOALS = {1000: 200, 3000: 512}  #: queues created: MiB


@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...]  #: queues already there when creates are timed
    bursts: tuple[int, ...]  #: sizes of the concurrent bursts
    creates: int  #: API creates timed at each level
    cli: int  #: CLI creates timed at each level
    raw: int  #: baseline creates timed at each level
    connects: int  #: logins timed at each level (and as many baseline ones)


FULL = Plan((1, 100, 1000, 3000), (1000, 3000), creates=100, cli=20, raw=100, connects=200)
QUICK = Plan((1, 20, 100), (100,), creates=10, cli=3, raw=10, connects=20)


def plan(quick: bool, **given: Any) -> Plan:
    """The quick or full plan, with what the command line gave instead."""
    known = {f.name for f in fields(Plan)}
    return replace(QUICK if quick else FULL, **{k: v for k, v in given.items() if k in known and v is not None})


def counts(text: str) -> tuple[int, ...]:
    """``1,100,1000`` as a sorted tuple of queue counts (an argparse type)."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of queue counts: {text!r}") from exc
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError("queue counts cannot be negative")
    return tuple(values)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--levels", type=counts, help="queues already there when creates are timed, "
                        f"comma-separated (default {','.join(map(str, FULL.levels))})")
    parser.add_argument("--bursts", type=counts, help="sizes of the concurrent bursts, each on a fresh stack; "
                        f"'' for none (default {','.join(map(str, FULL.bursts))})")
    parser.add_argument("--creates", type=int, help=f"API creates timed per level (default {FULL.creates})")
    parser.add_argument("--cli", type=int, help=f"CLI creates timed per level (default {FULL.cli})")
    parser.add_argument("--raw", type=int, help=f"baseline creates timed per level (default {FULL.raw})")
    parser.add_argument("--connects", type=int, help=f"logins timed per level (default {FULL.connects})")
    parser.add_argument("--broker-memory", help="ENCLAVE_BROKER_MEMORY for every stack, e.g. 2GiB "
                        "(default: the product's, 512MiB)")


# -- creates on a stack ------------------------------------------------------------------------------


@dataclass
class Created:
    name: str
    ms: float  #: until the create with its wait returned: Ready, or the failure
    failure: str = ""  #: what ``--wait`` would have reported; "" when Ready in time
    ready_ms: Optional[float] = None  #: until Ready, a later wait after a failure included; None: never


class Fleet:
    """One running stack: creates queues on it (from as many threads as asked), reads its processes."""

    def __init__(self, stack: EnclaveStack) -> None:
        self.stack = stack
        self._local = threading.local()
        self._clients: list[Any] = []

    def admin(self) -> Any:
        admin = getattr(self._local, "admin", None)
        if admin is None:
            admin = self._local.admin = self.stack.admin()
            self._clients.append(admin)
        return admin

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def rss(self) -> float:
        self.stack.refresh()
        assert self.stack.broker_pid
        return rss_mib(self.stack.broker_pid)

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by the broker and by the control process."""
        assert self.stack.broker_pid
        return {"broker": cpu_seconds(self.stack.broker_pid), "control": cpu_seconds(self.stack.pid)}

    def cpu_since(self, before: dict[str, float]) -> dict[str, float]:
        return {key: round(value - before[key], 2) for key, value in self.cpu().items()}

    def settle(self) -> dict[str, float]:
        """Let the stack go idle (at most SETTLE_TIMEOUT); the seconds it took and the CPU seconds
        each process used meanwhile."""
        before = self.cpu()
        seconds = quiet(self.stack, timeout=SETTLE_TIMEOUT)
        return {"s": round(seconds, 1), **self.cpu_since(before)}

    def memory_limit(self) -> str:
        """The broker's GOMEMLIMIT, from its environment ("" if none or unreadable)."""
        assert self.stack.broker_pid
        with contextlib.suppress(OSError):
            for item in Path(f"/proc/{self.stack.broker_pid}/environ").read_bytes().split(b"\0"):
                if item.startswith(b"GOMEMLIMIT="):
                    return item.split(b"=", 1)[1].decode()
        return ""

    def create(self, project: str, name: str) -> Created:
        """``create_queue`` + ``wait_ready``, as ``enclave queue create NAME --wait`` does."""
        admin = self.admin()
        started = time.perf_counter()
        try:
            admin.create_queue(project, {"name": name})
            admin.wait_ready(project, name, timeout=WAIT_TIMEOUT)
        except EnclaveError as exc:
            return self._failed(project, name, started, f"{type(exc).__name__}: {exc}")
        ms = (time.perf_counter() - started) * 1000
        return Created(name, ms, ready_ms=ms)

    def cli_create(self, project: str, name: str) -> Created:
        """The real ``enclave queue create NAME --wait``, process start and exit included."""
        started = time.perf_counter()
        try:
            done = subprocess.run([ENCLAVE_CLI, "queue", "create", name, "--project", project, "--wait"],
                                  env=self.stack.env, capture_output=True, timeout=WAIT_TIMEOUT + 30)
        except subprocess.TimeoutExpired:
            return self._failed(project, name, started, "the CLI did not return")
        if done.returncode != 0:
            return self._failed(project, name, started, f"exit {done.returncode}: "
                                f"{done.stderr.decode(errors='replace').strip()[-300:]}")
        ms = (time.perf_counter() - started) * 1000
        return Created(name, ms, ready_ms=ms)

    def _failed(self, project: str, name: str, started: float, failure: str) -> Created:
        """A create whose wait failed: is the queue Ready later (the reconciler retries)?"""
        ms = (time.perf_counter() - started) * 1000
        try:
            wait_ready(self.admin(), project, name, timeout=WAIT_TIMEOUT)
        except (EnclaveError, TimeoutError):
            return Created(name, ms, failure)
        return Created(name, ms, failure, (time.perf_counter() - started) * 1000)

    def many(self, project: str, names: list[str], concurrency: int = CONCURRENCY) -> tuple[float, list[Created]]:
        """Create them all, ``concurrency`` in flight; (wall seconds until the last was done, each)."""
        started = time.perf_counter()
        pool = ThreadPoolExecutor(concurrency)
        try:
            made = list(pool.map(lambda name: self.create(project, name), names))
        finally:  # on Ctrl-C or a failure, do not go on creating the rest
            pool.shutdown(wait=True, cancel_futures=True)
        return time.perf_counter() - started, made

    def delete(self, project: str, names: list[str], concurrency: int = 8) -> list[str]:
        """Delete these queues and wait until they are gone; the errors."""
        def one(name: str) -> str:
            try:
                self.admin().delete_queue(project, name)
                self.admin().wait_deleted(project, name, timeout=WAIT_TIMEOUT)
            except EnclaveError as exc:
                return f"{name}: {type(exc).__name__}: {exc}"
            return ""

        with ThreadPoolExecutor(concurrency) as pool:
            return [error for error in pool.map(one, names) if error]


def outcome(made: list[Created]) -> dict[str, Any]:
    """What a batch of creates came to: ``ms`` until Ready of those that got there (a later wait
    after a failure included), ``failed_ms`` until each failure was reported."""
    failed = [c for c in made if c.failure]
    return {"count": len(made), "failures": len(failed), "never_ready": sum(c.ready_ms is None for c in made),
            "failure_messages": sorted({re.sub(r"'[a-z0-9-]+'", "'…'", c.failure)[:300] for c in failed}),
            "ms": [round(c.ready_ms, 2) for c in made if c.ready_ms is not None],
            "failed_ms": [round(c.ms, 2) for c in failed]}


_LOG_LINE = re.compile(r"^\S+ \S+ (ERROR|WARNING|CRITICAL) (.*)$")


def log_problems(stack: EnclaveStack) -> dict[str, Any]:
    """Errors and warnings the control process logged (the ten most frequent, numbers masked) and
    the broker's, counted, with its configuration reloads."""
    seen: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in stack.log_path.read_text(errors="replace").splitlines():
            match = _LOG_LINE.match(line)
            if match:
                key = f"{match[1]} {re.sub(r'[0-9a-f]{8,}|[0-9]+', '#', match[2])[:200]}"
                seen[key] = seen.get(key, 0) + 1
    broker = {"ERR": 0, "WRN": 0}
    with contextlib.suppress(OSError):
        text = (stack.home / "logs" / "nats-server.log").read_text(errors="replace")
        broker = {level: text.count(f"[{level}]") for level in broker}
    return {"control": dict(sorted(seen.items(), key=lambda kv: -kv[1])[:10]), "broker": broker,
            "broker_reloads": reloads(stack)}


# -- logins -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Login:
    url: str
    user: str
    password: str


@contextlib.contextmanager
def config_mode_login() -> Iterator[Login]:
    """A plain nats-server whose one user (config mode) has a password like a queue's, bcrypt-hashed
    at the product's cost."""
    password = generate_password()
    hashed = hash_password(password)
    assert hashed.startswith(f"$2b${BCRYPT_COST:02d}$")
    with plain_nats(config=f'authorization {{ users: [ {{ user: "app", password: "{hashed}" }} ] }}') as server:
        yield Login(server.url, "app", password)


async def _quiet_errors(_: Exception) -> None:  # failures are counted by the caller, not logged by nats-py
    return None


async def logins(queue: Login, baseline: Login, count: int) -> dict[str, Any]:
    """``count`` connects of each, one for one, the order swapped every other time; each connection
    is closed (untimed) before the next. Milliseconds until ``connect`` returned (the server's
    PONG to the CONNECT: authorized)."""
    timed: dict[str, list[float]] = {"queue": [], "baseline": []}
    errors: list[str] = []

    async def once(kind: str, login: Login) -> None:
        started = time.perf_counter()
        try:
            nc = await nats.connect(login.url, user=login.user, password=login.password, allow_reconnect=False,
                                    max_reconnect_attempts=0, connect_timeout=5, error_cb=_quiet_errors)
        except Exception as exc:  # nats-py raises several unrelated types
            errors.append(f"{kind}: {exc!r}"[:200])
            return
        timed[kind].append((time.perf_counter() - started) * 1000)
        await nc.close()

    for i in range(count):
        pair = [("queue", queue), ("baseline", baseline)]
        for kind, login in pair if i % 2 == 0 else pair[::-1]:
            await once(kind, login)
    return {**timed, "errors": errors}


# -- the raw baselines ----------------------------------------------------------------------------------


async def _raw_queue(js: Any, i: int) -> float:
    """add_stream + add_consumer for a queue as the reconciler makes them; milliseconds."""
    queue_id = f"qraw{i:012d}"
    spec = QueueSpec(name=f"raw-{i:05d}", project=PROJECT)
    stream = mapping.stream_config(queue_id, spec)
    started = time.perf_counter()
    await js.add_stream(stream)
    await js.add_consumer(stream.name, mapping.consumer_config(queue_id, spec))
    return (time.perf_counter() - started) * 1000


async def raw_creates(url: str, levels: tuple[int, ...], count: int,
                      at_level: Optional[Callable[[int], None]] = None) -> dict[str, list[float]]:
    """On a plain broker: fill to each level (64 at a time), call ``at_level(level)``, then time
    ``count`` creates one after another, deleted again before the next level (as the stack's are)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    existing, serial = 0, 10**9
    out: dict[str, list[float]] = {}
    try:
        for level in levels:
            while existing < level:
                batch = range(existing, min(level, existing + 64))
                await asyncio.gather(*(_raw_queue(js, i) for i in batch))
                existing += len(batch)
            if at_level is not None:
                at_level(level)
            timed = list(range(serial, serial + count))
            serial += count
            out[str(level)] = [await _raw_queue(js, i) for i in timed]
            if level != levels[-1]:
                for i in timed:
                    await js.delete_stream(stream_name(f"qraw{i:012d}"))
    finally:
        await nc.close()
    return out


async def raw_burst(url: str, size: int, concurrency: int = CONCURRENCY) -> tuple[float, list[float]]:
    """``size`` add_stream + add_consumer, ``concurrency`` in flight; (wall seconds, each's ms)."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> float:
        async with gate:
            return await _raw_queue(js, i)

    try:
        started = time.perf_counter()
        each = await asyncio.gather(*(one(i) for i in range(size)))
        return time.perf_counter() - started, list(each)
    finally:
        await nc.close()


# -- the benchmark ----------------------------------------------------------------------------------------


def _origin(stack: EnclaveStack) -> str:
    """Where the CLI's Python finds the product (PYTHONPATH may point it at another checkout)."""
    done = subprocess.run([sys.executable, "-c", "import enclave_queue; print(enclave_queue.__file__)"],
                          env=stack.env, capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or done.stderr.strip()[-200:]


def measure_levels(p: Plan, env: dict[str, str], info: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Create latency (API and CLI) and logins at each level, on one stack."""
    out: dict[int, dict[str, Any]] = {}
    with enclave_stack(env) as stack, config_mode_login() as baseline:
        fleet = Fleet(stack)
        try:
            info["product_imported_from"] = _origin(stack)
            info["broker_gomemlimit"] = fleet.memory_limit()
            quiet(stack, timeout=60)
            info["levels_empty_rss_mib"] = round(fleet.rss(), 1)
            existing = 0
            for index, level in enumerate(p.levels):
                cpu = fleet.cpu()
                seconds, filled = fleet.many(FILL_PROJECT, [f"fill-{i:05d}" for i in range(existing, level)])
                existing = max(existing, level)
                data: dict[str, Any] = {"fill": {"seconds": round(seconds, 1), **outcome(filled),
                                                 "cpu_s": fleet.cpu_since(cpu)},
                                        "settle": fleet.settle(), "broker_rss_mib": round(fleet.rss(), 1),
                                        "control_rss_mib": round(rss_mib(stack.pid), 1)}
                say(f"create: {level} queues there (filled in {seconds:.1f} s, {data['fill']['failures']} failed, "
                    f"idle after {data['settle']['s']} s), broker RSS {data['broker_rss_mib']:.0f} MiB")
                cpu, started = fleet.cpu(), time.perf_counter()
                api = [fleet.create(PROJECT, f"api-{level}-{i:04d}") for i in range(p.creates)]
                api_cpu = {**fleet.cpu_since(cpu), "wall": round(time.perf_counter() - started, 2)}
                cli = [fleet.cli_create(PROJECT, f"cli-{level}-{i:04d}") for i in range(p.cli)]
                data.update(api={**outcome(api), "cpu_s": api_cpu}, cli=outcome(cli))
                ready = [c.name for c in api + cli if c.ready_ms is not None]
                if ready and p.connects:
                    creds = fleet.admin().credentials(PROJECT, ready[0])
                    queue = Login(creds["broker_url"], creds["username"], creds["password"])
                    data["logins"] = asyncio.run(logins(queue, baseline, p.connects))
                say(f"create: @{level}: API p50 {_ms(data['api']['ms'], 50)}, p99 {_ms(data['api']['ms'], 99)}; "
                    f"CLI p50 {_ms(data['cli']['ms'], 50)}; login p50 {_ms(data.get('logins', {}).get('queue', []), 50)}")
                if index < len(p.levels) - 1:  # the next series starts at its own level
                    data["delete_errors"] = fleet.delete(PROJECT, [c.name for c in api + cli])
                    quiet(stack, timeout=SETTLE_TIMEOUT)
                out[level] = data
            info["levels_stack_logs"] = log_problems(stack)
        finally:
            fleet.close()
    return out


def measure_bursts(p: Plan, env: dict[str, str]) -> dict[int, dict[str, Any]]:
    """Each burst on a fresh stack, then its baseline on a fresh plain nats-server."""
    out: dict[int, dict[str, Any]] = {}
    for size in p.bursts:
        say(f"create: burst of {size} creates, {CONCURRENCY} in flight, on a fresh stack")
        with enclave_stack(env) as stack:
            fleet = Fleet(stack)
            try:
                quiet(stack, timeout=60)
                empty, cpu = fleet.rss(), fleet.cpu()
                seconds, made = fleet.many(BURST_PROJECT, [f"burst-{i:05d}" for i in range(size)])
                after, control, cpu = fleet.rss(), rss_mib(stack.pid), fleet.cpu_since(cpu)
                settled = fleet.settle()
                data: dict[str, Any] = {
                    "seconds": round(seconds, 2), **outcome(made), "cpu_s": cpu, "settle": settled,
                    "rss_mib": {"empty": round(empty, 1), "after": round(after, 1), "idle": round(fleet.rss(), 1),
                                "control_after": round(control, 1)},
                    "logs": log_problems(stack)}
            finally:
                fleet.close()
        with plain_nats() as server:
            plain_empty = rss_mib(server.pid)
            raw_s, raw_ms = asyncio.run(raw_burst(server.url, size))
            plain_after = rss_mib(server.pid)
            settle([server.pid], timeout=60)
            data["raw"] = {"seconds": round(raw_s, 2), "ms": raw_ms, "rss_mib": {
                "empty": round(plain_empty, 1), "after": round(plain_after, 1), "idle": round(rss_mib(server.pid), 1)}}
        say(f"create: burst of {size}: {data['failures']} failed, {seconds:.1f} s (raw {raw_s:.1f} s), "
            f"broker RSS {after:.0f} MiB right after (plain server {plain_after:.0f} MiB)")
        out[size] = data
    return out


def summary(values: list[float]) -> dict[str, Any]:
    """Percentiles of many latencies (milliseconds), kept in the JSON in their place."""
    if not values:
        return {"n": 0}
    return {"n": len(values), **{f"p{q}": round(percentile(values, q), 2) for q in (50, 90, 99)},
            "max": round(max(values), 2)}


def _for_json(data: dict[str, Any]) -> dict[str, Any]:
    """A level's or a burst's readings with the long lists (fills, bursts, logins) as percentiles;
    the timed series (API, CLI, raw) keep every figure."""
    out = dict(data)
    for key in ("fill", "logins"):
        if key in out:
            out[key] = {k: summary(v) if k in ("ms", "failed_ms", "queue", "baseline") else v
                        for k, v in out[key].items()}
    if "raw" in out:  # a burst
        out.update(ms=summary(out["ms"]), failed_ms=summary(out["failed_ms"]),
                   raw={**out["raw"], "ms": summary(out["raw"]["ms"])})
    return out


def _ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q):.0f} ms" if values else "-"


def _pair(report: Report, case: str, values: list[float], base: list[float], base_case: str, *,
          targets: tuple[str, str] = ("", ""), note: str = "") -> None:
    """A p50 row and a p99 row, each against the same percentile of the baseline."""
    for q, target in zip((50, 99), targets, strict=True):
        if not values:  # every one failed: the failures row or note says so
            say(f"create: no {case} p{q}: no sample")
            continue
        report.add(f"{case} p{q}", percentile(values, q), "ms", baseline=percentile(base, q) if base else None,
                   baseline_case=f"{base_case} p{q}", target=target, note=note if q == 50 else "")


def _failures(data: dict[str, Any]) -> str:
    if not data["failures"]:
        return ""
    return (f"{data['failures']} of {data['count']} failed ({data['never_ready']} never Ready): "
            + "; ".join(data["failure_messages"][:3]))


def run(quick: bool, samples: Optional[dict[str, Any]] = None, broker_memory: Optional[str] = None,
        **given: Any) -> list[Report]:
    """``given``: the command line's counts (levels, bursts, creates, …); ``broker_memory``:
    ENCLAVE_BROKER_MEMORY for the stacks. ``samples``, if given, receives the bursts' broker RSS
    readings (for bench.memory)."""
    report = Report(NAME, quick)
    p = plan(quick, **given)
    env = {**PRODUCT_PERIODS, **({"ENCLAVE_BROKER_MEMORY": broker_memory} if broker_memory else {})}
    report.info["plan"] = {**asdict(p), "concurrency": CONCURRENCY, "env": env}
    raw: dict[str, list[float]] = {}
    if p.levels:
        say(f"create: baseline, add_stream + add_consumer on a plain nats-server at {p.levels}")
        with plain_nats() as server:
            raw = asyncio.run(raw_creates(server.url, p.levels, p.raw))
        say(f"create: levels {p.levels}: {p.creates} API and {p.cli} CLI creates, {p.connects} logins each")
    levels = measure_levels(p, env, report.info) if p.levels else {}
    bursts = measure_bursts(p, env)
    report.info.update(raw_ms={k: [round(m, 2) for m in v] for k, v in raw.items()},
                       levels={str(k): _for_json(v) for k, v in levels.items()},
                       bursts={str(k): _for_json(v) for k, v in bursts.items()})

    for level, data in levels.items():
        base, api, cli = raw[str(level)], data["api"]["ms"], data["cli"]["ms"]
        goals = (f"value <= {P50_GOAL}", f"value <= {P99_GOAL}") if level == GOAL_LEVEL else ("", "")
        busy = "" if data["settle"]["s"] < SETTLE_TIMEOUT else (
            f"the stack was not idle after {SETTLE_TIMEOUT:g} s (broker {data['settle']['broker']:.0f} and control "
            f"{data['settle']['control']:.0f} CPU seconds meanwhile)")
        _pair(report, f"API create --wait @{level}", api, base, "raw add_stream+add_consumer", targets=goals,
              note="; ".join(filter(None, [_failures(data["api"]), busy])))
        cli_note = f"CLI/API p50 {percentile(cli, 50) / percentile(api, 50):.1f}x (process start)" if cli and api else ""
        _pair(report, f"CLI create --wait @{level}", cli, base, "raw add_stream+add_consumer",
              note="; ".join(filter(None, [cli_note, _failures(data["cli"])])))
        if "logins" in data:
            login = data["logins"]
            _pair(report, f"app connect (callout) @{level}", login["queue"], login["baseline"],
                  f"config-mode user, bcrypt cost {BCRYPT_COST}",
                  note=f"{len(login['errors'])} failed: {login['errors'][:2]}" if login["errors"] else "")
    for size, data in bursts.items():
        report.add(f"burst of {size} ({CONCURRENCY} in flight): failures", data["failures"], "failed",
                   target="value <= 0", note=_failures(data))
        report.add(f"burst of {size}: wall time", data["seconds"], "s", baseline=data["raw"]["seconds"],
                   baseline_case=f"raw add_stream+add_consumer x{size}, {CONCURRENCY} in flight")
        _pair(report, f"burst of {size}: each create", data["ms"], data["raw"]["ms"], f"raw, {CONCURRENCY} in flight")
        goal = RSS_GOALS.get(size)
        rss, plain = data["rss_mib"], data["raw"]["rss_mib"]
        report.add(f"broker RSS right after {size} creates", rss["after"], "MiB", baseline=plain["after"],
                   baseline_case=f"plain nats-server, {size} streams+consumers in one account",
                   target=f"value <= {goal}" if goal else "",
                   note=f"empty stack {rss['empty']:.0f} MiB, empty plain server {plain['empty']:.0f} MiB")
        report.add(f"broker RSS after {size} creates, idle", rss["idle"], "MiB", baseline=plain["idle"],
                   baseline_case="the plain server, idle", target=f"value <= {goal}" if goal else "")
    if samples is not None:
        samples.update({"source": "bench.create's burst stacks (a fresh stack each)",
                        "levels": {str(size): {"enclave": d["rss_mib"], "plain": d["raw"]["rss_mib"]}
                                   for size, d in bursts.items()}})
    return report.done()


if __name__ == "__main__":
    main(run, "bench.create", options)
