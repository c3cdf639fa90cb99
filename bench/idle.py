"""Control-process cost: RSS and CPU of the ``enclave up`` Python process idle with 0, 100 and 1,000
queues, and its share of the CPU while a send and receive loop runs.

One stack with the product's defaults for its periodic work (resync 30 s, depth sampler 60 s,
dead-letter sweep 15 s: the test harness runs them every second) is filled in turn to each level
(``--levels``; 48 creates in flight, as bench.create), let go quiet, then watched for ``--window``
seconds (60 by default: two resyncs, one depth round, four sweeps): CPU from utime + stime in
/proc/<pid>/stat, RSS (VmRSS) from /proc/<pid>/status at the end, for the control process and for
its broker. The baseline of each level is the same process with no queues (the first level):
what grows beyond it is what the queues cost. ``--dead-letters`` gives the filled queues
``max_receives`` and a dead-letter queue, so the sweep (which skips queues without) has them to
walk too; ``--no-sweep`` runs the sweep once a day only, so the difference is the sweep's share.

Then a queue of its own takes a loop of ``send_batch(1000)`` and ``receive(100)`` +
``delete_many`` for ``--busy`` seconds: the control process's CPU over that time against the
broker's and the benchmark client's (which does the work). Default stack (``ENCLAVE_SYNC=always``).
Alone: ``python -m bench.idle [--quick]``; ``python -m bench`` runs it with the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from typing import Any

from enclave_queue.client import connect

from . import BODY, PRODUCT_PERIODS, Report, cpu_seconds, enclave_stack, main, new_queue, quiet, rss_mib, say

NAME = "idle"
LEVELS = (0, 100, 1000)
QUICK_LEVELS = (0, 100)
PROJECT = "idle"


def options(parser: argparse.ArgumentParser) -> None:
    from .create import counts

    parser.add_argument("--levels", type=counts, help=f"queues to watch idle, comma-separated (default "
                        f"{','.join(map(str, LEVELS))})")
    parser.add_argument("--window", type=float, help="seconds each level is watched (default 60; quick 30)")
    parser.add_argument("--busy", type=float, help="seconds of the send/receive loop (default 20; quick 8)")
    parser.add_argument("--no-sweep", action="store_true",
                        help="dead-letter sweep once a day only: what is left without it is the sweep's share")
    parser.add_argument("--dead-letters", action="store_true",
                        help="filled queues get max_receives=5 and a dead-letter queue (the sweep walks them)")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def watch(pids: dict[str, int], seconds: float) -> dict[str, dict[str, float]]:
    """CPU (% of one core) of each process over ``seconds``, and its RSS at the end."""
    before = {key: cpu_seconds(pid) for key, pid in pids.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {key: {"cpu_pct": round((cpu_seconds(pid) - before[key]) / elapsed * 100, 2),
                  "rss_mib": round(rss_mib(pid), 1)} for key, pid in pids.items()}


async def busy_loop(creds: dict[str, str], seconds: float) -> dict[str, Any]:
    """send_batch(1000) then receive(100) + delete_many until it is drained, for ``seconds``."""
    moved = 0
    async with connect(creds) as queue:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            stored = await queue.send_batch([BODY] * 1000)
            left = stored
            while left:
                msgs = await queue.receive(100, wait=1)
                if not msgs:
                    raise RuntimeError(f"busy loop: {left} of {stored} never received")
                await queue.delete_many(msgs)
                left -= len(msgs)
            moved += stored
        elapsed = time.monotonic() - started
    return {"messages": moved, "seconds": round(elapsed, 1), "msgs_per_s": round(moved / elapsed)}


def run(quick: bool, levels: tuple[int, ...] | None = None, window: float | None = None, busy: float | None = None,
        dead_letters: bool = False, no_sweep: bool = False) -> list[Report]:
    from .create import Fleet, outcome

    report = Report(NAME, quick)
    levels = levels or (QUICK_LEVELS if quick else LEVELS)
    window = window or (30.0 if quick else 60.0)
    busy = busy or (8.0 if quick else 20.0)
    env = {**PRODUCT_PERIODS, "ENCLAVE_SWEEP_SECONDS": "86400"} if no_sweep else PRODUCT_PERIODS
    report.info.update({"levels": list(levels), "window_s": window, "busy_s": busy, "env": env,
                        "dead_letters": dead_letters, "sync": "always (default)"})
    readings: dict[int, dict[str, Any]] = {}
    with enclave_stack(env) as stack:
        fleet = Fleet(stack)
        try:
            existing = 0
            if dead_letters:
                fleet.create(PROJECT, "idle-dlq")
            for level in levels:
                names = [f"idle-{i:05d}" for i in range(existing, level)]
                if names:
                    settings = {"max_receives": 5, "dead_letter_queue": "idle-dlq"} if dead_letters else {}
                    seconds, made = fleet.many(PROJECT, names) if not settings else _many(fleet, names, settings)
                    failed = outcome(made)["failures"]
                    say(f"idle: {level} queues ({len(names)} made in {seconds:.0f} s, {failed} failed)")
                existing = max(existing, level)
                settled = quiet(stack, timeout=180)
                stack.refresh()
                assert stack.broker_pid
                seen = watch({"control": stack.pid, "broker": stack.broker_pid}, window)
                readings[level] = {**seen, "settle_s": round(settled, 1)}
                say(f"idle: {level} queues: control {seen['control']['cpu_pct']:.2f}% CPU, "
                    f"{seen['control']['rss_mib']:.0f} MiB; broker {seen['broker']['cpu_pct']:.2f}% CPU")
        finally:
            fleet.close()
        creds = new_queue(stack, "idle-busy", project=PROJECT)
        pids = {"control": stack.pid, "broker": stack.broker_pid or 0}
        before = {key: cpu_seconds(pid) for key, pid in pids.items()}
        mine = own_cpu()
        started = time.monotonic()
        loop = asyncio.run(busy_loop(creds, busy))
        elapsed = time.monotonic() - started
        used = {key: (cpu_seconds(pid) - before[key]) for key, pid in pids.items()}
        used["client"] = own_cpu() - mine
    total = sum(used.values())
    busy_pct = {key: round(value / elapsed * 100, 1) for key, value in used.items()}
    report.info.update({"readings": {str(k): v for k, v in readings.items()}, "busy": {**loop, "cpu_pct": busy_pct}})
    base = readings[levels[0]]["control"]
    for level in levels:
        control = readings[level]["control"]
        note = (f"broker {readings[level]['broker']['cpu_pct']:.2f}% CPU, {readings[level]['broker']['rss_mib']:.0f} "
                f"MiB; {window:g} s window")
        report.add(f"control CPU idle, {level} queues", control["cpu_pct"], "% of a core",
                   baseline=base["cpu_pct"] or None, baseline_case=f"{levels[0]} queues", note=note)
        report.add(f"control RSS idle, {level} queues", control["rss_mib"], "MiB", baseline=base["rss_mib"],
                   baseline_case=f"{levels[0]} queues")
    report.add("control CPU share while send/receive runs", used["control"] / total * 100, "% of all",
               note=f"{loop['msgs_per_s']} msg/s sent and received over {loop['seconds']} s; % of a core: "
                    f"control {busy_pct['control']}, broker {busy_pct['broker']}, client {busy_pct['client']}")
    return report.done()


def _many(fleet: Any, names: list[str], settings: dict[str, Any]) -> tuple[float, list[Any]]:
    """Fleet.many with queue settings (Fleet.create takes a name only)."""
    from concurrent.futures import ThreadPoolExecutor

    from .create import CONCURRENCY, Created

    def one(name: str) -> Created:
        admin = fleet.admin()
        started = time.perf_counter()
        admin.create_queue(PROJECT, {"name": name, **settings})
        admin.wait_ready(PROJECT, name, timeout=120)
        return Created(name, (time.perf_counter() - started) * 1000, ready_ms=0)

    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        made = list(pool.map(one, names))
    return time.perf_counter() - started, made


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main(run, "bench.idle", options)
