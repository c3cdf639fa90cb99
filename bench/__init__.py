"""Benchmarks of Enclave Queues against raw NATS JetStream, on real components only.

Every figure is reported next to a baseline measured in the same run on the same machine, as a
ratio. ``python -m bench`` runs them all; ``python -m bench.<name>`` runs one; ``--quick`` uses
smaller counts (a smoke run, not numbers to quote). Results are printed as a table and merged
into ``bench/results/latest.json`` (``latest-quick.json`` for ``--quick``), one entry per
benchmark, each stamped with its own run, machine and load.

This module holds what the benchmarks share: stacks that are always stopped, raw nats-py
publishers, the report rows and their table, and the JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Optional

import nats

from enclave_queue.settings import EnclaveSettings
from enclave_queue.testing import START_TIMEOUT, STOP_TIMEOUT, EnclaveStack, NatsServer

ROOT = Path(__file__).resolve().parent
RESULTS_DIR = ROOT / "results"
RESULTS_FILE = RESULTS_DIR / "latest.json"  #: full runs
QUICK_RESULTS_FILE = RESULTS_DIR / "latest-quick.json"  #: --quick runs (smoke numbers, kept apart)
PROJECT = "bench"
BODY = b"x" * 256  #: every benchmark message: 256 bytes
#: the product's default resync period (the test harness uses 1 s, which would make thousands of
#: queues reconcile every second and turn the create benchmark into a resync benchmark)
STACK_ENV = {"ENCLAVE_RESYNC_SECONDS": "30", "ENCLAVE_LOG_LEVEL": "warning"}
_DEFAULTS = EnclaveSettings.from_env({})
#: the product's periods for the periodic work that grows with the queues: the test harness sweeps
#: for dead letters and samples every queue's depth every second, which costs a stack of a hundred
#: queues or more a share of a core (and of the broker's) that a default stack does not pay
PRODUCT_PERIODS = {"ENCLAVE_SWEEP_SECONDS": f"{_DEFAULTS.sweep_seconds:g}",
                   "ENCLAVE_SAMPLE_SECONDS": f"{_DEFAULTS.sample_seconds:g}"}

#: PIDs of every broker the benchmarks started; checked at the end of a run
STARTED_BROKERS: list[int] = []
#: how long each stack took to start and to stop (stopping is part of the product too)
STACK_TIMES: list[dict[str, Any]] = []
SLOW_STOP = 5.0  #: seconds; a slower stop keeps the end of the stack's log in the results
#: what the run has running now (stacks and plain servers, with their temporary directories), for
#: a run killed with SIGTERM to stop
RUNNING: dict[int, tuple[Any, Optional[Path]]] = {}
_RUN_PID = os.getpid()  #: the run's own process (RUNNING means nothing in a forked child)


# -- results ----------------------------------------------------------------------------------------


@dataclass
class Row:
    case: str
    value: float
    unit: str
    baseline: Optional[float] = None
    baseline_case: str = ""
    ratio: Optional[float] = None
    target: str = ""
    met: Optional[bool] = None
    note: str = ""


@dataclass
class Report:
    """The rows of one benchmark and what it measured them on."""

    name: str
    quick: bool
    rows: list[Row] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    seconds: float = 0.0
    _clock: float = field(default_factory=time.perf_counter, repr=False)
    _stacks_from: int = field(default=0, repr=False)
    _stolen: Steal = field(default_factory=lambda: Steal(), repr=False)

    def __post_init__(self) -> None:
        self.info["load_at_start"] = contention()
        self._stacks_from = len(STACK_TIMES)

    def done(self) -> list[Report]:
        """Stamp the duration, the stacks' start and stop times, and how busy the machine was
        (other people's brokers, load)."""
        self.seconds = time.perf_counter() - self._clock
        self.info["stacks"] = STACK_TIMES[self._stacks_from:]
        self.info["load_at_end"] = contention()
        self.info["host_steal_pct"] = self._stolen.percent()
        return [self]

    def add(self, case: str, value: float, unit: str, *, baseline: Optional[float] = None, baseline_case: str = "",
            target: str = "", note: str = "") -> Row:
        """A row; with a baseline its ratio is value / baseline. ``target`` is ``ratio >= x``,
        ``ratio <= x``, ``value >= x`` or ``value <= x`` and is checked here."""
        ratio = value / baseline if baseline else None
        row = Row(case, value, unit, baseline, baseline_case, ratio, target, _check(target, value, ratio), note)
        self.rows.append(row)
        return row

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "quick": self.quick, "started": self.started, "seconds": round(self.seconds, 1),
                "machine": machine(), "info": self.info, "rows": [asdict(r) for r in self.rows]}


def _check(target: str, value: float, ratio: Optional[float]) -> Optional[bool]:
    if not target:
        return None
    what, op, limit = target.split()
    subject = ratio if what == "ratio" else value
    if subject is None:
        return None
    return subject >= float(limit) if op == ">=" else subject <= float(limit)


def contention() -> dict[str, Any]:
    """Signs that something else is using the machine: load averages and nats-servers this
    process did not start."""
    try:
        pids = [int(p) for p in subprocess.run(["pgrep", "-x", "nats-server"], capture_output=True, text=True,
                                               timeout=5).stdout.split()]
    except (OSError, subprocess.SubprocessError, ValueError):
        pids = []
    return {"loadavg": [round(x, 2) for x in os.getloadavg()],
            "other_nats_servers": len([p for p in pids if p not in STARTED_BROKERS])}


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        nats_py = importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:
        nats_py = "?"
    return {"cpus": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "kernel": platform.release(), "nats_server": nats_server_version(), "nats_py": nats_py,
            "commit": git_commit()}


def git_commit() -> str:
    """The project's commit, with ``+changes`` if the work tree differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT.parent, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT.parent,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + ("+changes" if dirty else "") if head else "?"


def nats_server_version() -> str:
    from enclave_queue.broker.process import nats_server_binary

    try:
        return subprocess.run([str(nats_server_binary()), "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def fmt(value: Optional[float], unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "msgs/s":
        return f"{value / 1000:.1f}k/s" if value >= 1000 else f"{value:.0f}/s"
    if unit == "ms":
        return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    return f"{value:.3g} {unit}".strip()


def table(reports: list[Report]) -> str:
    header = ("benchmark", "case", "value", "baseline", "ratio", "target", "met")
    lines = [header]
    for report in reports:
        for r in report.rows:
            met = "" if r.met is None else ("yes" if r.met else "NO")
            lines.append((report.name, r.case, fmt(r.value, r.unit), fmt(r.baseline, r.unit),
                          f"{r.ratio:.2f}x" if r.ratio is not None else "-", r.target, met))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  [{report.name}] {r.case}: {r.note}" for report in reports for r in report.rows if r.note]
    stolen = [f"  [{report.name}] {report.info['host_steal_pct']}% of the machine's CPU time"
              for report in reports if "host_steal_pct" in report.info]
    return "\n".join(out + (["", "notes:", *notes] if notes else [])
                     + (["", "CPU time the host (hypervisor) gave to others during each benchmark:", *stolen]
                        if stolen else []))


def save(reports: list[Report]) -> Path:
    """Merge these reports into results/latest.json, or latest-quick.json for --quick runs
    (replacing earlier entries of the same name)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = QUICK_RESULTS_FILE if any(r.quick for r in reports) else RESULTS_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    benchmarks = data.get("benchmarks", {})
    for report in reports:
        benchmarks[report.name] = report.as_dict()
    data = {"updated": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
            "benchmarks": benchmarks}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


# -- processes ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def enclave_stack(env: Optional[dict[str, str]] = None, home: Optional[Path] = None, *,
                  start_timeout: float = START_TIMEOUT,
                  stop_timeout: float = STOP_TIMEOUT) -> Iterator[EnclaveStack]:
    """A whole ``enclave up`` on free 127.0.0.1 ports, stopped (broker included) however the block
    ends. Without ``home`` it runs in a temporary directory that is removed afterwards. The
    timeouts (seconds) are the harness's: a stack of thousands of queues takes longer both ways."""
    tmp = None if home is not None else Path(tempfile.mkdtemp(prefix="enclave-bench-"))
    started = time.perf_counter()
    try:
        stack = EnclaveStack.start(home or tmp / "home", env={**STACK_ENV, **(env or {})},  # type: ignore[operator]
                                   timeout=start_timeout)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    times: dict[str, Any] = {"env": env or {}, "start_s": round(time.perf_counter() - started, 2)}
    if stack.broker_pid:
        STARTED_BROKERS.append(stack.broker_pid)
    RUNNING[id(stack)] = (stack, tmp)
    try:
        yield stack
    finally:
        del RUNNING[id(stack)]
        stopping = time.perf_counter()
        times["exit_code"] = stack.stop(stop_timeout)
        times["stop_s"] = round(time.perf_counter() - stopping, 2)
        if times["stop_s"] > SLOW_STOP:
            with contextlib.suppress(OSError):
                times["log_tail"] = stack.log_path.read_text(errors="replace")[-1500:]
        STACK_TIMES.append(times)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def plain_nats(sync: str = "always", config: str = "") -> Iterator[NatsServer]:
    """A plain nats-server with JetStream (no Enclave), stopped however the block ends. With
    ``sync="always"`` it fsyncs before every ack, as a default Enclave stack's broker does (the
    jetstream block given here replaces the default one, so it names the store again).
    ``config`` is more configuration text (an ``authorization`` block, say)."""
    tmp = Path(tempfile.mkdtemp(prefix="nats-bench-"))
    store = tmp / "nats"
    extra = f'jetstream {{ store_dir: "{store / "js"}", sync_interval: always }}' if sync == "always" else ""
    server = NatsServer.start(store, config=f"{extra}\n{config}")
    STARTED_BROKERS.append(server.pid)
    RUNNING[id(server)] = (server, tmp)
    try:
        yield server
    finally:
        del RUNNING[id(server)]
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def leftover_brokers() -> list[int]:
    """Brokers this process started that are still alive (should be none)."""
    alive = []
    for pid in STARTED_BROKERS:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        # a zombie is gone for our purposes
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                continue
        alive.append(pid)
    return alive


def rss_mib(pid: int) -> float:
    """Resident memory of a process, from /proc/<pid>/status (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Steal:
    """The share of the machine's CPU time its hypervisor gave to others (``st`` in top) since this
    was made: a round run while the host was busy says so, rather than passing for the product."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[int, int]:
        # the first line of /proc/stat: user nice system idle iowait irq softirq steal (in ticks)
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return ticks[7], sum(ticks)

    def percent(self) -> float:
        steal, total = self._read()
        return round(100 * (steal - self._start[0]) / max(total - self._start[1], 1), 1)


RELOADED = b"Reloaded server configuration"  #: nats-server's log line for a configuration reload


def reloads(stack: EnclaveStack) -> int:
    """How many times the stack's broker reloaded its configuration, from its log (in operator
    mode accounts arrive as pushed JWTs, so this should stay 0)."""
    try:
        return (stack.home / "logs" / "nats-server.log").read_bytes().count(RELOADED)
    except OSError:
        return 0


def quiet(stack: EnclaveStack, timeout: float = 60.0) -> float:
    """Wait until the stack's control process and broker are idle (the background work a create,
    a delete or a fill set off is done); returns the seconds waited."""
    pids = [stack.pid] + ([stack.broker_pid] if stack.broker_pid else [])
    return settle(pids, window=0.3, timeout=timeout)


def settle(pids: list[int], *, busy: float = 0.15, window: float = 0.5, timeout: float = 60.0) -> float:
    """Wait until these processes together use less than ``busy`` of one core over ``window``
    seconds (background reconciles done); returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = sum(cpu_seconds(p) for p in pids)
        time.sleep(window)
        if (sum(cpu_seconds(p) for p in pids) - before) / window < busy:
            break
    return time.monotonic() - started


# -- raw nats-py clients ------------------------------------------------------------------------------


async def raw_connect(creds: dict[str, str]) -> Any:
    """A plain nats-py connection as the queue's own user (what any NATS client would do)."""
    return await nats.connect(creds["broker_url"], user=creds["username"], password=creds["password"],
                              inbox_prefix=creds["inbox_prefix"], pending_size=64 * 1024 * 1024,
                              allow_reconnect=False)


async def raw_pipelined(creds: dict[str, str], count: int, *, window: int = 5000, nc: Any = None) -> float:
    """Publish ``count`` messages with replies to one wildcard subscription, at most ``window``
    without a PubAck; returns the seconds until the last PubAck. Raises if any was refused."""
    own = nc is None
    nc = nc or await raw_connect(creds)
    prefix = creds["inbox_prefix"]
    acked = refused = 0
    room = asyncio.Event()
    done = asyncio.Event()

    async def on_ack(msg: Any) -> None:
        nonlocal acked, refused
        acked += 1
        if b'"seq"' not in msg.data:
            refused += 1
        room.set()
        if acked == count:
            done.set()

    sub = await nc.subscribe(f"{prefix}.bench.*", cb=on_ack)
    try:
        await nc.flush()
        subject = creds["subject"]
        started = time.perf_counter()
        for i in range(count):
            while i - acked >= window:
                room.clear()
                await asyncio.wait_for(room.wait(), 30)
            await nc.publish(subject, BODY, reply=f"{prefix}.bench.{i}")
        await asyncio.wait_for(done.wait(), 60)
        elapsed = time.perf_counter() - started
    finally:
        await sub.unsubscribe()
        if own:
            await nc.close()
    if refused:
        raise RuntimeError(f"{refused} of {count} raw publishes were refused")
    return elapsed


async def raw_sequential(creds: dict[str, str], count: int) -> float:
    """``await js.publish()`` one at a time; returns the seconds."""
    nc = await raw_connect(creds)
    try:
        js = nc.jetstream()
        started = time.perf_counter()
        for _ in range(count):
            await js.publish(creds["subject"], BODY)
        return time.perf_counter() - started
    finally:
        await nc.close()


# -- queues -------------------------------------------------------------------------------------------


def new_queue(stack: EnclaveStack, name: str, project: str = PROJECT, **settings: Any) -> dict[str, str]:
    """Create a queue through the admin API, wait until it is Ready and the stack is idle again
    (so what a benchmark measures next does not share the machine with the create's background
    work), and return its credentials."""
    with stack.admin() as admin:
        admin.create_queue(project, {"name": name, **settings})
        wait_ready(admin, project, name)
        creds = admin.credentials(project, name)
    quiet(stack)
    return creds


def wait_ready(admin: Any, project: str, name: str, *, timeout: float = 120.0) -> int:
    """Wait (long-polling the status) until the queue is Ready. Unlike AdminClient.wait_ready, an
    ``Errored`` state is waited through (the reconciler retries it); returns how many Errored
    answers were seen."""
    deadline = time.monotonic() + timeout
    errored = 0
    while True:
        remaining = deadline - time.monotonic()
        status = admin.queue_status(project, name, wait_seconds=max(0.1, min(10.0, remaining)))
        if status["observed_generation"] >= status["generation"]:
            if status["state"] == "Ready":
                return errored
            if status["state"] == "Errored":
                errored += 1
                time.sleep(0.1)  # a settled Errored answers at once: do not spin
        if time.monotonic() > deadline:
            raise TimeoutError(f"queue {project}/{name} not Ready after {timeout:g} s: {status['message']}")


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100), linear between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: list[float]) -> float:
    return statistics.median(values)


# -- rounds and spreads ---------------------------------------------------------------------------------

MIN_ROUNDS = 5  #: rounds behind any ratio that is quoted (--quick runs fewer: smoke numbers)


def round_order(round_index: int, keys: list[str]) -> list[str]:
    """The order the sides of a comparison run in a round: as given in even rounds, reversed in
    odd ones, so neither side always runs first (on a colder cache, or a store just written)."""
    return list(keys) if round_index % 2 == 0 else list(reversed(keys))


def spread(values: list[float], unit: str = "") -> str:
    """'median (min–max, n=…)' of a figure's rounds or samples."""
    return f"{fmt(median(values), unit)} ({fmt(min(values), unit)}–{fmt(max(values), unit)}, n={len(values)})"


def paired(values: list[float], baselines: list[float], unit: str) -> str:
    """A note for a row made of rounds: each side's median and spread, and the spread of the
    ratio round by round (the two sides of a round ran back to back)."""
    ratios = [v / b for v, b in zip(values, baselines, strict=True) if b]
    return (f"{len(values)} rounds, order alternated; value {spread(values, unit)}, baseline "
            f"{spread(baselines, unit)}; ratio per round {min(ratios):.2f}–{max(ratios):.2f}x")


def samples_for(q: float) -> int:
    """The fewest samples a q-th percentile is reported from: enough that five lie above it
    (p50: 10, p90: 50, p99: 500); from fewer, the 'p99' is only the largest few."""
    return math.ceil(5 / (1 - q / 100) - 1e-9)


def checked_percentile(values: list[float], q: float) -> Optional[float]:
    """The q-th percentile, or None when there are fewer than ``samples_for(q)`` samples."""
    return percentile(values, q) if len(values) >= samples_for(q) else None


# -- command line -------------------------------------------------------------------------------------


#: adds a benchmark's own command-line options to the common ones
Options = Callable[[argparse.ArgumentParser], None]


def _stop_on_term(signum: int, frame: Any) -> None:
    """A run killed with SIGTERM stops what it started and removes their directories, then exits at
    once (unwinding could wait for ever on a task a killed worker process left behind). A forked
    child has copies of what its parent started, not its own: it only exits."""
    for started, tmp in list(RUNNING.values()) if os.getpid() == _RUN_PID else []:
        with contextlib.suppress(Exception):
            started.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    os._exit(128 + signum)


def parse_args(description: str, options: Optional[Options] = None) -> argparse.Namespace:
    signal.signal(signal.SIGTERM, _stop_on_term)
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="smaller counts: a smoke run, not numbers to quote")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results/")
    if options is not None:
        options(parser)
    return parser.parse_args()


def finish(reports: list[Report], *, save_results: bool = True) -> int:
    """Print the table, save the JSON, check that no broker this run started is still alive."""
    print()
    print(table(reports))
    if save_results:
        print(f"\nresults: {save(reports).relative_to(ROOT.parent)}")
    left = leftover_brokers()
    if left:
        print(f"\nWARNING: brokers still running: {left}")
        return 1
    return 0


def main(run: Callable[..., list[Report]], description: str, options: Optional[Options] = None) -> None:
    """Entry point of ``python -m bench.<name>``. ``options`` adds the benchmark's own options;
    ``run`` gets their values as keyword arguments after ``quick``."""
    args = parse_args(description, options)
    own = {key: value for key, value in vars(args).items() if key not in ("quick", "no_save")}
    started = time.perf_counter()
    reports = run(args.quick, **own)
    print(f"\n{description}: {time.perf_counter() - started:.0f} s")
    raise SystemExit(finish(reports, save_results=not args.no_save))


def say(text: str) -> None:
    """Progress on stdout, flushed (the runs are long)."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)
