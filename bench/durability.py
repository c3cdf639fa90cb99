"""Durability cost: raw publish throughput with ``ENCLAVE_SYNC=always`` against ``interval``.

Two stacks, running side by side for the whole benchmark, one queue each; the same raw nats-py
publishers as bench.send (pipelined with a window of 5000, and ``await js.publish()`` one at a
time). ``always`` makes the broker fsync before every PubAck (the default: an acknowledged
message survives an OS crash or power loss); ``interval`` is nats-server's own default (fsync
every 2 minutes, ack before that). The baseline is ``interval``; the ratio is what the guarantee
costs.

Like for like: both sides publish the same number of messages in every run, and a round runs
each publisher on both stacks, which stack first alternating round by round (MIN_ROUNDS rounds).
Each row is the median of the rounds; its note gives both sides' min–max and the ratio round by
round.
"""

from __future__ import annotations

import asyncio
import contextlib

from . import (
    MIN_ROUNDS,
    Report,
    enclave_stack,
    main,
    median,
    new_queue,
    paired,
    raw_pipelined,
    raw_sequential,
    round_order,
    say,
)

NAME = "durability"
SYNCS = ["always", "interval"]


async def measure(creds: dict[str, dict[str, str]], count: int, single: int,
                  rounds: int) -> dict[str, dict[str, list[float]]]:
    """msgs/s of each publisher on each stack, round by round."""
    for sync in SYNCS:  # warm-up, both stacks
        await raw_pipelined(creds[sync], min(count, 2000))
    rates: dict[str, dict[str, list[float]]] = {sync: {"raw_pipelined": [], "raw_sequential": []} for sync in SYNCS}
    for r in range(rounds):
        for sync in round_order(r, SYNCS):
            rates[sync]["raw_pipelined"].append(count / await raw_pipelined(creds[sync], count))
        for sync in round_order(r + 1, SYNCS):  # the other stack first this time
            rates[sync]["raw_sequential"].append(single / await raw_sequential(creds[sync], single))
    return rates


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    count, single, rounds = (2000, 200, 2) if quick else (10000, 500, MIN_ROUNDS)
    report.info["plan"] = {"pipelined": count, "sequential": single, "rounds": rounds, "stacks": "side by side"}
    say(f"durability: stacks ENCLAVE_SYNC=always and interval side by side, {count} pipelined / "
        f"{single} sequential per run, {rounds} rounds")
    with contextlib.ExitStack() as stacks:
        creds = {}
        for sync in SYNCS:
            stack = stacks.enter_context(enclave_stack({"ENCLAVE_SYNC": sync}))
            creds[sync] = new_queue(stack, f"durable-{sync}")
        rates = asyncio.run(measure(creds, count, single, rounds))
    for sync in SYNCS:
        report.info[f"msgs_per_s_{sync}"] = {k: [round(v) for v in vs] for k, vs in rates[sync].items()}
    for key, case, base in (
            ("raw_pipelined", "raw pipelined, sync=always vs interval", "raw pipelined on an ENCLAVE_SYNC=interval stack"),
            ("raw_sequential", "await js.publish, sync=always vs interval",
             "one at a time on an ENCLAVE_SYNC=interval stack")):
        always, interval = rates["always"][key], rates["interval"][key]
        report.add(case, median(always), "msgs/s", baseline=median(interval), baseline_case=base,
                   note=paired(always, interval, "msgs/s"))
    return report.done()


if __name__ == "__main__":
    main(run, "bench.durability")
