"""Create latency: ``enclave queue create NAME --wait`` with 1, 100 and 1000 queues already there.

Measured (each create alone, one after another, on a quiet stack):
- API path: ``AdminClient.create_queue`` + ``AdminClient.wait_ready``, wall time per queue;
- CLI path: the real ``enclave queue create NAME --wait`` subprocess (process start included);
- in two modes: "pool warm" (the default ``ENCLAVE_ACCOUNT_POOL=4``, and before each create the
  stack is given time to refill its spare accounts: the broker's reload log line is awaited and
  the processes are let go idle; right after the fill to the top level, throwaway creates run
  until one no longer waits for a reload, and the first is reported as "first create right after
  filling")
  and "pool off" (``ENCLAVE_ACCOUNT_POOL=0``: every create waits for a broker config reload). Pool off at the top level restarts the pool-warm stack's data
  dir with the pool off (and claims its leftover spares first).

Baseline, same run: the raw broker work a queue needs, ``add_stream`` + ``add_consumer`` with the
queue's own stream and consumer config, on a plain nats-server holding as many streams.

The existing queues are created concurrently (96 at a time) in a separate project; readiness is
long-polled and an ``Errored`` status on the way is waited through and counted. Broker RSS is sampled
at each level for bench.memory. Target: pool-warm API p50 <= 300 ms at 1000 queues.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from enclave_queue.controller import mapping
from enclave_queue.errors import EnclaveError
from enclave_queue.spec import QueueSpec
from enclave_queue.testing import EnclaveStack

from . import (
    PROJECT,
    Report,
    enclave_stack,
    main,
    median,
    percentile,
    plain_nats,
    quiet,
    rss_mib,
    say,
    wait_ready,
)

NAME = "create"
FILL_PROJECT = "fill"
FILL_CONCURRENCY = 96
ENCLAVE_CLI = Path(sys.executable).with_name("enclave")
RELOADED = b"Reloaded server configuration"


def plan(quick: bool) -> dict[str, Any]:
    """Levels of existing queues, and how many creates of each kind at each level. At the top
    level every create sets off a reload of a few seconds (and stopping the stack takes tens of
    seconds), so there are fewer there to keep ``python -m bench`` near six minutes."""
    if quick:
        return {"levels": (1, 20, 100), "warm": (5, 5, 5), "cli": (1, 1, 1), "off": (3, 3, 3), "raw": 10}
    return {"levels": (1, 100, 1000), "warm": (20, 20, 12), "cli": (3, 3, 2), "off": (10, 10, 4), "raw": 20}


class Fleet:
    """One running stack and the queues on it: fills it up, times creates."""

    def __init__(self, stack: EnclaveStack, existing: int = 0) -> None:
        self.stack = stack
        self.existing = existing  #: queues on the stack (every project)
        self.errored = 0  #: Errored readings seen while waiting for measured creates
        self.failed_waits = 0  #: AdminClient.wait_ready / CLI calls that failed on a transient Errored
        self._serial = 0
        self._clients: list[Any] = []
        self._local = threading.local()

    @property
    def log(self) -> Path:
        return self.stack.home / "logs" / "nats-server.log"

    def reloads(self) -> int:
        try:
            return self.log.read_bytes().count(RELOADED)
        except OSError:
            return 0

    def pids(self) -> list[int]:
        return [self.stack.pid] + ([self.stack.broker_pid] if self.stack.broker_pid else [])

    def rss(self) -> float:
        self.stack.refresh()
        assert self.stack.broker_pid
        return rss_mib(self.stack.broker_pid)

    def _admin(self) -> Any:
        admin = getattr(self._local, "admin", None)
        if admin is None:
            admin = self._local.admin = self.stack.admin()
            self._clients.append(admin)
        return admin

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def fill_to(self, total: int, concurrency: int = FILL_CONCURRENCY) -> tuple[float, int]:
        """Create queues concurrently until the stack holds ``total``; (seconds, Errored readings)."""
        names = [f"fill-{i:05d}" for i in range(self.existing, total)]
        if not names:
            return 0.0, 0

        def one(name: str) -> int:
            admin = self._admin()
            admin.create_queue(FILL_PROJECT, {"name": name})
            return wait_ready(admin, FILL_PROJECT, name, timeout=300)

        started = time.perf_counter()
        pool = ThreadPoolExecutor(concurrency)
        try:
            errored = sum(pool.map(one, names))
        finally:  # on Ctrl-C or a failure, do not go on creating the rest
            pool.shutdown(wait=True, cancel_futures=True)
        self.existing = total
        return time.perf_counter() - started, errored

    def _name(self, kind: str) -> str:
        self._serial += 1
        return f"{kind}-{self.existing:05d}-{self._serial:03d}"

    def _quiet(self, reloads_before: Optional[int]) -> None:
        """Before the next measured create: the pool's refill reload done (it starts a moment
        after the create that set it off), the broker in step with its file, the stack idle."""
        if reloads_before is not None:
            deadline = time.monotonic() + 15
            while self.reloads() <= reloads_before and time.monotonic() < deadline:
                time.sleep(0.05)
        quiet(self.stack)

    def api_creates(self, count: int, *, warm: bool, kind: str = "api") -> tuple[list[float], int]:
        """``count`` creates through the API, one at a time; (milliseconds each, how many of them
        had a broker reload complete while they waited: in pool-off mode that should be all of
        them, in pool-warm mode none)."""
        admin = self._admin()
        times: list[float] = []
        reloaded = 0
        self._quiet(None)
        for _ in range(count):
            name = self._name(kind)
            before = self.reloads()
            started = time.perf_counter()
            admin.create_queue(PROJECT, {"name": name})
            try:
                admin.wait_ready(PROJECT, name)
            except EnclaveError:  # a transient Errored the reconciler retries; keep waiting (counted)
                self.failed_waits += 1
                self.errored += wait_ready(admin, PROJECT, name)
            times.append((time.perf_counter() - started) * 1000)
            reloaded += self.reloads() > before
            self.existing += 1
            self._quiet(before if warm else None)
        return times, reloaded

    def cli_creates(self, count: int, *, warm: bool) -> list[float]:
        """``count`` runs of the real ``enclave queue create NAME --wait`` (milliseconds each)."""
        times: list[float] = []
        for _ in range(count):
            name = self._name("cli")
            before = self.reloads()
            started = time.perf_counter()
            done = subprocess.run([str(ENCLAVE_CLI), "queue", "create", name, "--project", PROJECT, "--wait"],
                                  env=self.stack.env, capture_output=True, timeout=120)
            elapsed = (time.perf_counter() - started) * 1000
            if done.returncode != 0:
                self.failed_waits += 1
                say(f"create: CLI create of {name} exited {done.returncode}: {done.stderr.decode()[-300:].strip()}")
                self.errored += wait_ready(self._admin(), PROJECT, name)
            times.append(elapsed)
            self.existing += 1
            self._quiet(before if warm else None)
        return times

    def warm_up(self, limit: int = 3) -> list[float]:
        """After a burst of creates the spare pool can be short (it is topped up when a create
        claims from it): create throwaway queues until one no longer waits for a reload; returns
        their times (milliseconds), the first ones being what a create right after a burst costs."""
        times: list[float] = []
        for _ in range(limit):
            one, reloaded = self.api_creates(1, warm=True, kind="first")
            times += one
            if not reloaded:
                break
        return times

    def claim_spares(self, limit: int = 10) -> int:
        """Create throwaway queues until one has to wait for a reload (no spare account left);
        returns how many were created."""
        admin = self._admin()
        for made in range(1, limit + 1):
            name = self._name("spare")
            before = self.reloads()
            admin.create_queue(PROJECT, {"name": name})
            wait_ready(admin, PROJECT, name)
            waited = self.reloads() > before
            self.existing += 1
            quiet(self.stack)
            if waited:
                return made
        return limit


# -- the raw baseline ----------------------------------------------------------------------------------


async def raw_creates(url: str, levels: tuple[int, ...], count: int) -> dict[str, Any]:
    """add_stream + add_consumer on a plain broker, ``count`` timed at each level of existing streams."""
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    existing = 0
    out: dict[str, Any] = {}

    async def make(i: int) -> float:
        queue_id = f"qraw{i:012d}"
        spec = QueueSpec(name=f"raw-{i:05d}", project=PROJECT)
        started = time.perf_counter()
        await js.add_stream(mapping.stream_config(queue_id, spec))
        await js.add_consumer(mapping.stream_config(queue_id, spec).name, mapping.consumer_config(queue_id, spec))
        return (time.perf_counter() - started) * 1000

    try:
        for level in levels:
            while existing < level:
                batch = range(existing, min(level, existing + 64))
                await asyncio.gather(*(make(i) for i in batch))
                existing += len(batch)
            times = []
            for _ in range(count):
                times.append(await make(existing))
                existing += 1
            out[str(level)] = times
    finally:
        await nc.close()
    return out


# -- the benchmark ----------------------------------------------------------------------------------------


def run(quick: bool, samples: Optional[dict[str, Any]] = None) -> list[Report]:
    """``samples``, if given, receives the broker RSS readings (for bench.memory)."""
    report = Report(NAME, quick)
    p = plan(quick)
    levels: tuple[int, ...] = p["levels"]
    top = levels[-1]
    report.info["plan"] = {**p, "fill_concurrency": FILL_CONCURRENCY}
    rss: dict[str, float] = {}
    warm: dict[int, dict[str, Any]] = {}
    off: dict[int, dict[str, Any]] = {}
    fills: dict[str, Any] = {}
    errored = failed = 0
    tmp = Path(tempfile.mkdtemp(prefix="enclave-bench-create-"))
    try:
        home = tmp / "warm"
        say(f"create: pool warm, levels {levels}, {p['warm']} API and {p['cli']} CLI creates")
        with enclave_stack(home=home) as stack:
            fleet = Fleet(stack)
            try:
                quiet(stack)
                rss["0"] = fleet.rss()
                for index, level in enumerate(levels):
                    seconds, fill_errored = fleet.fill_to(level)
                    fills[f"warm_{level}"] = {"seconds": round(seconds, 1), "errored_readings": fill_errored}
                    quiet(stack)
                    rss[str(level)] = fleet.rss()
                    say(f"create: {level} queues (filled in {seconds:.1f} s), broker RSS {rss[str(level)]:.0f} MiB")
                    first = fleet.warm_up() if level == top else []  # below it a reload is too quick to tell
                    at = fleet.existing
                    times, reloaded = fleet.api_creates(p["warm"][index], warm=True)
                    cli = fleet.cli_creates(p["cli"][index], warm=True)
                    warm[level] = {"existing": at, "api_ms": times, "cli_ms": cli, "waited_for_reload": reloaded,
                                   "first_after_fill_ms": first}
                    say(f"create: warm @{at}: API p50 {median(times):.0f} ms, CLI median {median(cli):.0f} ms")
                quiet(stack)
                rss[f"end_{fleet.existing}"] = fleet.rss()
                warm_existing = fleet.existing
                errored, failed = fleet.errored, fleet.failed_waits
            finally:
                fleet.close()

        say(f"create: pool off (ENCLAVE_ACCOUNT_POOL=0), {p['off'][:-1]} API creates at {levels[:-1]}")
        with enclave_stack({"ENCLAVE_ACCOUNT_POOL": "0"}) as stack:
            fleet = Fleet(stack)
            try:
                for index, level in enumerate(levels[:-1]):
                    seconds, fill_errored = fleet.fill_to(level)
                    fills[f"off_{level}"] = {"seconds": round(seconds, 1), "errored_readings": fill_errored}
                    quiet(stack)
                    at = fleet.existing
                    times, reloaded = fleet.api_creates(p["off"][index], warm=False)
                    off[level] = {"existing": at, "api_ms": times, "waited_for_reload": reloaded}
                    say(f"create: off @{at}: API p50 {median(times):.0f} ms")
                errored, failed = errored + fleet.errored, failed + fleet.failed_waits
            finally:
                fleet.close()

        say(f"create: pool off at {top}: restarting the pool-warm data dir with ENCLAVE_ACCOUNT_POOL=0")
        restart = time.perf_counter()
        with enclave_stack({"ENCLAVE_ACCOUNT_POOL": "0"}, home=home) as stack:
            report.info["restart_seconds"] = round(time.perf_counter() - restart, 2)
            fleet = Fleet(stack, existing=warm_existing)
            try:
                report.info["restart_settle_seconds"] = round(quiet(stack, timeout=120), 1)
                rss[f"restart_{fleet.existing}"] = fleet.rss()
                report.info["spares_claimed_before_pool_off"] = fleet.claim_spares()
                at = fleet.existing
                times, reloaded = fleet.api_creates(p["off"][-1], warm=False)
                off[top] = {"existing": at, "api_ms": times, "waited_for_reload": reloaded}
                say(f"create: off @{at}: API p50 {median(times):.0f} ms")
                errored, failed = errored + fleet.errored, failed + fleet.failed_waits
            finally:
                fleet.close()

        say(f"create: baseline, add_stream + add_consumer on a plain nats-server at {levels}")
        with plain_nats() as server:
            plain_rss = {"0": rss_mib(server.pid)}
            raw = asyncio.run(raw_creates(server.url, levels, p["raw"]))
            plain_rss[str(top + p["raw"] * len(levels))] = rss_mib(server.pid)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    report.info.update({"broker_rss_mib": rss, "plain_broker_rss_mib": plain_rss, "fills": fills,
                        "errored_readings_measured": errored, "wait_ready_failures_measured": failed,
                        "warm": {str(k): v for k, v in warm.items()}, "off": {str(k): v for k, v in off.items()},
                        "raw_ms": raw})
    for level in levels:
        base50, base95 = median(raw[str(level)]), percentile(raw[str(level)], 95)
        w, o = warm[level], off[level]
        target = "value <= 300" if level == top else ""
        report.add(f"pool warm, API p50 @{w['existing']}", median(w["api_ms"]), "ms", baseline=base50,
                   baseline_case="raw add_stream+add_consumer p50", target=target)
        report.add(f"pool warm, API p95 @{w['existing']}", percentile(w["api_ms"], 95), "ms", baseline=base95,
                   baseline_case="raw add_stream+add_consumer p95",
                   note=f"{w['waited_for_reload']} of {len(w['api_ms'])} had a broker reload complete while they waited"
                   if w["waited_for_reload"] and level == top else "")
        if level == top:
            report.add(f"first create right after filling to {level}", w["first_after_fill_ms"][0], "ms",
                       baseline=base50, baseline_case="raw add_stream+add_consumer p50",
                       note=f"creates until the pool was warm again: {[round(t) for t in w['first_after_fill_ms']]} ms; "
                       "the spare pool is topped up only when a create claims from it, so a burst leaves it short")
        report.add(f"pool warm, CLI median @{w['existing']}", median(w["cli_ms"]), "ms",
                   baseline=median(w["api_ms"]), baseline_case="API p50 at the same level (CLI overhead)")
        waited = o["waited_for_reload"]
        note = f"only {waited} of {len(o['api_ms'])} waited for a reload" if waited < len(o["api_ms"]) else ""
        report.add(f"pool off, API p50 @{o['existing']}", median(o["api_ms"]), "ms", baseline=base50,
                   baseline_case="raw add_stream+add_consumer p50", note=note)
        report.add(f"pool off, API p95 @{o['existing']}", percentile(o["api_ms"], 95), "ms", baseline=base95,
                   baseline_case="raw add_stream+add_consumer p95")
    if failed:
        report.rows[0].note = (f"{failed} measured creates saw a transient Errored status (wait_ready/CLI gave up; "
                               f"the reconciler's retry made them Ready; their time includes the retry)")
    if samples is not None:
        samples.update({"broker_rss_mib": rss, "plain_broker_rss_mib": plain_rss})
    return report.done()


if __name__ == "__main__":
    main(run, "bench.create")
