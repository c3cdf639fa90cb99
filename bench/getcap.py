"""How fast one worker takes messages one at a time from a backlog: ``get`` +
``ack(confirm=False)`` against raw nats-py ``fetch(1)`` + ``ack()`` on the same queue of a default
stack. bench.latency offers 1,000 msg/s to such a loop; how near that is to the loop's capacity
decides how long a stall of the machine takes to drain, and so the loop's p99.

Each run fills the queue with BACKLOG messages (``send_batch``, untimed), then one side takes them
all, one call a message, and its rate and client CPU a message are kept; the sides alternate,
which first swapped every other round. Also kept, as the floor under every synced write: the
fsync latency of 256-byte appends paced at 1,000 a second in the directory the stacks use (the
default stack fsyncs before every PubAck). Not part of ``python -m bench``: run
``python -m bench.getcap [--quick]``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any

from enclave_queue.client import connect

from . import Report, enclave_stack, main, median, new_queue, percentile, raw_connect, say

NAME = "getcap"
BACKLOG = 5000  #: messages a run takes
FSYNC_RATE = 1000  #: appends a second
FSYNC_SECONDS = 5.0


async def _fill(creds: dict[str, str], count: int) -> None:
    async with connect(creds) as queue:
        for start in range(0, count, 1000):
            await queue.send_batch([f"m{i}" for i in range(start, min(start + 1000, count))])


async def _sdk(creds: dict[str, str], count: int) -> tuple[float, float]:
    async with connect(creds) as queue:
        await queue.max_message_bytes()  # connected, settings read
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            message = await queue.get(timeout_s=5)
            if message is None:
                raise RuntimeError("get found the backlog empty")
            await message.ack(confirm=False)
        await queue._nc.flush()
        return time.perf_counter() - started, time.process_time() - cpu


async def _raw(creds: dict[str, str], count: int) -> tuple[float, float]:
    nc = await raw_connect(creds)
    try:
        sub = await nc.jetstream().pull_subscribe_bind(creds["consumer"], stream=creds["stream"])
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            (message,) = await sub.fetch(1, timeout=5)
            await message.ack()
        await nc.flush()
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        await nc.close()


def fsync_latency(directory: str, rate: int = FSYNC_RATE, seconds: float = FSYNC_SECONDS) -> list[float]:
    """Milliseconds each fsync of a 256-byte append took, paced at ``rate`` a second."""
    fd, path = tempfile.mkstemp(dir=directory)
    taken: list[float] = []
    try:
        started = time.perf_counter()
        for i in range(int(rate * seconds)):
            pause = started + i / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            before = time.perf_counter()
            os.write(fd, b"x" * 256)
            os.fsync(fd)
            taken.append((time.perf_counter() - before) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    return taken


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    rounds, count = (2, 1000) if quick else (4, BACKLOG)
    report.info.update({"backlog": count, "rounds": rounds, "sync": "always (default)"})
    say(f"getcap: {rounds} round(s) of {count} messages taken one at a time, get vs raw fetch(1)")
    rates: dict[str, list[float]] = {"get": [], "raw": []}
    cpu: dict[str, list[float]] = {"get": [], "raw": []}
    with enclave_stack() as stack:
        creds = new_queue(stack, "getcap")
        for index in range(rounds):
            sides: list[tuple[str, Any]] = [("get", _sdk), ("raw", _raw)]
            if index % 2:
                sides.reverse()
            for side, take in sides:
                asyncio.run(_fill(creds, count))
                seconds, used = asyncio.run(take(creds, count))
                rates[side].append(count / seconds)
                cpu[side].append(used / count * 1e6)
        fsyncs = fsync_latency(str(stack.home))
    report.info["msgs_per_s"] = {k: [round(v) for v in vs] for k, vs in rates.items()}
    report.info["client_cpu_us_per_msg"] = {k: [round(v) for v in vs] for k, vs in cpu.items()}
    report.info["fsync_ms"] = {f"p{q}": round(percentile(fsyncs, q), 3) for q in (50, 90, 99)}
    report.info["fsync_ms"]["max"] = round(max(fsyncs), 3)
    report.add("one at a time from a backlog: get + ack(confirm=False)", median(rates["get"]), "msgs/s",
               baseline=median(rates["raw"]), baseline_case="raw fetch(1) + ack()",
               note=f"client CPU a message {median(cpu['get']):.0f} against {median(cpu['raw']):.0f} µs; "
                    f"fsync of a 256-byte append at {FSYNC_RATE}/s: p50 {percentile(fsyncs, 50):.2f}, "
                    f"p99 {percentile(fsyncs, 99):.2f} ms")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.getcap")
