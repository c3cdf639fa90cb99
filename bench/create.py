"""Create latency: ``enclave queue create NAME --wait`` with 1, 100 and 1000 queues already there.

Measured (each create alone, one after another, on a quiet stack):
- API path: ``AdminClient.create_queue`` + ``AdminClient.wait_ready``, wall time per queue;
- the same with a new TCP connection per request (a diagnostic: see ``Fleet.fresh_admin``);
- CLI path: the real ``enclave queue create NAME --wait`` subprocess (process start included);
- in two modes: "pool warm" (the default ``ENCLAVE_ACCOUNT_POOL=4``, and before each create the
  stack is given time to refill its spare accounts: the broker's reload log line is awaited and
  the processes are let go idle) and "pool off" (``ENCLAVE_ACCOUNT_POOL=0``: every create waits
  for a broker config reload). Pool off at the top level restarts the pool-warm stack's data
  dir with the pool off (and claims its leftover spares first).

Baseline, same run: the raw broker work a queue needs, ``add_stream`` + ``add_consumer`` with the
queue's own stream and consumer config, on a plain nats-server holding as many streams.

The existing queues are created concurrently (96 at a time) in a separate project; readiness is
polled and an ``Errored`` status on the way is waited through and counted. Broker RSS is sampled
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

import httpx

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
    rss_mib,
    say,
    settle,
    wait_ready,
)

NAME = "create"
FILL_PROJECT = "fill"
FILL_CONCURRENCY = 96
FILL_POLL = 0.5  #: seconds between status polls of each filling thread (keeps the API's load down)
ENCLAVE_CLI = Path(sys.executable).with_name("enclave")
RELOADED = b"Reloaded server configuration"


def plan(quick: bool) -> dict[str, Any]:
    if quick:
        return {"levels": (1, 20, 100), "warm": 5, "off": 3, "cli": 1, "fresh": 3, "raw": 10}
    return {"levels": (1, 100, 1000), "warm": 20, "off": 10, "cli": 2, "fresh": 5, "raw": 20}


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

    def fresh_admin(self) -> Any:
        """An AdminClient that opens a new TCP connection for every request. Diagnostic only: the
        API's listening socket is created without IPPROTO_TCP, so asyncio leaves Nagle on and a
        response on a kept-alive connection waits ~40 ms for the client's delayed ACK; a fresh
        connection does not."""
        admin = self.stack.admin()
        admin._http.close()
        admin._http = httpx.Client(base_url=admin.url, headers={"Authorization": f"Bearer {self.stack.token}"},
                                   timeout=30.0, limits=httpx.Limits(max_keepalive_connections=0))
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
            return wait_ready(admin, FILL_PROJECT, name, timeout=300, poll=FILL_POLL)

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            errored = sum(pool.map(one, names))
        self.existing = total
        return time.perf_counter() - started, errored

    def _name(self, kind: str) -> str:
        self._serial += 1
        return f"{kind}-{self.existing:05d}-{self._serial:03d}"

    def _quiet(self, reloads_before: Optional[int]) -> None:
        """Before the next measured create: the pool's refill reload done, the stack idle."""
        if reloads_before is not None:
            deadline = time.monotonic() + 15
            while self.reloads() <= reloads_before and time.monotonic() < deadline:
                time.sleep(0.05)
        settle(self.pids(), window=0.3, timeout=20)

    def api_creates(self, count: int, *, warm: bool, fresh: bool = False) -> tuple[list[float], int]:
        """``count`` creates through the API, one at a time; (milliseconds each, how many of them
        were followed by no reload at all — in pool-off mode that means a leftover spare)."""
        admin = self.fresh_admin() if fresh else self._admin()
        times: list[float] = []
        no_reload = 0
        self._quiet(None)
        for _ in range(count):
            name = self._name("api")
            before = self.reloads()
            started = time.perf_counter()
            admin.create_queue(PROJECT, {"name": name})
            try:
                admin.wait_ready(PROJECT, name)
            except EnclaveError:  # a transient Errored the reconciler retries; keep waiting (counted)
                self.failed_waits += 1
                self.errored += wait_ready(admin, PROJECT, name)
            times.append((time.perf_counter() - started) * 1000)
            self.existing += 1
            self._quiet(before if warm else None)
            no_reload += self.reloads() == before
        return times, no_reload

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

    def claim_spares(self, limit: int = 10) -> int:
        """Create throwaway queues until one needs a reload (no spare account left); returns how many."""
        admin = self._admin()
        for made in range(1, limit + 1):
            name = self._name("spare")
            before = self.reloads()
            admin.create_queue(PROJECT, {"name": name})
            wait_ready(admin, PROJECT, name)
            self.existing += 1
            settle(self.pids(), window=0.3, timeout=20)
            if self.reloads() > before:
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
    started = time.perf_counter()
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
        say(f"create: pool warm, levels {levels}, {p['warm']} API + {p['cli']} CLI creates each")
        with enclave_stack(home=home) as stack:
            fleet = Fleet(stack)
            try:
                settle(fleet.pids(), timeout=20)
                rss["0"] = fleet.rss()
                for level in levels:
                    seconds, fill_errored = fleet.fill_to(level)
                    fills[f"warm_{level}"] = {"seconds": round(seconds, 1), "errored_readings": fill_errored}
                    settle(fleet.pids(), timeout=60)
                    rss[str(level)] = fleet.rss()
                    say(f"create: {level} queues (filled in {seconds:.1f} s), broker RSS {rss[str(level)]:.0f} MiB")
                    at = fleet.existing
                    times, _ = fleet.api_creates(p["warm"], warm=True)
                    cli = fleet.cli_creates(p["cli"], warm=True)
                    fresh, _ = fleet.api_creates(p["fresh"], warm=True, fresh=True)
                    warm[level] = {"existing": at, "api_ms": times, "cli_ms": cli, "fresh_connection_api_ms": fresh}
                    say(f"create: warm @{at}: API p50 {median(times):.0f} ms, CLI median {median(cli):.0f} ms, "
                        f"API with fresh connections p50 {median(fresh):.0f} ms")
                settle(fleet.pids(), timeout=60)
                rss[f"end_{fleet.existing}"] = fleet.rss()
                warm_existing = fleet.existing
                errored, failed = fleet.errored, fleet.failed_waits
            finally:
                fleet.close()
            stopping = time.perf_counter()
        report.info[f"stop_seconds_{warm_existing}"] = round(time.perf_counter() - stopping, 1)

        say(f"create: pool off (ENCLAVE_ACCOUNT_POOL=0), {p['off']} API creates at {levels[:-1]}")
        with enclave_stack({"ENCLAVE_ACCOUNT_POOL": "0"}) as stack:
            fleet = Fleet(stack)
            try:
                for level in levels[:-1]:
                    seconds, fill_errored = fleet.fill_to(level)
                    fills[f"off_{level}"] = {"seconds": round(seconds, 1), "errored_readings": fill_errored}
                    settle(fleet.pids(), timeout=60)
                    at = fleet.existing
                    times, no_reload = fleet.api_creates(p["off"], warm=False)
                    off[level] = {"existing": at, "api_ms": times, "without_reload": no_reload}
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
                report.info["restart_settle_seconds"] = round(settle(fleet.pids(), timeout=120), 1)
                rss[f"restart_{fleet.existing}"] = fleet.rss()
                report.info["spares_claimed_before_pool_off"] = fleet.claim_spares()
                at = fleet.existing
                times, no_reload = fleet.api_creates(p["off"], warm=False)
                off[top] = {"existing": at, "api_ms": times, "without_reload": no_reload}
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
                   baseline_case="raw add_stream+add_consumer p95")
        report.add(f"pool warm, CLI median @{w['existing']}", median(w["cli_ms"]), "ms",
                   baseline=median(w["api_ms"]), baseline_case="API p50 at the same level (CLI overhead)")
        report.add(f"pool warm, API p50, new TCP connection per request @{w['existing']}",
                   median(w["fresh_connection_api_ms"]), "ms", baseline=base50,
                   baseline_case="raw add_stream+add_consumer p50",
                   note="diagnostic: sidesteps the ~40 ms Nagle/delayed-ACK wait per kept-alive API response"
                   if level == top else "")
        note = f"{o['without_reload']} of {len(o['api_ms'])} needed no reload" if o["without_reload"] else ""
        report.add(f"pool off, API p50 @{o['existing']}", median(o["api_ms"]), "ms", baseline=base50,
                   baseline_case="raw add_stream+add_consumer p50", note=note)
        report.add(f"pool off, API p95 @{o['existing']}", percentile(o["api_ms"], 95), "ms", baseline=base95,
                   baseline_case="raw add_stream+add_consumer p95")
    if failed:
        report.rows[0].note = (f"{failed} measured creates saw a transient Errored status (wait_ready/CLI gave up; "
                               f"the reconciler's retry made them Ready; their time includes the retry)")
    if samples is not None:
        samples.update({"broker_rss_mib": rss, "plain_broker_rss_mib": plain_rss})
    report.seconds = time.perf_counter() - started
    return [report]


if __name__ == "__main__":
    main(run, "bench.create")
