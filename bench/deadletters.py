"""Dead letters: how soon a message that failed its last receive is on the dead-letter queue, and
how fast a redrive moves dead letters back.

Latency. Each source queue allows one receive (``max_receives=1``) and has a DLQ. A worker
receives a message and hands it back with ``nack()``: that was its last receive. The clock runs
from the nack to the moment a worker waiting on the DLQ receives it. Measured with 1 and with 100
source queues busy at once (every queue's worker doing the same). Baseline: the broker's own
redelivery on as many busy queues (the DLQs themselves, which have no limit): from a ``nack()``
to the same message received again — the least a hand-back can take on this machine. Like for
like: the same number of queues, messages, pacing and connections (two a queue, each with a
pull nearly always waiting: the failing worker and its DLQ's worker; two workers on the plain
queue, either nacking a first receive or taking a redelivery). The two run one after the other,
which first alternating round by round (MIN_ROUNDS rounds); the samples of all rounds are pooled
and a percentile is only reported from enough of them (bench.samples_for).

Redrive. The DLQ is filled with dead letters (published with the headers the mover writes), then
``POST …/redrives`` (naming the source queue: letters published by hand carry no signed provenance)
moves them back to their source queue. Baseline: a raw nats-py republish of
the same number of messages (``fetch(100)`` from the DLQ, pipelined publish to the source with
PubAcks, then ``ack()``), what an operator would script by hand. Each round refills the DLQ and
empties the source (untimed) before each side, which side first alternating.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from enclave_queue.client import connect

from . import (
    BODY,
    MIN_ROUNDS,
    PROJECT,
    Report,
    checked_percentile,
    enclave_stack,
    main,
    new_queue,
    paired,
    percentile,
    quiet,
    raw_connect,
    round_order,
    samples_for,
    say,
)

NAME = "deadletters"


async def _failing_worker(source: dict[str, str], sink: dict[str, str], samples: int,
                          latencies: list[float]) -> None:
    """A busy queue whose worker fails every message: a pull is always waiting on the source (as
    on any busy queue), every message is nacked on its only receive, and a worker on the DLQ
    takes the dead letters. Each latency runs from the nack to the DLQ worker's receive."""
    nacked: dict[str, float] = {}
    done = asyncio.Event()

    async def work(queue: Any) -> None:
        while not done.is_set():
            for message in await queue.receive(batch=10, wait=0.5):
                nacked[message.body] = time.perf_counter()
                await message.nack()

    async def collect(dlq: Any) -> None:
        while len(latencies_here) < samples:
            batch = await dlq.receive(batch=10, wait=0.5)
            arrived = time.perf_counter()
            latencies_here.extend((arrived - nacked[m.body]) * 1000 for m in batch)
            await dlq.delete_many(batch)
        done.set()

    latencies_here: list[float] = []
    async with connect(source) as queue, connect(sink) as dlq:
        tasks = [asyncio.create_task(work(queue)), asyncio.create_task(collect(dlq))]
        for i in range(samples):
            await queue.send(f"m{i}")
            await asyncio.sleep(0.05)
        await asyncio.wait_for(tasks[1], 120)
        await tasks[0]
    latencies.extend(latencies_here)


async def _redelivering_worker(creds: dict[str, str], samples: int, latencies: list[float]) -> None:
    """The baseline's busy queue: messages sent as to a failing worker's queue, two workers on two
    connections; whichever takes a message on its first receive nacks it, whichever takes it on
    its second records the latency (from the nack) and deletes it."""
    nacked: dict[str, float] = {}
    latencies_here: list[float] = []
    done = asyncio.Event()

    async def work(queue: Any) -> None:
        while not done.is_set():
            batch = await queue.receive(batch=10, wait=0.5)
            arrived = time.perf_counter()
            for message in batch:
                if message.receive_count == 1:
                    nacked[message.body] = time.perf_counter()
                    await message.nack()
                else:
                    latencies_here.append((arrived - nacked[message.body]) * 1000)
                    await message.delete()
            if len(latencies_here) >= samples:
                done.set()

    async with connect(creds) as one, connect(creds) as two:
        tasks = [asyncio.create_task(work(one)), asyncio.create_task(work(two))]
        for i in range(samples):
            await one.send(f"m{i}")
            await asyncio.sleep(0.05)
        await asyncio.wait_for(done.wait(), 120)
        await asyncio.gather(*tasks)
    latencies.extend(latencies_here)


async def _phase(kind: str, pairs: list[tuple[dict[str, str], dict[str, str]]], samples: int,
                 got: list[float]) -> None:
    """Every queue busy at once: failing its messages into the DLQ, or (the baseline) the DLQs,
    empty again, as plain queues with no receive limit, redelivering theirs."""
    if kind == "dead_lettered":
        await asyncio.gather(*(_failing_worker(s, d, samples, got) for s, d in pairs))
    else:
        await asyncio.gather(*(_redelivering_worker(d, samples, got) for _, d in pairs))


def latency(report: Report, quick: bool) -> None:
    rounds = 2 if quick else MIN_ROUNDS
    for busy in (1, 10) if quick else (1, 100):
        samples = 5 if quick else (100 if busy == 1 else 5)  #: messages per queue per round
        say(f"deadletters: latency with {busy} busy queue(s), {samples} message(s) each, {rounds} rounds")
        pooled: dict[str, list[float]] = {"dead_lettered": [], "redelivered": []}
        round_p50: dict[str, list[float]] = {"dead_lettered": [], "redelivered": []}
        with enclave_stack() as stack:
            pairs = []
            for i in range(busy):
                dlq = new_queue(stack, f"dlq-{i}")
                source = new_queue(stack, f"src-{i}", max_receives=1, visibility_timeout_seconds=30,
                                   dead_letter_queue=f"dlq-{i}")
                pairs.append((source, dlq))
            quiet(stack)
            for r in range(rounds):
                for kind in round_order(r, list(pooled)):
                    got: list[float] = []
                    asyncio.run(_phase(kind, pairs, samples, got))
                    pooled[kind] += got
                    round_p50[kind].append(percentile(got, 50))
                    quiet(stack)
        moved, redelivered = pooled["dead_lettered"], pooled["redelivered"]
        for q in (50, 99):
            value, base = checked_percentile(moved, q), checked_percentile(redelivered, q)
            if value is None or base is None:
                say(f"deadletters: no p{q} for {busy} queue(s): {len(moved)} samples, {samples_for(q)} needed")
                continue
            note = f"{len(moved)} and {len(redelivered)} samples pooled over {rounds} rounds"
            if q == 50:
                note += "; p50 per round: " + paired(round_p50["dead_lettered"], round_p50["redelivered"], "ms")
            report.add(f"nack of last receive -> on DLQ, p{q}, {busy} busy queue(s)", value, "ms", baseline=base,
                       baseline_case=f"nack -> redelivered on as many busy queues, p{q}", note=note)
        report.info[f"latency_ms_{busy}"] = {"dead_lettered": [round(x, 1) for x in sorted(moved)],
                                             "redelivered": [round(x, 1) for x in sorted(redelivered)],
                                             "round_p50_ms": {k: [round(x, 1) for x in v] for k, v in round_p50.items()}}


async def _fill(dlq: dict[str, str], source_name: str, count: int) -> None:
    """Dead letters as the mover writes them: the body and the headers naming the source."""
    nc = await raw_connect(dlq)
    try:
        js = nc.jetstream()
        headers = {"Enclave-Source-Queue": source_name, "Enclave-Source-Project": PROJECT,
                   "Enclave-Receive-Count": "3", "Enclave-Last-Error": "bench"}
        pending = []
        for i in range(count):
            pending.append(js.publish(dlq["subject"], BODY, headers={**headers, "Enclave-Source-Sequence": str(i)}))
            if len(pending) == 500:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await nc.close()


async def _raw_republish(dlq: dict[str, str], source: dict[str, str], count: int) -> float:
    """The baseline: fetch from the DLQ, publish to the source (pipelined PubAcks), ack."""
    from_nc, to_nc = await raw_connect(dlq), await raw_connect(source)
    try:
        sub = await from_nc.jetstream().pull_subscribe_bind(dlq["consumer"], stream=dlq["stream"])
        to_js = to_nc.jetstream()
        moved = 0
        started = time.perf_counter()
        while moved < count:
            batch = await sub.fetch(100, timeout=5)
            await asyncio.gather(*(to_js.publish(source["subject"], m.data, headers=m.headers) for m in batch))
            for m in batch:
                await m.ack()
            moved += len(batch)
        await from_nc.flush()
        return time.perf_counter() - started
    finally:
        await from_nc.close()
        await to_nc.close()


async def _empty(creds: dict[str, str]) -> None:
    async with connect(creds) as queue:
        while batch := await queue.receive(batch=1000, wait=0.5):
            await queue.delete_many(batch)


def _redrive_task(stack: Any, count: int) -> float:
    """The API's redrive of the DLQ; returns the seconds until the task is no longer running."""
    with stack.admin() as admin:
        started = time.perf_counter()
        # named: letters published by hand carry no signed provenance, so the redrive would not
        # take their source from their headers (the baseline republishes to the same queue)
        task: dict[str, Any] = admin.start_redrive(PROJECT, "redrive-dlq", to="redrive-src")
        while task["state"] == "running":
            time.sleep(0.02)
            task = admin.redrive_status(PROJECT, "redrive-dlq", task["id"])
        seconds = time.perf_counter() - started
    if task["moved"] != count:
        raise RuntimeError(f"the redrive moved {task['moved']} of {count}: {task}")
    return seconds


def redrive(report: Report, quick: bool) -> None:
    count, rounds = (500, 2) if quick else (2000, MIN_ROUNDS)
    say(f"deadletters: redrive of {count} dead letters vs a raw republish of as many, {rounds} rounds")
    rates: dict[str, list[float]] = {"redrive": [], "raw": []}
    with enclave_stack() as stack:
        dlq = new_queue(stack, "redrive-dlq")
        source = new_queue(stack, "redrive-src", max_receives=3, dead_letter_queue="redrive-dlq")
        for r in range(rounds):
            for side in round_order(r, list(rates)):
                asyncio.run(_fill(dlq, "redrive-src", count))
                quiet(stack)
                if side == "redrive":
                    seconds = _redrive_task(stack, count)
                else:
                    seconds = asyncio.run(_raw_republish(dlq, source, count))
                rates[side].append(count / seconds)
                asyncio.run(_empty(source))
                quiet(stack)
    report.add("redrive (API task)", statistics.median(rates["redrive"]), "msgs/s",
               baseline=statistics.median(rates["raw"]), baseline_case="raw fetch + republish + ack with nats-py",
               note=f"{count} letters a run; " + paired(rates["redrive"], rates["raw"], "msgs/s"))
    report.info["redrive"] = {"count": count, "msgs_per_s": {k: [round(v) for v in vs] for k, vs in rates.items()}}


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    latency(report, quick)
    redrive(report, quick)
    return report.done()


if __name__ == "__main__":
    main(run, "bench.deadletters")
