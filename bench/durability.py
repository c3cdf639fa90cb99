"""Durability cost: raw publish throughput with ``ENCLAVE_SYNC=always`` against ``interval``.

Two stacks, one after the other, one queue each; the same raw nats-py publishers as bench.send
(pipelined with a window of 5000, and ``await js.publish()`` one at a time). ``always`` makes the
broker fsync before every PubAck (the default: an acknowledged message survives an OS crash or
power loss); ``interval`` is nats-server's own default (fsync every 2 minutes, ack before that).
The baseline is ``interval``; the ratio is what the guarantee costs. Median of the rounds.
"""

from __future__ import annotations

import asyncio

from . import Report, enclave_stack, main, median, new_queue, raw_pipelined, raw_sequential, say

NAME = "durability"


async def measure(creds: dict[str, str], count: int, single: int, rounds: int) -> dict[str, list[float]]:
    await raw_pipelined(creds, min(count, 2000))  # warm-up
    rates: dict[str, list[float]] = {"raw_pipelined": [], "raw_sequential": []}
    for _ in range(rounds):
        rates["raw_pipelined"].append(count / await raw_pipelined(creds, count))
        rates["raw_sequential"].append(single / await raw_sequential(creds, single))
    return rates


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    plans = {  # sync mode: (pipelined messages per run, sequential messages per run, rounds)
        "interval": (20000, 500, 1) if quick else (60000, 2000, 2),
        "always": (4000, 200, 1) if quick else (10000, 500, 2),
    }
    report.info["plans"] = {k: {"pipelined": c, "sequential": s, "rounds": r} for k, (c, s, r) in plans.items()}
    best: dict[str, dict[str, float]] = {}
    for sync, (count, single, rounds) in plans.items():
        say(f"durability: stack ENCLAVE_SYNC={sync}, {count} pipelined / {single} sequential, {rounds} round(s)")
        with enclave_stack({"ENCLAVE_SYNC": sync}) as stack:
            creds = new_queue(stack, f"durable-{sync}")
            rates = asyncio.run(measure(creds, count, single, rounds))
        report.info[f"msgs_per_s_{sync}"] = {k: [round(v) for v in vs] for k, vs in rates.items()}
        best[sync] = {k: median(vs) for k, vs in rates.items()}
    report.add("raw pipelined, sync=always vs interval", best["always"]["raw_pipelined"], "msgs/s",
               baseline=best["interval"]["raw_pipelined"], baseline_case="raw pipelined on an ENCLAVE_SYNC=interval stack")
    report.add("await js.publish, sync=always vs interval", best["always"]["raw_sequential"], "msgs/s",
               baseline=best["interval"]["raw_sequential"], baseline_case="one at a time on an ENCLAVE_SYNC=interval stack")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.durability")
