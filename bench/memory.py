"""Broker memory: RSS of the stack's nats-server after creating 1000 and 3000 queues.

RSS is VmRSS from /proc/<broker pid>/status, read right after the creates (48 in flight) and again
once the stack is idle. Baseline: a plain nats-server holding as many streams and consumers in one
account (what the queues' JetStream state costs without an account each); the empty broker is kept
for reference. The stack's broker runs under its memory limit (``ENCLAVE_BROKER_MEMORY``, its
GOMEMLIMIT, 512 MiB by default): near it the Go runtime collects garbage harder rather than grow.

Run alone it fills one stack to each level in turn (``--levels``), then restarts it on the same data
dir: a freshly started broker holds only what the queues need, so what the first reading has above
it is heap the Go runtime has not returned. Run by ``python -m bench`` it reports the readings of
bench.create's bursts (a fresh stack each, no restart). Goals (issue 14): <= 200 MiB after 1000
creates, <= 512 MiB after 3000.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from . import PRODUCT_PERIODS, Report, enclave_stack, main, plain_nats, quiet, rss_mib, say, settle

NAME = "memory"
LEVELS = (1000, 3000)
QUICK_LEVELS = (100,)
#: seconds the harness gives the filled stack to stop and to start again: its broker writes (and
#: at a start reads) the state of 3,000 streams (the product waits for it: broker/supervisor.py)
RESTART_TIMEOUT = 180.0


def options(parser: argparse.ArgumentParser) -> None:
    from .create import counts

    parser.add_argument("--levels", type=counts, help="queues to fill the stack to, in turn, comma-separated "
                        f"(default {','.join(map(str, LEVELS))})")


def measure(levels: tuple[int, ...]) -> dict[str, Any]:
    """Readings of bench.create's shape (``levels``: {level: {enclave: {...}, plain: {...}}}), taken
    on a stack of our own, and the restart."""
    from .create import FILL_PROJECT, Fleet, log_problems, outcome, raw_creates

    out: dict[str, Any] = {"source": "own stack, filled to each level in turn", "levels": {}}
    say(f"memory: one stack, filled to {levels}, then restarted")
    tmp = Path(tempfile.mkdtemp(prefix="enclave-bench-memory-"))
    try:
        with enclave_stack(PRODUCT_PERIODS, home=tmp / "home", stop_timeout=RESTART_TIMEOUT) as stack:
            fleet = Fleet(stack)
            try:
                quiet(stack, timeout=60)
                empty, existing = fleet.rss(), 0
                for level in levels:
                    seconds, made = fleet.many(FILL_PROJECT, [f"fill-{i:05d}" for i in range(existing, level)])
                    existing = max(existing, level)
                    after = fleet.rss()
                    settled = fleet.settle()
                    failed = outcome(made)["failures"]
                    out["levels"][str(level)] = {"enclave": {
                        "empty": round(empty, 1), "after": round(after, 1), "idle": round(fleet.rss(), 1),
                        "settle": settled, "fill_seconds": round(seconds, 1), "fill_failures": failed}}
                    say(f"memory: {level} queues in {seconds:.1f} s ({failed} failed), broker RSS {after:.0f} MiB")
                out["logs"] = log_problems(stack)
            finally:
                fleet.close()
        started = time.perf_counter()
        with enclave_stack(PRODUCT_PERIODS, home=tmp / "home", start_timeout=RESTART_TIMEOUT,
                           stop_timeout=RESTART_TIMEOUT) as stack:
            out["restart"] = {"queues": levels[-1], "start_s": round(time.perf_counter() - started, 1),
                              "settle_s": round(quiet(stack, timeout=120), 1)}
            stack.refresh()
            assert stack.broker_pid
            out["restart"]["mib"] = round(rss_mib(stack.broker_pid), 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    say(f"memory: plain nats-server, filled to {levels} streams")
    with plain_nats() as server:
        plain_empty = rss_mib(server.pid)

        def read(level: int) -> None:
            after = rss_mib(server.pid)
            settle([server.pid], timeout=60)
            out["levels"][str(level)]["plain"] = {"empty": round(plain_empty, 1), "after": round(after, 1),
                                                  "idle": round(rss_mib(server.pid), 1)}

        asyncio.run(raw_creates(server.url, levels, 0, at_level=read))
    return out


def run(quick: bool, samples: Optional[dict[str, Any]] = None, levels: Optional[tuple[int, ...]] = None) -> list[Report]:
    from .create import RSS_GOALS

    report = Report(NAME, quick)
    if not samples:
        samples = measure(levels or (QUICK_LEVELS if quick else LEVELS))
    report.info.update(samples)
    for level, data in sorted(samples["levels"].items(), key=lambda kv: int(kv[0])):
        enclave, plain = data["enclave"], data["plain"]
        goal = RSS_GOALS.get(int(level))
        target = f"value <= {goal}" if goal else ""
        report.add(f"Enclave broker RSS right after {level} creates", enclave["after"], "MiB", baseline=plain["after"],
                   baseline_case=f"plain nats-server, {level} streams+consumers in one account", target=target,
                   note=f"empty: Enclave {enclave['empty']:.0f} MiB, plain {plain['empty']:.0f} MiB")
        report.add(f"Enclave broker RSS, {level} queues, idle", enclave["idle"], "MiB", baseline=plain["idle"],
                   baseline_case="the plain server, idle", target=target)
    restart = samples.get("restart")
    if restart:
        top = samples["levels"][str(restart["queues"])]
        report.add(f"Enclave broker RSS, {restart['queues']} queues, after a restart", restart["mib"], "MiB",
                   baseline=top["plain"]["idle"], baseline_case="the plain server, idle",
                   note="a freshly started broker holds only what the queues need")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.memory", options)
