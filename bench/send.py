"""Send: the SDK's ``send_batch`` and ``send`` against raw nats-py publishing on the same queue.

Baselines (same queue, same machine, same run):
- pipelined: ``nc.publish(subject, body, reply=<inbox>.bench.<i>)`` with one wildcard
  subscription counting PubAcks, at most 5000 unacknowledged;
- sequential: ``await js.publish()`` one at a time.

Both run on a default stack (``ENCLAVE_SYNC=always``: an fsync before every PubAck), where the
disk sets the pace, and again on an ``ENCLAVE_SYNC=interval`` stack, where the client does:
that second pair is what shows the SDK's own overhead. Rounds run raw and SDK back to back (the
order swapped every other round); the median of each counts. Target: SDK ``send_batch`` >= 1.0x raw pipelined (on the default stack).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from enclave_queue.client import connect

from . import BODY, Report, enclave_stack, main, median, new_queue, raw_pipelined, raw_sequential, say

NAME = "send"


async def sdk_batch(queue: Any, count: int) -> float:
    started = time.perf_counter()
    stored = await queue.send_batch([BODY] * count)
    elapsed = time.perf_counter() - started
    if stored != count:
        raise RuntimeError(f"send_batch stored {stored} of {count}")
    return elapsed


async def sdk_sequential(queue: Any, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await queue.send(BODY)
    return time.perf_counter() - started


async def measure(creds: dict[str, str], batch: int, single: int, rounds: int) -> dict[str, list[float]]:
    """msgs/s of each path in every round; each round runs raw and SDK back to back, the order
    swapped every other round (the broker's fsync rate drifts between runs)."""
    rates: dict[str, list[float]] = {"raw_pipelined": [], "sdk_batch": [], "raw_sequential": [], "sdk_sequential": []}
    async with connect(creds) as queue:
        await raw_pipelined(creds, min(batch, 2000))  # warm-up: connections, stream files
        await sdk_batch(queue, min(batch, 2000))
        for index in range(rounds):
            pair = [("raw_pipelined", lambda: raw_pipelined(creds, batch), batch),
                    ("sdk_batch", lambda: sdk_batch(queue, batch), batch),
                    ("raw_sequential", lambda: raw_sequential(creds, single), single),
                    ("sdk_sequential", lambda: sdk_sequential(queue, single), single)]
            if index % 2:
                pair = [pair[1], pair[0], pair[3], pair[2]]
            for key, run_once, count in pair:
                rates[key].append(count / await run_once())
    return rates


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    plans = {
        # sync mode: (messages per pipelined run, messages per sequential run, rounds)
        "always": (4000, 200, 1) if quick else (4000, 300, 6),
        "interval": (10000, 500, 1) if quick else (40000, 1500, 3),
    }
    report.info.update({"body_bytes": len(BODY), "window_raw": 5000, "window_sdk": "SEND_WINDOW (SDK default)",
                        "plans": {k: {"pipelined": b, "sequential": s, "rounds": r} for k, (b, s, r) in plans.items()}})
    for sync, (batch, single, rounds) in plans.items():
        say(f"send: stack ENCLAVE_SYNC={sync}, {batch} pipelined / {single} sequential, {rounds} round(s)")
        with enclave_stack({"ENCLAVE_SYNC": sync}) as stack:
            creds = new_queue(stack, f"send-{sync}")
            rates = asyncio.run(measure(creds, batch, single, rounds))
        report.info[f"msgs_per_s_{sync}"] = {k: [round(v) for v in vs] for k, vs in rates.items()}
        best = {k: median(vs) for k, vs in rates.items()}
        target = "ratio >= 1.0" if sync == "always" else ""
        report.add(f"sync={sync}: SDK send_batch vs raw pipelined", best["sdk_batch"], "msgs/s",
                   baseline=best["raw_pipelined"], baseline_case="raw nc.publish + reply, window 5000", target=target)
        report.add(f"sync={sync}: SDK send vs await js.publish", best["sdk_sequential"], "msgs/s",
                   baseline=best["raw_sequential"], baseline_case="await js.publish() one at a time")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.send")
