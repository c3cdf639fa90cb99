"""Receive and delete: the SDK against nats-py's pull subscription on the same queue.

The queue is filled with raw pipelined publishes (untimed) before every run, once it is empty,
so each side drains the same number of messages from the same depth; a run is timed until it
has deleted them all (the ``messages()`` iterator is then left to end by itself, untimed, so no
pull request of one run outlives it).

- baseline: ``sub = await js.pull_subscribe_bind("worker", stream=...)`` on a connection as the
  queue's user; ``await sub.fetch(100, timeout=1)`` and ``await m.ack()`` for each (``ack()`` is
  fire-and-forget: nothing waits for the broker to confirm);
- SDK (a): ``await queue.receive(100, wait=1)`` + ``await queue.delete_many(msgs)``;
- SDK (b): ``async for m in queue.messages(batch=100)``, ``delete_many`` per 100;
- SDK (c): ``async for m in queue.messages(batch=100)``, ``await m.delete()`` per message;
- SDK (d): ``receive(100)`` + ``delete_many(msgs, confirm=False)``: deletes sent without waiting,
  as the baseline's ``ack()`` — the like-for-like comparison.

SDK deletes are confirmed by the broker (double ack) unless ``confirm=False``; the baseline's are not. Runs on the
default stack (``ENCLAVE_SYNC=always``) and on an ``interval`` one. A second baseline row times the
same fetch + ack until the broker has actually removed every message from the stream (polling
STREAM.INFO), which is what a confirmed delete waits for.

Every path drains the same number of messages in a run (the delete-each path too), and a round
runs every path once, in the order given in even rounds and reversed in odd ones (MIN_ROUNDS
rounds). Each row is the median of the rounds; its note gives both sides' min–max and the ratio
round by round. Target: SDK >= 1.5x the baseline, on the default stack.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors

from enclave_queue.client import connect

from . import (
    MIN_ROUNDS,
    Report,
    enclave_stack,
    main,
    median,
    new_queue,
    paired,
    raw_connect,
    raw_pipelined,
    round_order,
    say,
)

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


async def sdk_receive_loop(queue: Any, count: int, *, confirm: bool = True) -> float:
    done = 0
    started = time.perf_counter()
    while done < count:
        msgs = await queue.receive(BATCH, wait=1)
        if not msgs:
            raise RuntimeError(f"receive: queue empty after {done} of {count}")
        await queue.delete_many(msgs, confirm=confirm)
        done += len(msgs)
    return time.perf_counter() - started


async def sdk_messages_chunked(queue: Any, count: int) -> float:
    """Timed until ``count`` are deleted; the iterator is then left to end by itself (its last
    receive waits ``wait`` seconds, untimed), so no pull request outlives the run."""
    done = 0
    elapsed = 0.0
    chunk: list[Any] = []
    started = time.perf_counter()
    async for m in queue.messages(batch=BATCH, wait=1):
        chunk.append(m)
        if len(chunk) == BATCH or done + len(chunk) == count:
            await queue.delete_many(chunk)
            done += len(chunk)
            chunk = []
            if done == count:
                elapsed = time.perf_counter() - started
    if done != count or chunk:
        raise RuntimeError(f"messages(): {done} deleted and {len(chunk)} left of {count}")
    return elapsed


async def sdk_messages_each(queue: Any, count: int) -> float:
    """As sdk_messages_chunked, with a confirmed delete per message."""
    done = 0
    elapsed = 0.0
    started = time.perf_counter()
    async for m in queue.messages(batch=BATCH, wait=1):
        await m.delete()
        done += 1
        if done == count:
            elapsed = time.perf_counter() - started
    if done != count:
        raise RuntimeError(f"messages(): {done} of {count} deleted")
    return elapsed


async def wait_empty(js: Any, stream: str, timeout: float = 30.0) -> None:
    """Before a refill: the previous run's deletes have all reached the stream (the baseline's
    acks are not confirmed, so the broker may still be removing messages)."""
    deadline = time.monotonic() + timeout
    while (left := (await js.stream_info(stream)).state.messages) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if left:
        raise RuntimeError(f"{left} messages still in the queue {timeout:g} s after a run")


async def measure(creds: dict[str, str], count: int, rounds: int) -> dict[str, list[float]]:
    """msgs/s of each path in every round; the queue is refilled with ``count`` before every run."""
    rates: dict[str, list[float]] = {}
    async with connect(creds) as queue:
        runs: dict[str, Callable[[int], Awaitable[float]]] = {
            "baseline": lambda n: baseline(creds, n),
            "baseline_until_empty": lambda n: baseline(creds, n, until_empty=True),
            "sdk_receive_delete_many": lambda n: sdk_receive_loop(queue, n),
            "sdk_messages_delete_many": lambda n: sdk_messages_chunked(queue, n),
            "sdk_messages_delete_each": lambda n: sdk_messages_each(queue, n),
            "sdk_receive_delete_unconfirmed": lambda n: sdk_receive_loop(queue, n, confirm=False),
        }
        nc = await raw_connect(creds)
        try:
            js = nc.jetstream()
            await raw_pipelined(creds, 1000)  # warm-up
            await sdk_receive_loop(queue, 1000)
            for r in range(rounds):
                for key in round_order(r, list(runs)):
                    await wait_empty(js, creds["stream"])
                    await raw_pipelined(creds, count, nc=nc)
                    rates.setdefault(key, []).append(count / await runs[key](count))
        finally:
            await nc.close()
    return rates


BASE_CASE = "nats-py pull_subscribe_bind + fetch(100) + m.ack()"


def add_rows(report: Report, sync: str, rates: dict[str, list[float]]) -> None:
    best = {k: median(vs) for k, vs in rates.items()}

    def row(case: str, key: str, against: str = "baseline", why: str = "") -> None:
        report.add(f"sync={sync}: {case}", best[key], "msgs/s", baseline=best[against],
                   baseline_case=BASE_CASE if against == "baseline" else "fetch + ack until the stream is empty",
                   target="ratio >= 1.5" if (sync, key) == ("always", "sdk_receive_delete_unconfirmed") else "",
                   note=(why + "; " if why else "") + paired(rates[key], rates[against], "msgs/s"))

    row("SDK receive(100) + delete_many(confirm=False)", "sdk_receive_delete_unconfirmed",
        why="like for like: neither side waits for the broker to confirm the deletes")
    row("SDK receive(100) + delete_many (confirmed)", "sdk_receive_delete_many")
    row("SDK messages(100) + delete_many/100 (confirmed)", "sdk_messages_delete_many")
    row("SDK messages(100) + m.delete() each", "sdk_messages_delete_each")
    row("baseline timed until the stream is empty", "baseline_until_empty",
        why="ack() does not wait for the broker; this is when the broker had really removed them")
    row("SDK receive(100) + delete_many vs that", "sdk_receive_delete_many", against="baseline_until_empty",
        why="like for like: both wait until the broker has removed the messages")


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    rounds = 2 if quick else MIN_ROUNDS
    plans = {"always": 1000 if quick else 3000, "interval": 2000 if quick else 8000}  #: messages per run
    report.info.update({"batch": BATCH, "rounds": rounds, "messages_per_run": plans})
    for sync, count in plans.items():
        say(f"receive: stack ENCLAVE_SYNC={sync}, {count} messages per run, {rounds} rounds")
        with enclave_stack({"ENCLAVE_SYNC": sync}) as stack:
            creds = new_queue(stack, f"receive-{sync}")
            rates = asyncio.run(measure(creds, count, rounds))
        report.info[f"msgs_per_s_{sync}"] = {k: [round(v) for v in vs] for k, vs in rates.items()}
        add_rows(report, sync, rates)
    return report.done()


if __name__ == "__main__":
    main(run, "bench.receive")
