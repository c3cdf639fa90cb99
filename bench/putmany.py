"""put_many: one atomic batch of 100 messages against 100 single ``send`` calls, each awaited
before the next, on the same queue of a default stack (``ENCLAVE_SYNC=always``: an fsync before
every acknowledgement, where a batch shares one commit and 100 sends pay 100).

Baseline (same queue, same run): 100 × ``await queue.send(body)``. Rounds run both back to back,
the order swapped every other round; the median of each counts. Rows are batches of 100 per
second, so the ratio is how many times faster put_many stores 100 messages. Not part of
``python -m bench``: run ``python -m bench.putmany [--quick]``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from enclave_queue.client import connect

from . import BODY, Report, enclave_stack, main, median, new_queue, say

NAME = "putmany"
BATCH = 100  #: messages per put_many (its maximum) and per run of single sends


async def put_many(queue: Any) -> float:
    started = time.perf_counter()
    ids = await queue.put_many([BODY] * BATCH)
    elapsed = time.perf_counter() - started
    if len(ids) != BATCH:
        raise RuntimeError(f"put_many returned {len(ids)} ids for {BATCH} bodies")
    return elapsed


async def singles(queue: Any) -> float:
    started = time.perf_counter()
    for _ in range(BATCH):
        await queue.send(BODY)
    return time.perf_counter() - started


async def measure(creds: dict[str, str], rounds: int) -> dict[str, list[float]]:
    """Seconds per 100 messages of each path in every round; the queue is drained between rounds
    (consumed by a receive + delete) so every round starts from the same depth."""
    seconds: dict[str, list[float]] = {"put_many": [], "send": []}
    async with connect(creds) as queue:
        await put_many(queue)  # warm-up: the stream's files, the cached size limit
        await singles(queue)
        for index in range(rounds):
            pair = [("put_many", put_many), ("send", singles)]
            if index % 2:
                pair.reverse()
            for key, run_once in pair:
                seconds[key].append(await run_once(queue))
            async for message in queue.messages(batch=500, wait=0.2):
                await message.delete(confirm=False)
    return seconds


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    rounds = 3 if quick else 15
    report.info.update({"body_bytes": len(BODY), "batch": BATCH, "rounds": rounds, "sync": "always (default)"})
    say(f"putmany: {rounds} round(s) of put_many({BATCH}) vs {BATCH} awaited sends")
    with enclave_stack() as stack:
        creds = new_queue(stack, "putmany")
        seconds = asyncio.run(measure(creds, rounds))
    report.info["seconds_per_100"] = {k: [round(v, 4) for v in vs] for k, vs in seconds.items()}
    batches = {k: 1 / median(vs) for k, vs in seconds.items()}
    report.add(f"put_many({BATCH}) vs {BATCH} awaited send()", batches["put_many"], "batches of 100/s",
               baseline=batches["send"], baseline_case=f"{BATCH} × await queue.send()", target="ratio >= 1.0")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.putmany")
