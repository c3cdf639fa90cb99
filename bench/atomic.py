"""Atomic batches by size: what staging a JetStream atomic batch costs the broker, against the same
messages published one by one, on a plain nats-server that fsyncs every write (as the default
stack's broker does). Where the SDK's ``send_batch`` and group commit (client/grouping.py
MIN_GROUP) and the dead-letter mover's copies (broker/connection.py ATOMIC_FROM) switch to atomic
batches comes from here.

For each size n: n messages of 256 bytes as one atomic batch (``Nats-Batch-Id`` and
``-Sequence``, the commit on the last, only the commit answered) against n requests sent
together, each awaited for its PubAck. Once on one stream (a caller's batch) and once on
``STREAMS`` streams side by side (the mover copying many queues' letters at once). The figures
are the broker's CPU a message (from /proc) and messages a second, one by one against batched:
a CPU ratio above 1 says the batch costs the broker less, a msg/s ratio above 1 that one by one
is faster. The sizes run in turn, each round alternating which
side goes first. Not part of ``python -m bench``: run ``python -m bench.atomic [--quick]``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats
from nats.js import api
from nats.nuid import NUID

from . import BODY, Report, cpu_seconds, main, median, plain_nats, say

NAME = "atomic"
SIZES = (2, 8, 16, 32, 48, 64)
STREAMS = 50
MESSAGES = 512  #: a side's messages a stream, in each size's round (on one stream, STREAMS // 8 times as many:
#: /proc counts the broker's CPU in 10 ms ticks)


async def _batch(nc: Any, subject: str, n: int, ids: NUID) -> None:
    batch = ids.next().decode()
    for position in range(1, n):
        await nc.publish(subject, BODY, headers={"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(position)})
    reply = await nc.request(subject, BODY, timeout=10, headers={
        "Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(n), "Nats-Batch-Commit": "1"})
    answer = json.loads(reply.data)
    if answer.get("count") != n:
        raise RuntimeError(f"atomic batch of {n} not stored whole: {answer}")


async def _singles(nc: Any, subject: str, n: int) -> None:
    answers = await asyncio.gather(*(nc.request(subject, BODY, timeout=10) for _ in range(n)))
    if any(b'"seq"' not in answer.data for answer in answers):
        raise RuntimeError("a publish was refused")


async def _side(nc: Any, pid: int, streams: int, n: int, batched: bool, messages: int) -> tuple[float, float]:
    """(broker CPU µs a message, messages a second) for one side."""
    ids = NUID()
    calls = max(1, messages // n)

    async def one(stream: int) -> None:
        for _ in range(calls):
            if batched:
                await _batch(nc, f"atomic.{stream}", n, ids)
            else:
                await _singles(nc, f"atomic.{stream}", n)

    cpu, started = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(one(stream) for stream in range(streams)))
    elapsed, used = time.perf_counter() - started, cpu_seconds(pid) - cpu
    total = streams * calls * n
    return used * 1e6 / total, total / elapsed


async def measure(url: str, pid: int, rounds: int, messages: int) -> dict[str, dict[str, list[float]]]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for stream in range(STREAMS):
            await js.add_stream(api.StreamConfig(name=f"atomic-{stream}", subjects=[f"atomic.{stream}"],
                                                 allow_atomic=True, storage=api.StorageType.FILE))
        await _side(nc, pid, STREAMS, 8, True, 64)  # warm-up: every stream's files
        await _side(nc, pid, STREAMS, 8, False, 64)
        found: dict[str, dict[str, list[float]]] = {}
        for streams in (1, STREAMS):
            for n in SIZES:
                figures = found[f"{streams}x{n}"] = {"batch_us": [], "single_us": [], "batch_rate": [], "single_rate": []}
                for index in range(rounds):
                    for batched in ((True, False) if index % 2 == 0 else (False, True)):
                        side = "batch" if batched else "single"
                        us, rate = await _side(nc, pid, streams, n, batched,
                                               messages * (STREAMS // 8 if streams == 1 else 1))
                        figures[f"{side}_us"].append(us)
                        figures[f"{side}_rate"].append(rate)
        return found
    finally:
        await nc.close()


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    rounds, messages = (1, 128) if quick else (3, MESSAGES)
    report.info.update({"body_bytes": len(BODY), "sizes": SIZES, "streams": STREAMS, "rounds": rounds,
                        "messages_a_stream": messages, "sync": "always"})
    say(f"atomic: batches of {SIZES} against one by one, on 1 and {STREAMS} streams, {rounds} round(s)")
    with plain_nats("always") as server:
        found = asyncio.run(measure(server.url, server.pid, rounds, messages))
    report.info["figures"] = {k: {f: [round(v, 1) for v in vs] for f, vs in figs.items()} for k, figs in found.items()}
    for key, figures in found.items():
        streams, n = key.split("x")
        where = "1 stream" if streams == "1" else f"{streams} streams side by side"
        report.add(f"{where}: broker CPU a message, one by one vs a batch of {n}", median(figures["single_us"]),
                   "µs/msg", baseline=median(figures["batch_us"]), baseline_case=f"atomic batch of {n}")
        report.add(f"{where}: msg/s, one by one vs a batch of {n}", median(figures["single_rate"]), "msgs/s",
                   baseline=median(figures["batch_rate"]), baseline_case=f"atomic batch of {n}")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.atomic")
