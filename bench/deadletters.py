"""Dead letters: how soon a message that failed its last receive is on the dead-letter queue, and
how fast a redrive moves dead letters back.

Latency. Each source queue allows one receive (``max_receives=1``) and has a DLQ. A worker
receives a message and hands it back with ``nack()``: that was its last receive. The clock runs
from the nack to the moment a worker waiting on the DLQ receives it. Measured with 1 and with 100
source queues busy at once (every queue's worker doing the same). Baseline in the same run: the
broker's own redelivery, from a ``nack()`` to the same message received again on a queue with no
limit — the least a hand-back can take on this machine.

Redrive. The DLQ is filled with dead letters (published with the headers the mover writes), then
``POST …/redrives`` moves them back to their source queue. Baseline in the same run: a raw
nats-py republish of the same number of messages (``fetch(100)`` from the DLQ, pipelined publish
to the source with PubAcks, then ``ack()``), what an operator would script by hand.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from enclave_queue.client import connect

from . import BODY, PROJECT, Report, enclave_stack, main, new_queue, percentile, quiet, raw_connect, say

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


async def _redelivery(creds: dict[str, str], samples: int, latencies: list[float]) -> None:
    """Baseline: nack() to the same message received again, on a queue without a limit."""
    nacked: dict[str, float] = {}
    async with connect(creds) as queue:
        for i in range(samples):
            await queue.send(f"m{i}")
        while len(latencies) < samples:
            for message in await queue.receive(batch=10, wait=1):
                if message.receive_count == 1:
                    nacked[message.body] = time.perf_counter()
                    await message.nack()
                else:
                    latencies.append((time.perf_counter() - nacked[message.body]) * 1000)
                    await message.delete()


async def _measure(pairs: list[tuple[dict[str, str], dict[str, str]]], plain: dict[str, str], samples: int,
                   moved: list[float], redelivered: list[float]) -> None:
    await asyncio.gather(*(_failing_worker(s, d, samples, moved) for s, d in pairs),
                         _redelivery(plain, max(samples, 20), redelivered))


def latency(report: Report, quick: bool) -> None:
    for busy in (1, 10) if quick else (1, 100):
        samples = 5 if quick or busy > 1 else 40
        say(f"deadletters: latency with {busy} busy queue(s), {samples} sample(s) each")
        with enclave_stack() as stack:
            pairs = []
            for i in range(busy):
                dlq = new_queue(stack, f"dlq-{i}")
                source = new_queue(stack, f"src-{i}", max_receives=1, visibility_timeout_seconds=30,
                                   dead_letter_queue=f"dlq-{i}")
                pairs.append((source, dlq))
            plain = new_queue(stack, "plain", visibility_timeout_seconds=30)
            quiet(stack)
            moved: list[float] = []
            redelivered: list[float] = []

            asyncio.run(_measure(pairs, plain, samples, moved, redelivered))
        for q in (50, 99):
            report.add(f"nack of last receive -> on DLQ, p{q}, {busy} busy queue(s)", percentile(moved, q), "ms",
                       baseline=percentile(redelivered, q),
                       baseline_case=f"nack -> redelivered on the same broker, p{q}")
        report.info[f"latency_ms_{busy}"] = {"dead_lettered": [round(x, 1) for x in sorted(moved)],
                                             "redelivered": [round(x, 1) for x in sorted(redelivered)]}


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


def redrive(report: Report, quick: bool) -> None:
    count = 1000 if quick else 5000
    say(f"deadletters: redrive of {count} dead letters vs a raw republish of as many")
    with enclave_stack() as stack:
        dlq = new_queue(stack, "redrive-dlq")
        source = new_queue(stack, "redrive-src", max_receives=3, dead_letter_queue="redrive-dlq")
        asyncio.run(_fill(dlq, "redrive-src", count))
        quiet(stack)
        raw_seconds = asyncio.run(_raw_republish(dlq, source, count))

        async def empty_source() -> None:
            async with connect(source) as queue:
                while batch := await queue.receive(batch=1000, wait=0.5):
                    await queue.delete_many(batch)

        asyncio.run(empty_source())
        asyncio.run(_fill(dlq, "redrive-src", count))
        quiet(stack)
        with stack.admin() as admin:
            started = time.perf_counter()
            task: dict[str, Any] = admin.start_redrive(PROJECT, "redrive-dlq")
            while task["state"] == "running":
                time.sleep(0.02)
                task = admin.redrive_status(PROJECT, "redrive-dlq", task["id"])
            seconds = time.perf_counter() - started
        if task["moved"] != count:
            raise RuntimeError(f"the redrive moved {task['moved']} of {count}: {task}")
    report.add("redrive (API task)", count / seconds, "msgs/s", baseline=count / raw_seconds,
               baseline_case="raw fetch + republish + ack with nats-py")
    report.info["redrive"] = {"count": count, "seconds": round(seconds, 2), "raw_seconds": round(raw_seconds, 2)}


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    latency(report, quick)
    redrive(report, quick)
    return report.done()


if __name__ == "__main__":
    main(run, "bench.deadletters")
