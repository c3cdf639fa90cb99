"""iterate: ``async for m in queue.iterate(stop_when_empty=True)`` with an ack per message, against
the core path ``receive(batch=100)`` + ``delete_many`` per batch, on the same queue.

The queue is filled with ``send_batch`` (untimed) before every run, once the previous run's
deletes have all reached the stream, so each side drains the same number of messages from the
same depth. Five runs, paired by how the deletes travel:

- unconfirmed: ``await m.ack(confirm=False)`` per message from ``iterate`` against
  ``await queue.receive(100, wait=1)`` + ``await queue.delete_many(batch, confirm=False)``;
- confirmed: ``await m.ack()`` per message (the iteration confirms a batch's acks together before
  it hands out the next batch, and all of them before it ends) against ``receive(100, wait=1)`` +
  ``delete_many(batch)`` (one wait for the 100 confirmations); and, for reference, against the
  same baseline, ``await m.ack(confirm=True)``, which waits for each ack's own confirmation (one
  broker round trip a message: what ``await m.ack()`` cost before issue 16).

``iterate`` is timed until it ends by itself (``stop_when_empty``: its first empty receive, after
every confirmation); the core loop until it has deleted them all. Rows are msgs/s, the ratio
iterate / core. Runs on the default stack (``ENCLAVE_SYNC=always``) and on an ``interval`` one;
the order of the five runs is rotated every round, MIN_ROUNDS rounds, the median counts and the
spread is printed. Not part of ``python -m bench`` (``make bench`` runs it after that):
``python -m bench.iterate [--quick]``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from enclave_queue.client import connect

from . import BODY, MIN_ROUNDS, Report, enclave_stack, main, median, new_queue, paired, raw_connect, say

NAME = "iterate"
BATCH = 100
FILL = 1000  #: bodies per send_batch (its maximum)


async def fill(queue: Any, count: int) -> None:
    left = count
    while left:
        n = min(FILL, left)
        stored = await queue.send_batch([BODY] * n)
        if stored != n:
            raise RuntimeError(f"send_batch stored {stored} of {n}")
        left -= n


async def wait_empty(js: Any, stream: str, timeout: float = 30.0) -> None:
    """Unconfirmed deletes may still be on their way: wait until the stream holds nothing."""
    deadline = time.monotonic() + timeout
    while (left := (await js.stream_info(stream)).state.messages) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    if left:
        raise RuntimeError(f"{left} messages still in the queue {timeout:g} s after a run")


async def by_iterate(queue: Any, count: int, *, confirm: Optional[bool]) -> float:
    """``confirm``: None is ``await m.ack()``, the default."""
    done = 0
    started = time.perf_counter()
    async for m in queue.iterate(stop_when_empty=True):
        await (m.ack() if confirm is None else m.ack(confirm=confirm))
        done += 1
    elapsed = time.perf_counter() - started
    if done != count:
        raise RuntimeError(f"iterate(stop_when_empty=True) acked {done} of {count}")
    return elapsed


async def by_receive(queue: Any, count: int, *, confirm: bool) -> float:
    done = 0
    started = time.perf_counter()
    while done < count:
        msgs = await queue.receive(batch=BATCH, wait=1)
        if not msgs:
            raise RuntimeError(f"receive: queue empty after {done} of {count}")
        await queue.delete_many(msgs, confirm=confirm)
        done += len(msgs)
    elapsed = time.perf_counter() - started
    if done != count:
        raise RuntimeError(f"receive: deleted {done} of {count}")
    return elapsed


async def measure(creds: dict[str, str], counts: dict[str, int], rounds: int) -> dict[str, list[float]]:
    """msgs/s of each run in every round; the queue is refilled before every run."""
    runs: dict[str, tuple[int, Callable[[Any, int], Awaitable[float]]]] = {
        "iterate_ack_unconfirmed": (counts["unconfirmed"], lambda q, n: by_iterate(q, n, confirm=False)),
        "receive_delete_many_unconfirmed": (counts["unconfirmed"], lambda q, n: by_receive(q, n, confirm=False)),
        "iterate_ack_confirmed": (counts["confirmed"], lambda q, n: by_iterate(q, n, confirm=None)),
        "receive_delete_many_confirmed": (counts["confirmed"], lambda q, n: by_receive(q, n, confirm=True)),
        "iterate_ack_each_confirmed": (counts["confirmed"], lambda q, n: by_iterate(q, n, confirm=True)),
    }
    rates: dict[str, list[float]] = {key: [] for key in runs}
    nc = await raw_connect(creds)
    try:
        js = nc.jetstream()
        async with connect(creds) as queue:
            await fill(queue, 1000)  # warm-up: the stream's files, the cached limits
            await by_receive(queue, 1000, confirm=True)
            order = list(runs)
            for index in range(rounds):
                shift = index % len(order)
                for key in order[shift:] + order[:shift]:
                    n, fn = runs[key]
                    await wait_empty(js, creds["stream"])
                    await fill(queue, n)
                    rates[key].append(n / await fn(queue, n))
            await wait_empty(js, creds["stream"])
    finally:
        await nc.close()
    return rates


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    rounds = 1 if quick else MIN_ROUNDS
    plans = {
        # sync mode: (messages per unconfirmed run, per confirmed run)
        "always": (2000, 1000) if quick else (5000, 3000),
        "interval": (4000, 2000) if quick else (20000, 10000),
    }
    report.info.update({"batch": BATCH, "body_bytes": len(BODY), "rounds": rounds,
                        "plans": {k: {"messages_unconfirmed": u, "messages_confirmed": c}
                                  for k, (u, c) in plans.items()}})
    for sync, (unconfirmed, confirmed) in plans.items():
        say(f"iterate: stack ENCLAVE_SYNC={sync}, {unconfirmed} / {confirmed} messages per run, {rounds} round(s)")
        with enclave_stack({"ENCLAVE_SYNC": sync}) as stack:
            creds = new_queue(stack, f"iterate-{sync}")
            rates = asyncio.run(measure(creds, {"unconfirmed": unconfirmed, "confirmed": confirmed}, rounds))
        report.info[f"msgs_per_s_{sync}"] = {k: [round(v) for v in vs] for k, vs in rates.items()}
        best = {k: median(vs) for k, vs in rates.items()}
        rows = [("iterate + m.ack(confirm=False) each", "iterate_ack_unconfirmed", "receive_delete_many_unconfirmed",
                 "receive(100, wait=1) + delete_many(confirm=False)", ""),
                ("iterate + await m.ack() each (confirmed by the iteration)", "iterate_ack_confirmed",
                 "receive_delete_many_confirmed", "receive(100, wait=1) + delete_many (confirmed)", "ratio >= 0.8"),
                ("iterate + await m.ack(confirm=True) each (a round trip each)", "iterate_ack_each_confirmed",
                 "receive_delete_many_confirmed", "receive(100, wait=1) + delete_many (confirmed)", "")]
        for case, key, against, baseline_case, target in rows:
            note = paired(rates[key], rates[against], "msgs/s") if len(rates[key]) > 1 else ""
            report.add(f"sync={sync}: {case}", best[key], "msgs/s", baseline=best[against],
                       baseline_case=baseline_case, target=target, note=note)
    return report.done()


if __name__ == "__main__":
    main(run, "bench.iterate")
