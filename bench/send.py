"""Send: the SDK's ``send_batch``, concurrent ``put``s and ``send`` against raw nats-py publishing
of the same messages on the same queue.

Pairs (SDK against its baseline, the same number of 256-byte messages on both sides):
- ``send_batch`` of 1000, called one after another, against raw pipelining:
  ``nc.publish(subject, body, reply=<inbox>.bench.<i>)`` with one wildcard subscription counting
  PubAcks, at most 5000 unacknowledged. On the default stack ``send_batch`` is a group commit (one
  atomic batch, one fsync, a call); on ``interval`` it is pipelined as the baseline is.
- ``CONCURRENCY`` tasks each ``await queue.put()`` in a loop (so that many puts are always on
  their way: group-committed on the default stack) against as many tasks each
  ``await js.publish()`` in a loop on one raw connection.
- ``await queue.send()`` one at a time against ``await js.publish()`` one at a time.

Both run on a default stack (``ENCLAVE_SYNC=always``: an fsync before every PubAck), where the
disk sets the pace, and on an ``ENCLAVE_SYNC=interval`` stack, where the client does. The queue
has room for every message of the run (``max_bytes`` 1 GiB). Every round runs each pair back to
back, which side first alternating round by round; MIN_ROUNDS rounds (INTERVAL_ROUNDS times as
many on ``interval``), the median counts and the spread is printed. Targets (issue 16): ``send_batch`` >= 3x raw
pipelining on the default stack, and no slower than before on ``interval`` (0.95x then).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from enclave_queue.client import connect

from . import (
    BODY,
    MIN_ROUNDS,
    Report,
    enclave_stack,
    main,
    median,
    new_queue,
    paired,
    raw_connect,
    raw_pipelined,
    raw_sequential,
    round_order,
    say,
)

NAME = "send"
BATCH = 1000  #: bodies a send_batch call (its most)
CONCURRENCY = 100  #: put loops running at once
#: on ``interval`` a pipelined run lasts under a second and its ratio to the baseline swings from
#: 0.7x to 1.3x round to round (the two processes' scheduling on 2 cores): three times as many
#: rounds there, so the median says more than the spread
INTERVAL_ROUNDS = 3


async def sdk_batch(queue: Any, count: int) -> float:
    started = time.perf_counter()
    stored = 0
    for left in range(count, 0, -BATCH):
        stored += await queue.send_batch([BODY] * min(BATCH, left))
    elapsed = time.perf_counter() - started
    if stored != count:
        raise RuntimeError(f"send_batch stored {stored} of {count}")
    return elapsed


async def loops(count: int, put: Callable[[], Awaitable[Any]]) -> float:
    """``count`` puts made by CONCURRENCY loops at once; the seconds until the last returned."""
    async def loop(n: int) -> None:
        for _ in range(n):
            await put()

    share, extra = divmod(count, CONCURRENCY)
    started = time.perf_counter()
    await asyncio.gather(*(loop(share + (i < extra)) for i in range(CONCURRENCY)))
    return time.perf_counter() - started


async def sdk_sequential(queue: Any, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await queue.send(BODY)
    return time.perf_counter() - started


async def measure(creds: dict[str, str], counts: dict[str, int], rounds: int) -> dict[str, list[float]]:
    """msgs/s of each side in every round."""
    nc = await raw_connect(creds)
    js = nc.jetstream()
    subject = creds["subject"]
    try:
        async with connect(creds) as queue:
            pairs: dict[str, list[tuple[str, Callable[[], Awaitable[float]], int]]] = {
                "batch": [("raw_pipelined", lambda: raw_pipelined(creds, counts["batch"], nc=nc), counts["batch"]),
                          ("sdk_batch", lambda: sdk_batch(queue, counts["batch"]), counts["batch"])],
                "concurrent": [("raw_concurrent", lambda: loops(counts["concurrent"], lambda: js.publish(subject, BODY)),
                                counts["concurrent"]),
                               ("sdk_concurrent", lambda: loops(counts["concurrent"], lambda: queue.put(BODY)),
                                counts["concurrent"])],
                "sequential": [("raw_sequential", lambda: raw_sequential(creds, counts["sequential"]),
                                counts["sequential"]),
                               ("sdk_sequential", lambda: sdk_sequential(queue, counts["sequential"]),
                                counts["sequential"])],
            }
            rates: dict[str, list[float]] = {key: [] for pair in pairs.values() for key, _, _ in pair}
            await raw_pipelined(creds, 1000, nc=nc)  # warm-up: connections, stream files, the SDK's settings
            await sdk_batch(queue, 1000)
            for index in range(rounds):
                for pair in pairs.values():
                    sides = {key: (fn, n) for key, fn, n in pair}
                    for key in round_order(index, list(sides)):
                        fn, n = sides[key]
                        rates[key].append(n / await fn())
    finally:
        await nc.close()
    return rates


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    rounds = 1 if quick else MIN_ROUNDS
    plans = {
        "always": {"batch": 4000, "concurrent": 2000, "sequential": 300} if not quick else
                  {"batch": 2000, "concurrent": 1000, "sequential": 100},
        "interval": {"batch": 40000, "concurrent": 10000, "sequential": 1500} if not quick else
                    {"batch": 10000, "concurrent": 2000, "sequential": 300},
    }
    report.info.update({"body_bytes": len(BODY), "window_raw": 5000, "send_batch_size": BATCH,
                        "concurrency": CONCURRENCY, "rounds": rounds, "interval_rounds": rounds * INTERVAL_ROUNDS,
                        "plans": plans})
    rows = [("SDK send_batch(1000) vs raw pipelined", "sdk_batch", "raw_pipelined",
             "raw nc.publish + reply, window 5000"),
            (f"SDK put, {CONCURRENCY} at once vs js.publish, {CONCURRENCY} at once", "sdk_concurrent", "raw_concurrent",
             f"{CONCURRENCY} loops of await js.publish() on one connection"),
            ("SDK send vs await js.publish", "sdk_sequential", "raw_sequential", "await js.publish() one at a time")]
    for sync, counts in plans.items():
        runs = rounds * INTERVAL_ROUNDS if sync == "interval" and not quick else rounds
        say(f"send: stack ENCLAVE_SYNC={sync}, {counts}, {runs} round(s)")
        with enclave_stack({"ENCLAVE_SYNC": sync}) as stack:
            creds = new_queue(stack, f"send-{sync}", max_bytes=1 << 30)
            rates = asyncio.run(measure(creds, counts, runs))
        report.info[f"msgs_per_s_{sync}"] = {k: [round(v) for v in vs] for k, vs in rates.items()}
        for case, key, against, baseline_case in rows:
            target = ""
            if key == "sdk_batch":
                target = "ratio >= 3.0" if sync == "always" else "ratio >= 0.95"
            note = paired(rates[key], rates[against], "msgs/s") if rounds > 1 else ""
            report.add(f"sync={sync}: {case}", median(rates[key]), "msgs/s", baseline=median(rates[against]),
                       baseline_case=baseline_case, target=target, note=note)
    return report.done()


if __name__ == "__main__":
    main(run, "bench.send")
