"""Broker memory: RSS of the stack's nats-server with 0 queues and with 1000.

RSS is VmRSS from /proc/<broker pid>/status, read once the stack is idle. The baseline is the
same broker with no queues (its control-plane account, KV buckets and a pool of 4 spare
accounts only). The broker is read twice at the top level: right after the queues were created
(each create's reload leaves garbage the Go runtime has not returned yet) and after a restart of
the same data dir. For reference, a plain nats-server holding the same number of streams and
consumers in one account is measured too.

Run by ``python -m bench`` it reuses the readings bench.create took on its pool-warm stack (which
holds a few dozen measured queues on top of the level). Target: <= 256 MiB at 1000 queues.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from . import Report, enclave_stack, main, plain_nats, quiet, rss_mib, say

NAME = "memory"


def measure(quick: bool) -> dict[str, Any]:
    """Readings of bench.create's shape, taken here on a stack of our own."""
    from .create import Fleet, plan, raw_creates

    top = plan(quick)["levels"][-1]
    rss: dict[str, float] = {}
    say(f"memory: one stack, 0 then {top} queues, then restarted")
    tmp = Path(tempfile.mkdtemp(prefix="enclave-bench-memory-"))
    try:
        with enclave_stack(home=tmp / "home") as stack:
            fleet = Fleet(stack)
            try:
                quiet(stack)
                rss["0"] = fleet.rss()
                seconds, _ = fleet.fill_to(top)
                say(f"memory: {top} queues in {seconds:.1f} s")
                quiet(stack)
                rss[str(top)] = fleet.rss()
            finally:
                fleet.close()
        with enclave_stack(home=tmp / "home") as stack:
            fleet = Fleet(stack, existing=top)
            quiet(stack, timeout=120)
            rss[f"restart_{top}"] = fleet.rss()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"memory: plain nats-server, 0 then {top} streams")
    with plain_nats() as server:
        plain = {"0": rss_mib(server.pid)}
        asyncio.run(raw_creates(server.url, (top,), 0))
        time.sleep(1)
        plain[str(top)] = rss_mib(server.pid)
    return {"broker_rss_mib": rss, "plain_broker_rss_mib": plain}


def run(quick: bool, samples: Optional[dict[str, Any]] = None) -> list[Report]:
    report = Report(NAME, quick)
    if not samples:
        samples = measure(quick)
        report.info["source"] = "own stack"
    else:
        report.info["source"] = "bench.create's pool-warm stack"
    report.info.update(samples)
    rss, plain = samples["broker_rss_mib"], samples["plain_broker_rss_mib"]
    levels = sorted((int(k) for k in rss if k.isdigit()), key=int)
    top = levels[-1]
    plain_top = max(int(k) for k in plain)
    for level in levels[1:]:
        report.add(f"Enclave broker RSS, {level} queue{'' if level == 1 else 's'}", rss[str(level)], "MiB", baseline=rss["0"],
                   baseline_case="same broker, 0 queues", target="value <= 256" if level == top else "")
    ended = [k for k in rss if k.startswith("end_")]
    if ended:
        report.add(f"Enclave broker RSS, {ended[0].split('_')[1]} queues, after bench.create's measured creates",
                   rss[ended[0]], "MiB", baseline=rss["0"], baseline_case="same broker, 0 queues",
                   note="each create at this size sets off a config reload; RSS grows with every one")
    restarted = [k for k in rss if k.startswith("restart_")]
    if restarted:
        report.add(f"Enclave broker RSS, {restarted[0].split('_')[1]} queues, after a restart", rss[restarted[0]], "MiB",
                   baseline=rss["0"], baseline_case="same broker, 0 queues", target="value <= 256",
                   note="a freshly started broker: none of the garbage of the reloads that creating them caused")
    report.add(f"plain nats-server RSS, {plain_top} streams in one account", plain[str(plain_top)], "MiB",
               baseline=plain["0"], baseline_case="plain nats-server, 0 streams")
    report.add(f"Enclave broker vs plain nats-server at {top}", rss[str(top)], "MiB", baseline=plain[str(plain_top)],
               baseline_case="plain nats-server, same number of streams in one account",
               note="the difference is what one account per queue costs")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.memory")
