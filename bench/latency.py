"""End-to-end latency: a put until a waiting worker's ``get`` returns it, against raw nats-py.

A sender paces messages at an offered rate (100 and 1,000 msg/s), open loop: message i is due at
start + i / rate and goes out then, as a task of its own, whether or not earlier puts have been
answered (a closed loop would slow down exactly when the path is slow and hide it). Each 256-byte
body carries ``time.perf_counter_ns()`` taken just before the put is called; the worker, in a
process of its own (as a real one would be, so neither side's Python shares the other's event
loop), computes now − that stamp when its take returns (CLOCK_MONOTONIC is system-wide on Linux).

- SDK: ``await queue.put(body)``; worker ``m = await queue.get(timeout_s=5)`` in a loop, then
  ``await m.ack(confirm=False)``;
- SDK, the streaming idiom: the same puts; worker ``async for m in queue.iterate()`` with
  ``await m.ack(confirm=False)`` (it prefetches the next batch while one is handled);
- baseline, same stack, same queue (its durable consumer): ``await js.publish(subject, body)``;
  worker ``await sub.fetch(1, timeout=5)`` on ``js.pull_subscribe_bind`` and ``await m.ack()``
  (not confirmed either), both as the queue's own user.

Default stack (``ENCLAVE_SYNC=always``: an fsync before every PubAck); ``--sync interval`` and
``--rates`` are there to find where the time goes. A round runs both rates,
each SDK and raw in the order alternated round by round (MIN_ROUNDS rounds); each run sends
rate × RUN_SECONDS messages. The samples of all rounds are pooled (both sides have as many), a
percentile is only reported from enough of them (bench.samples_for: p99 from 500), and each row's
note gives the count and the p99 round by round. How late the sender itself was on its schedule is
kept in the results (``sender_lag_ms``): a late sender would make the offered rate a lie. So are
the garbage collections of both harness processes (``gc``: full ones, and the longest pause): the
sender keeps only the puts not yet answered, as an app would, since a full collection over
thousands of finished ones stopped both sides' puts for 36–44 ms, most of the old p99. Goal
(issue 16): SDK p99 <= 10 ms at 1,000 msg/s. Alone: ``python -m bench.latency [--quick]``;
``python -m bench`` runs it with the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import struct
import time
from multiprocessing.connection import Connection
from typing import Any

import nats.errors

from enclave_queue.client import connect

from . import (
    BODY,
    MIN_ROUNDS,
    Report,
    Steal,
    checked_percentile,
    enclave_stack,
    main,
    new_queue,
    paired,
    percentile,
    raw_connect,
    round_order,
    say,
)

NAME = "latency"
RATES = (100, 1000)  #: msg/s offered
RUN_SECONDS = 3.0  #: seconds a run sends for
TAKE_TIMEOUT = 5.0  #: seconds one take waits
ITERATE_BATCH = 100  #: the iterate side's batch (its default)
STAMP = struct.Struct("!q")  #: perf_counter_ns at the start of a body
SIDES = ["sdk", "iterate", "raw"]  #: get in a loop; the iterate() idiom (prefetching); raw fetch(1)


def options(parser: argparse.ArgumentParser) -> None:
    from .create import counts

    parser.add_argument("--rates", type=counts, help=f"offered rates, msg/s (default {','.join(map(str, RATES))})")
    parser.add_argument("--sync", default="always", choices=("always", "interval"),
                        help="the stack's ENCLAVE_SYNC (default always: the product's default)")


def body(stamp_ns: int) -> bytes:
    return STAMP.pack(stamp_ns) + BODY[STAMP.size:]


def stamp_of(data: bytes) -> int:
    return STAMP.unpack_from(data)[0]


class GcPauses:
    """This process's garbage collections, each as (generation, ms): a full one in a process holding
    thousands of objects stops its event loop for tens of milliseconds, which shows in the tail."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._started = 0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        else:
            self.pauses.append((info["generation"], (time.perf_counter_ns() - self._started) / 1e6))


# -- the worker (a process of its own) ---------------------------------------------------------------


async def take(side: str, creds: dict[str, str], count: int, pipe: Connection) -> list[float]:
    """Latencies (ms) of ``count`` messages taken one at a time; pipe gets "ready" once a take waits."""
    late: list[float] = []
    if side == "sdk":
        async with connect(creds) as queue:
            await queue.max_message_bytes()  # connected, settings read: the first take is not a cold one
            pipe.send("ready")
            while len(late) < count:
                m = await queue.get(timeout_s=TAKE_TIMEOUT)
                if m is None:
                    break
                late.append((time.perf_counter_ns() - stamp_of(m.data)) / 1e6)
                await m.ack(confirm=False)
            await queue._nc.flush()
        return late
    if side == "iterate":
        async with connect(creds) as queue:
            await queue.max_message_bytes()
            pipe.send("ready")
            async for m in queue.iterate(batch=ITERATE_BATCH):
                late.append((time.perf_counter_ns() - stamp_of(m.data)) / 1e6)
                await m.ack(confirm=False)
                if len(late) >= count:
                    break
            await queue._nc.flush()
        return late
    nc = await raw_connect(creds)
    try:
        sub = await nc.jetstream().pull_subscribe_bind("worker", stream=creds["stream"])
        pipe.send("ready")
        while len(late) < count:
            try:
                msgs = await sub.fetch(1, timeout=TAKE_TIMEOUT)
            except nats.errors.TimeoutError:
                break
            for m in msgs:
                late.append((time.perf_counter_ns() - stamp_of(m.data)) / 1e6)
                await m.ack()
        await nc.flush()
    finally:
        await nc.close()
    return late


def worker_main(side: str, creds: dict[str, str], count: int, pipe: Connection) -> None:
    try:
        with GcPauses() as collected:
            late = asyncio.run(take(side, creds, count, pipe))
        pipe.send((late, collected.pauses))
    except BaseException as exc:  # the parent raises it
        pipe.send(f"error: {exc!r}")
        raise


# -- the sender -------------------------------------------------------------------------------------


async def offer(side: str, sender: Any, creds: dict[str, str], rate: int, count: int) -> dict[str, Any]:
    """Start a worker, send ``count`` messages at ``rate`` open loop, return its latencies, how
    late the sender was on its schedule, and the garbage collections of both processes. The sender
    keeps only the puts not yet answered, as an app would: holding every one made its full
    collections slow (36 ms at 20,000), and each stopped every put in flight."""
    loop = asyncio.get_running_loop()
    parent, child = multiprocessing.get_context("spawn").Pipe()
    proc = multiprocessing.get_context("spawn").Process(target=worker_main, args=(side, creds, count, child),
                                                       daemon=True)
    proc.start()
    try:
        ready = await loop.run_in_executor(None, _recv, parent, 60.0)
        if ready != "ready":
            raise RuntimeError(f"{side} worker: {ready}")
        await asyncio.sleep(0.2)  # its first pull is waiting
        if side != "raw":
            def put(data: bytes) -> Any:
                return sender.put(data)
        else:
            js, subject = sender.jetstream(), creds["subject"]

            def put(data: bytes) -> Any:
                return js.publish(subject, data)
        lag: list[float] = []
        with GcPauses() as collected:
            await _send(put, rate, count, lag)
        got = await loop.run_in_executor(None, _recv, parent, TAKE_TIMEOUT + 60.0)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if isinstance(got, str):
        raise RuntimeError(f"{side} worker: {got}")
    late, worker_gc = got
    if len(late) != count:
        raise RuntimeError(f"{side} worker took {len(late)} of {count} messages")
    return {"late_ms": late, "lag_ms": lag, "gc": {"sender": collected.pauses, "worker": worker_gc}}


async def _send(put: Any, rate: int, count: int, lag: list[float]) -> None:
    """Message i goes out at start + i / rate, a task of its own; ``lag`` gets how late each was."""
    in_flight: set[asyncio.Task[Any]] = set()
    started = time.perf_counter()
    for i in range(count):
        pause = started + i / rate - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        lag.append((time.perf_counter() - started - i / rate) * 1000)
        task = asyncio.ensure_future(put(body(time.perf_counter_ns())))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    await asyncio.gather(*in_flight)


def _recv(pipe: Connection, timeout: float) -> Any:
    if not pipe.poll(timeout):
        return f"no answer in {timeout:g} s"
    return pipe.recv()


async def measure(creds: dict[str, str], rounds: int, seconds: float,
                  rates: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    pooled: dict[str, dict[str, Any]] = {}
    async with connect(creds) as queue:
        nc = await raw_connect(creds)
        try:
            for side in SIDES:  # warm-up: connections, settings, the stream's first blocks
                await offer(side, nc if side == "raw" else queue, creds, 100, 50)
            for r in range(rounds):
                for rate in rates:
                    for side in round_order(r, SIDES):
                        stolen = Steal()
                        out = await offer(side, nc if side == "raw" else queue, creds, rate, int(rate * seconds))
                        into = pooled.setdefault(f"{side}_{rate}", {"late_ms": [], "lag_ms": [], "round_p99_ms": [],
                                                                    "round_p50_ms": [], "round_steal_pct": [],
                                                                    "gc": {"sender": [], "worker": []}})
                        for process, pauses in out["gc"].items():
                            into["gc"][process] += pauses
                        into["round_steal_pct"].append(stolen.percent())
                        into["late_ms"] += out["late_ms"]
                        into["lag_ms"] += out["lag_ms"]
                        into["round_p50_ms"].append(round(percentile(out["late_ms"], 50), 2))
                        into["round_p99_ms"].append(round(percentile(out["late_ms"], 99), 2))
                        say(f"latency: round {r + 1}, {rate}/s, {side}: p50 {into['round_p50_ms'][-1]} ms, "
                            f"p99 {into['round_p99_ms'][-1]} ms (of {len(out['late_ms'])}), "
                            f"CPU stolen by the host {into['round_steal_pct'][-1]}%")
        finally:
            await nc.close()
    return pooled


def gc_note(summarised: dict[str, Any]) -> str:
    """``gc_summary``'s figures as a row's note."""
    return ", ".join(f"{process} {found['full']} full, longest {found['longest_ms']} ms"
                     for process, found in summarised.items())


def stolen_note(sdk: dict[str, Any], raw: dict[str, Any]) -> str:
    return f"{sdk['round_steal_pct']} (raw {raw['round_steal_pct']})"


def gc_summary(pauses: dict[str, list[tuple[int, float]]]) -> dict[str, Any]:
    """Per process of the harness: how many full collections it made while measuring, and its
    longest pause of any generation."""
    return {process: {"full": sum(generation == 2 for generation, _ in found),
                      "longest_ms": round(max((ms for _, ms in found), default=0.0), 1)}
            for process, found in pauses.items()}


def summary(samples: list[float]) -> dict[str, Any]:
    p99 = checked_percentile(samples, 99)
    return {"n": len(samples), "p50": round(percentile(samples, 50), 2), "p99": None if p99 is None else round(p99, 2),
            "max": round(max(samples), 2)}


def run(quick: bool, rates: tuple[int, ...] | None = None, sync: str = "always") -> list[Report]:
    report = Report(NAME if sync == "always" else f"{NAME}-{sync}", quick)
    rates = rates or RATES
    rounds, seconds = (2, 1.0) if quick else (MIN_ROUNDS, RUN_SECONDS)
    report.info.update({"rates": list(rates), "run_seconds": seconds, "rounds": rounds, "sync": sync,
                        "take_timeout_s": TAKE_TIMEOUT})
    say(f"latency: {rounds} rounds of {seconds:g} s at each of {rates} msg/s, SDK and raw, ENCLAVE_SYNC={sync}")
    with enclave_stack({"ENCLAVE_SYNC": sync}) as stack:
        creds = new_queue(stack, "latency")
        pooled = asyncio.run(measure(creds, rounds, seconds, rates))
    for key, data in pooled.items():
        report.info[key] = {"latency_ms": summary(data["late_ms"]), "sender_lag_ms": summary(data["lag_ms"]),
                            "round_p50_ms": data["round_p50_ms"], "round_p99_ms": data["round_p99_ms"],
                            "round_steal_pct": data["round_steal_pct"], "gc": gc_summary(data["gc"])}
    prefix = "" if sync == "always" else f"sync={sync}: "
    for rate in rates:
        raw = pooled[f"raw_{rate}"]
        base = f"js.publish -> pull fetch(1), {rate} msg/s"
        for side, verb in (("sdk", "get"), ("iterate", "iterate")):
            sdk = pooled[f"{side}_{rate}"]
            n = f"{len(sdk['late_ms'])} samples a side, pooled over {rounds} rounds"
            for name, q in (("p50", 50), ("p99", 99)):
                value, baseline = checked_percentile(sdk["late_ms"], q), checked_percentile(raw["late_ms"], q)
                if value is None or baseline is None:
                    say(f"latency: no {name} at {rate}/s: {len(sdk['late_ms'])} samples")
                    continue
                rounds_key = f"round_{name}_ms"
                report.add(f"{prefix}{rate} msg/s: put -> {verb} {name}", value, "ms", baseline=baseline,
                           baseline_case=f"{base} ({name})",
                           target="value <= 10" if (side, rate, q, sync) == ("sdk", 1000, 99, "always") else "",
                           note=f"{n}; {name} per round: " + paired(sdk[rounds_key], raw[rounds_key], "ms")
                           + "; CPU stolen by the host per round, %: " + stolen_note(sdk, raw)
                           + f"; the harness's garbage collections: {gc_note(report.info[f'{side}_{rate}']['gc'])}"
                           + f" (raw {gc_note(report.info[f'raw_{rate}']['gc'])})")
            report.add(f"{prefix}{rate} msg/s: put -> {verb} max", max(sdk["late_ms"]), "ms",
                       baseline=max(raw["late_ms"]), baseline_case=f"{base} (max)",
                       note=f"the largest of {len(sdk['late_ms'])} samples a side")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.latency", options)
