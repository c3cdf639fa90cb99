"""Receive and delete: the SDK against nats-py's pull subscription on the same queue.

The queue is filled with raw pipelined publishes (untimed) before every run, so each side
drains the same number of messages from the same depth; a run stops when it has deleted them
all (no trailing empty wait is timed).

- baseline: ``sub = await js.pull_subscribe_bind("worker", stream=...)`` on a connection as the
  queue's user; ``await sub.fetch(100, timeout=1)`` and ``await m.ack()`` for each (``ack()`` is
  fire-and-forget: nothing waits for the broker to confirm);
- SDK (a): ``await queue.receive(100, wait=1)`` + ``await queue.delete_many(msgs)``;
- SDK (b): ``async for m in queue.messages(batch=100)``, ``delete_many`` per 100;
- SDK (c): ``async for m in queue.messages(batch=100)``, ``await m.delete()`` per message.

SDK deletes are confirmed by the broker (double ack); the baseline's are not. Runs on the
default stack (``ENCLAVE_SYNC=always``) and on an ``interval`` one. A second baseline row times the
same fetch + ack until the broker has actually removed every message from the stream (polling
STREAM.INFO), which is what a confirmed delete waits for. Target: SDK >= 1.5x the baseline, on
the default stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors

from enclave_queue.client import connect

from . import Report, enclave_stack, main, new_queue, raw_connect, raw_pipelined, say

NAME = "receive"
BATCH = 100


async def baseline(creds: dict[str, str], count: int, *, until_empty: bool = False) -> float:
    """fetch + ack until ``count`` are acked; with ``until_empty``, until the broker has also
    removed them all from the stream (``ack()`` does not wait for that)."""
    nc = await raw_connect(creds)
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind("worker", stream=creds["stream"])
        done = 0
        started = time.perf_counter()
        while done < count:
            try:
                msgs = await sub.fetch(BATCH, timeout=1)
            except nats.errors.TimeoutError:
                raise RuntimeError(f"baseline: queue empty after {done} of {count}") from None
            for m in msgs:
                await m.ack()
            done += len(msgs)
        await nc.flush()
        while until_empty and (await js.stream_info(creds["stream"])).state.messages:
            await asyncio.sleep(0.005)
        return time.perf_counter() - started
    finally:
        await nc.close()


async def sdk_receive_loop(queue: Any, count: int) -> float:
    done = 0
    started = time.perf_counter()
    while done < count:
        msgs = await queue.receive(BATCH, wait=1)
        if not msgs:
            raise RuntimeError(f"receive: queue empty after {done} of {count}")
        await queue.delete_many(msgs)
        done += len(msgs)
    return time.perf_counter() - started


async def sdk_messages_chunked(queue: Any, count: int) -> float:
    done = 0
    chunk: list[Any] = []
    started = time.perf_counter()
    async with contextlib.aclosing(queue.messages(batch=BATCH, wait=1)) as stream:
        async for m in stream:
            chunk.append(m)
            if len(chunk) == BATCH or done + len(chunk) == count:
                await queue.delete_many(chunk)
                done += len(chunk)
                chunk = []
                if done == count:
                    break
    elapsed = time.perf_counter() - started
    await asyncio.sleep(0.05)  # untimed: messages() does not await the prefetch it cancels on close
    if done != count:
        raise RuntimeError(f"messages(): stopped after {done} of {count}")
    return elapsed


async def sdk_messages_each(queue: Any, count: int) -> float:
    done = 0
    started = time.perf_counter()
    async with contextlib.aclosing(queue.messages(batch=BATCH, wait=1)) as stream:
        async for m in stream:
            await m.delete()
            done += 1
            if done == count:
                break
    elapsed = time.perf_counter() - started
    await asyncio.sleep(0.05)  # untimed: messages() does not await the prefetch it cancels on close
    if done != count:
        raise RuntimeError(f"messages(): stopped after {done} of {count}")
    return elapsed


async def measure(creds: dict[str, str], count: int, each_count: int, rounds: int) -> dict[str, float]:
    """Best msgs/s of each path over ``rounds`` rounds; the queue is refilled before every run."""
    best: dict[str, float] = {}
    async with connect(creds) as queue:
        runs: dict[str, tuple[int, Callable[[int], Awaitable[float]]]] = {
            "baseline": (count, lambda n: baseline(creds, n)),
            "baseline_until_empty": (count, lambda n: baseline(creds, n, until_empty=True)),
            "sdk_receive_delete_many": (count, lambda n: sdk_receive_loop(queue, n)),
            "sdk_messages_delete_many": (count, lambda n: sdk_messages_chunked(queue, n)),
            "sdk_messages_delete_each": (each_count, lambda n: sdk_messages_each(queue, n)),
        }
        await raw_pipelined(creds, 1000)  # warm-up
        await sdk_receive_loop(queue, 1000)
        for _ in range(rounds):
            for key, (n, fn) in runs.items():
                await raw_pipelined(creds, n)
                best[key] = max(best.get(key, 0.0), n / await fn(n))
    return best


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    started = time.perf_counter()
    plans = {
        # sync mode: (messages per run, messages per run with a delete each, rounds)
        "always": (3000, 1000, 1) if quick else (5000, 2000, 2),
        "interval": (3000, 1000, 1) if quick else (20000, 5000, 2),
    }
    report.info.update({"batch": BATCH, "plans": {k: {"messages": c, "messages_delete_each": e, "rounds": r}
                                                  for k, (c, e, r) in plans.items()}})
    base_case = "nats-py pull_subscribe_bind + fetch(100) + m.ack()"
    for sync, (count, each_count, rounds) in plans.items():
        say(f"receive: stack ENCLAVE_SYNC={sync}, {count} messages per run, {rounds} round(s)")
        with enclave_stack({"ENCLAVE_SYNC": sync}) as stack:
            creds = new_queue(stack, f"receive-{sync}")
            best = asyncio.run(measure(creds, count, each_count, rounds))
        report.info[f"msgs_per_s_{sync}"] = best
        base = best["baseline"]
        target = "ratio >= 1.5" if sync == "always" else ""
        report.add(f"sync={sync}: SDK receive(100) + delete_many", best["sdk_receive_delete_many"], "msgs/s",
                   baseline=base, baseline_case=base_case, target=target)
        report.add(f"sync={sync}: SDK messages(100) + delete_many/100", best["sdk_messages_delete_many"], "msgs/s",
                   baseline=base, baseline_case=base_case, target=target)
        report.add(f"sync={sync}: SDK messages(100) + m.delete() each", best["sdk_messages_delete_each"], "msgs/s",
                   baseline=base, baseline_case=base_case)
        report.add(f"sync={sync}: baseline timed until the stream is empty", best["baseline_until_empty"], "msgs/s",
                   baseline=base, baseline_case=base_case,
                   note="ack() does not wait for the broker; this is when the broker had really removed them")
    report.seconds = time.perf_counter() - started
    return [report]


if __name__ == "__main__":
    main(run, "bench.receive")
