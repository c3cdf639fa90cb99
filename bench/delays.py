"""delays: how precisely a delayed message (``queue.put(body, delay_s=d)``) comes due, against the
same worker taking messages put without a delay.

Each round puts M messages with ``delay_s`` spread evenly over 1–5 s (in a shuffled order, as fast
as the putter can; all are stored before the first comes due) and records each one's due time as
the moment ``put`` was called + d (UTC, ``time.time()``). A worker on a connection of its own takes
them as they come and acks each (``ack(confirm=False)``); lateness = the moment the take returned
− the due time. A take before the due time would be a bug: those are counted (``early``), against
that due time and against the exact one the SDK wrote into the schedule (the message's
``Enclave-Enqueued-At`` + d), and so is a copy the broker stored before that (``sent_at``). The
lateness is split into the broker's part (``sent_at`` − exact due: when the schedule fired) and the
delivery's (taken − ``sent_at``).

Baseline, same stack and worker, same run: M messages put without a delay, one every 4 s / M (the
rate the delayed ones come due), lateness = taken − the moment ``put`` was called.

Sparse runs (get worker) put 10 delayed messages due 0.5 s apart (delays 1.0, 1.5, … 5.5 s), so
no two come due within 250 ms of each other: nats-server runs its schedules at most every 250 ms,
so this shows what one delayed message on its own gets. Their baseline is as many immediate
puts, 0.5 s apart, to the same worker.

Two workers: ``await queue.get(timeout_s=10)`` in a loop, and ``async for m in queue.iterate()``
(a fresh connection per run, so no pull request outlives it). Every round runs each comparison
(get, iterate, sparse) delayed and immediate, which first alternating round by round (MIN_ROUNDS
rounds); the samples of all rounds are pooled, both sides of a row have as many, a percentile is
only reported from enough of them (bench.samples_for), and each row's note gives the count and the
p50 round by round. Default stack (``ENCLAVE_SYNC=always``). Not part of ``python -m bench``
(``make bench`` runs it after that): ``python -m bench.delays [--quick]``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from enclave_queue.client import connect

from . import (
    MIN_ROUNDS,
    Report,
    checked_percentile,
    enclave_stack,
    main,
    median,
    new_queue,
    paired,
    percentile,
    round_order,
    say,
)

NAME = "delays"
SPREAD = (1.0, 5.0)  #: seconds of delay, first and last
TAKE_TIMEOUT = 10.0  #: seconds one get waits
SPARSE = 10  #: delayed messages of the sparse run
SPARSE_STEP = 0.5  #: seconds between their due times


def body(tag: str, index: int) -> bytes:
    return f"{tag}:{index}".encode().ljust(256, b".")


def index_of(data: bytes) -> int:
    return int(data.rstrip(b".").split(b":")[1])


async def taken_by_get(queue: Any, count: int) -> AsyncIterator[Any]:
    for _ in range(count):
        m = await queue.get(timeout_s=TAKE_TIMEOUT)
        if m is None:
            return
        yield m


async def taken_by_iterate(queue: Any, count: int) -> AsyncIterator[Any]:
    seen = 0
    async for m in queue.iterate():
        yield m
        seen += 1
        if seen == count:
            return


async def worker(creds: dict[str, str], how: str, count: int, ready: asyncio.Event) -> list[tuple[Any, float]]:
    """(message, time.time() when the take returned) for ``count`` messages; a fresh connection."""
    got: list[tuple[Any, float]] = []
    async with connect(creds) as queue:
        await queue.max_message_bytes()  # connected and answering before the putter starts
        ready.set()
        takes = taken_by_get(queue, count) if how == "get" else taken_by_iterate(queue, count)
        async for m in takes:
            got.append((m, time.time()))
            await m.ack(confirm=False)
        await queue._nc.flush()
    return got


async def one_run(creds: dict[str, str], putter: Any, how: str, delayed: bool, count: int,
                  tag: str, rng: random.Random, *, sparse: bool = False) -> dict[str, Any]:
    """One run: the samples (ms) of one kind, taken by one worker. ``sparse``: delays SPARSE_STEP
    apart, so no two come due within the broker's 250 ms minimum between schedule runs."""
    low, high = SPREAD
    delays = [low + (high - low) * i / max(count - 1, 1) for i in range(count)]
    if sparse:
        delays = [low + SPARSE_STEP * i for i in range(count)]
        high = delays[-1]
    order = list(range(count))
    if delayed:
        rng.shuffle(order)
    ready = asyncio.Event()
    task = asyncio.ensure_future(worker(creds, how, count, ready))
    await ready.wait()
    await asyncio.sleep(0.2)  # the worker's first pull is waiting
    due: dict[int, float] = {}
    put_started = time.perf_counter()
    for n, i in enumerate(order):
        if delayed:
            called = time.time()
            await putter.put(body(tag, i), delay_s=delays[i])
            due[i] = called + delays[i]
        else:  # paced as the delayed ones come due: one every (high - low) / count seconds, or SPARSE_STEP
            pause = put_started + n * (SPARSE_STEP if sparse else (high - low) / count) - time.perf_counter()
            if pause > 0:
                await asyncio.sleep(pause)
            due[i] = time.time()
            await putter.put(body(tag, i))
    put_seconds = time.perf_counter() - put_started
    got = await asyncio.wait_for(task, high + 30)
    if len(got) != count:
        raise RuntimeError(f"{how}: took {len(got)} of {count} {'delayed' if delayed else 'immediate'} messages")
    late, broker, delivery = [], [], []
    early = early_exact = fired_early = 0
    for m, taken in got:
        i = index_of(m.data)
        late.append((taken - due[i]) * 1000)
        early += taken < due[i]
        if delayed:
            exact = (m.enqueued_at + timedelta(seconds=delays[i])).timestamp()
            early_exact += taken < exact
            fired = m.sent_at.timestamp()
            fired_early += fired < exact
            broker.append((fired - exact) * 1000)
            delivery.append((taken - fired) * 1000)
    return {"late_ms": late, "broker_ms": broker, "delivery_ms": delivery, "early": early,
            "early_exact": early_exact, "fired_early": fired_early, "put_seconds": put_seconds}


async def measure(creds: dict[str, str], count: int, rounds: int) -> dict[str, dict[str, Any]]:
    rng = random.Random(7)
    pooled: dict[str, dict[str, Any]] = {}
    async with connect(creds) as putter:
        await putter.put(b"warm-up")
        async with connect(creds) as queue:
            m = await queue.get(timeout_s=5)
            if m is None:
                raise RuntimeError("warm-up message not received")
            await m.ack()
        for r in range(rounds):
            for how in ("get", "iterate", "sparse"):
                for kind in round_order(r, ["delayed", "immediate"]):
                    key = f"{how}_{kind}"
                    out = await one_run(creds, putter, "get" if how == "sparse" else how, kind == "delayed",
                                        SPARSE if how == "sparse" else count, f"{r}{key}", rng, sparse=how == "sparse")
                    into = pooled.setdefault(key, {"late_ms": [], "broker_ms": [], "delivery_ms": [], "early": 0,
                                                   "early_exact": 0, "fired_early": 0, "round_p50_ms": [],
                                                   "put_seconds": []})
                    for field in ("late_ms", "broker_ms", "delivery_ms"):
                        into[field] += out[field]
                    for field in ("early", "early_exact", "fired_early"):
                        into[field] += out[field]
                    into["round_p50_ms"].append(round(percentile(out["late_ms"], 50), 2))
                    into["put_seconds"].append(round(out["put_seconds"], 3))
    return pooled


def summary(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {}
    return {"n": len(samples), "p50": round(percentile(samples, 50), 2),
            "p99": round(p99, 2) if (p99 := checked_percentile(samples, 99)) is not None else None,
            "max": round(max(samples), 2), "min": round(min(samples), 2)}


def add_rows(report: Report, how: str, delayed: dict[str, Any], immediate: dict[str, Any], label: str) -> None:
    """p50, p99 (when there are enough samples) and max of the delayed lateness against the
    immediate one; both sides have as many samples."""
    d, i = delayed["late_ms"], immediate["late_ms"]
    base = f"immediate put, same {label} worker"
    for name, q in (("p50", 50), ("p99", 99)):
        value, baseline = checked_percentile(d, q), checked_percentile(i, q)
        if value is None or baseline is None:
            say(f"delays: no {name} for {how}: {len(d)} samples")
            continue
        note = f"{len(d)} samples a side, pooled over {len(delayed['round_p50_ms'])} rounds"
        if q == 50:
            note += "; p50 per round: " + paired(delayed["round_p50_ms"], immediate["round_p50_ms"], "ms")
        report.add(f"{how}: delayed lateness {name}", value, "ms", baseline=baseline, baseline_case=f"{base} ({name})",
                   note=note)
    report.add(f"{how}: delayed lateness max", max(d), "ms", baseline=max(i), baseline_case=f"{base} (max)",
               note=f"the largest of {len(d)} samples a side")
    early = delayed["early"] + delayed["early_exact"] + delayed["fired_early"]
    report.add(f"{how}: delayed messages taken or fired before due", early, "messages", target="value <= 0",
               note=f"{delayed['early']} taken before put call + d, {delayed['early_exact']} before the schedule's own "
                    f"time, {delayed['fired_early']} stored by the broker before it; of {len(d)}")


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    count, rounds = (50, 2) if quick else (200, MIN_ROUNDS)
    report.info.update({"messages_per_run": count, "sparse_messages_per_run": SPARSE, "rounds": rounds,
                        "delay_spread_s": list(SPREAD), "worker_get_timeout_s": TAKE_TIMEOUT,
                        "sync": "always (default)"})
    say(f"delays: {rounds} rounds of {count} delayed and {count} immediate puts (get and iterate workers) and "
        f"{SPARSE} sparse ones of each")
    with enclave_stack() as stack:
        creds = new_queue(stack, "delays")
        pooled = asyncio.run(measure(creds, count, rounds))
    for key, data in pooled.items():
        report.info[key] = {"lateness_ms": summary(data["late_ms"]), "broker_fire_ms": summary(data["broker_ms"]),
                            "delivery_ms": summary(data["delivery_ms"]), "early": data["early"],
                            "early_vs_schedule": data["early_exact"], "fired_early": data["fired_early"],
                            "round_p50_ms": data["round_p50_ms"], "put_seconds": data["put_seconds"]}
    for how in ("get", "iterate"):
        add_rows(report, how, pooled[f"{how}_delayed"], pooled[f"{how}_immediate"], how)
        report.info[f"{how}_delayed"]["median_round_p50_ms"] = median(pooled[f"{how}_delayed"]["round_p50_ms"])
    add_rows(report, f"get, sparse ({SPARSE} a run, due {SPARSE_STEP:g} s apart)", pooled["sparse_delayed"],
             pooled["sparse_immediate"], f"get, {SPARSE_STEP:g} s apart,")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.delays")
