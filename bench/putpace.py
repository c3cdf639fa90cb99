"""How long a put waits for its PubAck at a steady 1,000 puts a second on the default stack, with
up to ``grouping.PIPELINE`` puts side by side against one at a time (the SDK's behaviour before),
and raw nats-py ``js.publish`` as the baseline.

Puts are paced open loop (put i is due at start + i / RATE, as a task of its own, whether or not
the ones before were answered), so at this rate a few are on their way at any moment. With one at
a time, each put made while another is on its way waits for that one's PubAck before it goes;
side by side, up to PIPELINE go at once and only those past them wait (grouping.py). The three
sides alternate, the order reversed every other round; a round's figures are its p50 and p99, and
the rows give the median of the rounds', with each round's share of the CPU the host took.
Not part of ``python -m bench``: run ``python -m bench.putpace [--quick]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from enclave_queue.client import connect, grouping

from . import BODY, Report, Steal, enclave_stack, main, median, new_queue, percentile, raw_connect, say

NAME = "putpace"
RATE = 1000  #: puts a second
SIDES = ["one at a time", "side by side", "raw"]


async def paced(put: Callable[[bytes], Awaitable[Any]], count: int) -> list[float]:
    """Milliseconds from each put's call to its return, ``count`` puts at RATE a second."""
    taken: list[float] = []

    async def timed() -> None:
        before = time.perf_counter()
        await put(BODY)
        taken.append((time.perf_counter() - before) * 1000)

    tasks = []
    started = time.perf_counter()
    for i in range(count):
        pause = started + i / RATE - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        tasks.append(asyncio.ensure_future(timed()))
    await asyncio.gather(*tasks)
    return taken


async def measure(creds: dict[str, str], rounds: int, count: int) -> dict[str, list[tuple[float, float, float]]]:
    found: dict[str, list[tuple[float, float, float]]] = {side: [] for side in SIDES}
    pipeline = grouping.PIPELINE
    async with connect(creds) as queue:
        nc = await raw_connect(creds)
        js, subject = nc.jetstream(), creds["subject"]
        try:
            await queue.put("warm-up")  # connected, settings read
            for r in range(rounds):
                for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                    stolen = Steal()
                    if side == "raw":
                        taken = await paced(lambda body: js.publish(subject, body), count)
                    else:
                        grouping.PIPELINE = 1 if side == "one at a time" else pipeline
                        try:
                            taken = await paced(queue.put, count)
                        finally:
                            grouping.PIPELINE = pipeline
                    found[side].append((percentile(taken, 50), percentile(taken, 99), stolen.percent()))
                    say(f"putpace: round {r + 1}, {side}: p50 {found[side][-1][0]:.2f} ms, "
                        f"p99 {found[side][-1][1]:.2f} ms, CPU stolen by the host {found[side][-1][2]}%")
        finally:
            await nc.close()
    return found


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    rounds, count = (2, 1000) if quick else (8, 3 * RATE)
    report.info.update({"rate": RATE, "puts_a_round": count, "rounds": rounds, "pipeline": grouping.PIPELINE,
                        "sync": "always (default)"})
    say(f"putpace: {rounds} rounds of {count} puts at {RATE}/s: one at a time, side by side, raw")
    with enclave_stack() as stack:
        creds = new_queue(stack, "putpace")
        found = asyncio.run(measure(creds, rounds, count))
    report.info["rounds_p50_p99_steal"] = {side: [[round(x, 2) for x in r] for r in rs] for side, rs in found.items()}
    for q, name in ((0, "p50"), (1, "p99")):
        value = {side: median([r[q] for r in rs]) for side, rs in found.items()}
        for side in ("side by side", "one at a time"):
            report.add(f"put -> PubAck at {RATE}/s, {side} ({name}, median of the rounds')", value[side], "ms",
                       baseline=value["raw"], baseline_case=f"js.publish ({name})",
                       note=f"{rounds} rounds; per round: {[round(r[q], 2) for r in found[side]]}; "
                            f"CPU stolen by the host per round, %: {[r[2] for r in found[side]]}")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.putpace")
