"""Dead letters: how soon a message that failed its last receive is on the dead-letter queue, and
how fast a redrive moves dead letters back.

Latency. Each source queue allows one receive (``max_receives=1``) and has a DLQ. A worker
receives a message and hands it back with ``nack()``: that was its last receive. The clock runs
from the nack to the moment a worker waiting on the DLQ receives it; the busy case is also split at
the mover's making of the copy (its ``Enclave-Dead-Lettered-At``) and at the copy's storing on the
DLQ (the broker's timestamp of it): what comes after is the DLQ's delivery to its worker. Measured
with 1 and with 100 source queues busy at once (every queue's worker doing the same), 20 messages a
second each; and with 100 at 2 a second each, sent at the same moments on every queue (bursts of
100) and again spread evenly over each half second, as independent queues would send. Baseline: the broker's own
redelivery on as many busy queues (the DLQs themselves, which have no limit): from a ``nack()``
to the same message received again — the least a hand-back can take on this machine. Like for
like: the same number of queues, messages, pacing and connections (two a queue, each with a
pull nearly always waiting: the failing worker and its DLQ's worker; two workers on the plain
queue, either nacking a first receive or taking a redelivery). The two run one after the other,
which first alternating round by round (MIN_ROUNDS rounds); the samples of all rounds are pooled
and a percentile is only reported from enough of them (bench.samples_for). Every queue's two
connections are opened before its messages are sent, a few at a time (hundreds of app connects
at once overrun the auth callout): the clock measures moves, not connects. While a phase runs the
garbage collector leaves alone what this process held before it (``_apart``): 200 apps in one
process make a heap none of them would have alone, and its full collection stopped all of them at
once, 110–220 ms a phase, on both sides.

By way in. The mover logs each batch it moves naming how it learnt of it (``nack``: the SDK's word
as it hands back a last receive; ``advisory``; ``sweep``; the stack logs at info), so each sample
is split by the way that moved it first. The SDK's worker (``busy``) is the headline. In the same
rotation, ``raw``: the same worker on a plain nats-py connection, whose nak tells the mover
nothing, so the broker's advisory is the way in (what an app on any other NATS client gets); and,
with many queues, ``idle`` and ``idle-raw``: the SDK's worker and a plain client's take their
queue's messages once, nack them all and pull no more, so no advisory comes by itself: the SDK's
word moves them, and for the plain client the sweep's probe (every ENCLAVE_SWEEP_SECONDS) is what
finds them, so its latency is bounded below by the sweep's period. Neither has a baseline (a
redelivery needs a pull).

CPU. Each phase also reads the CPU time the control process, the broker and this process (every
app's connections: senders, failing workers, DLQ workers) spent from its first message to its
last sample, background work included; divided by the messages, it is what a move costs against
a redelivery, which is what decides how long either waits when the cores are busy.

The stacks run the product's sweep and depth-sampler periods (bench.PRODUCT_PERIODS: 15 and 60 s),
not the test harness's 1 s: sweeping 200 queues every second cost 8% of a core in the control
process and 9% in the broker under the calm case's load (6% and 5% idle), on both sides of the
comparison.

Redrive. The DLQ is filled with dead letters (published with the headers the mover writes), then
``POST …/redrives`` (naming the source queue: letters published by hand carry no signed provenance)
moves them back to their source queue. Baseline: a raw nats-py republish of
the same number of messages (``fetch(100)`` from the DLQ, pipelined publish to the source with
PubAcks, then ``ack()``), what an operator would script by hand. Each round refills the DLQ and
empties the source (untimed) before each side, which side first alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import re
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from enclave_queue import envelope
from enclave_queue.client import connect

from . import (
    BODY,
    MIN_ROUNDS,
    PRODUCT_PERIODS,
    PROJECT,
    Report,
    Steal,
    checked_percentile,
    cpu_seconds,
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


#: the mover's line for each batch it moved (controller/mover.py), naming the way in
MOVED_LINE = re.compile(r"messages ([\d,]+) of queue \S+?\.(\S+) (?:moved to|discarded).*\((advisory|sweep|reject|nack)\)")
PATHS = ("nack", "advisory", "sweep")
#: the failing workers' kinds: with a pull always waiting, the SDK's (its nack tells the mover) and a
#: plain NATS client's (the broker's advisory does); pulling no more, the SDK's (its word) and a plain
#: client's (the sweep's probe)
FAILING = ("busy", "raw", "idle", "idle-raw")
RAW_KINDS = ("raw", "idle-raw")
CONNECTING = 8  #: app connections opened at the same time before a phase
GAP = 0.05  #: seconds between a queue's messages: 20 msg/s a queue, 2,000 a second with 100 queues
#: the calm case: 2 msg/s a queue, 200 a second with 100 queues; every queue's messages at the same
#: moments (bursts of 100: what the target is checked on), and again spread evenly over the period
CALM_GAP = 0.5


@dataclass
class Sample:
    ms: float
    queue: str  #: the source queue's name
    seq: int  #: the message's sequence on it
    receives: int = 1  #: the DLQ worker's receives of it (2: a lease of the DLQ's ran out: not the mover's time)
    #: from the nack to the mover's making of the copy (its ``Enclave-Dead-Lettered-At``) and to the
    #: copy's storing on the DLQ (the broker's timestamp of it): where a move's time goes
    built_ms: Optional[float] = None
    stored_ms: Optional[float] = None


@dataclass
class Cpu:
    """CPU seconds of the control process, the broker and this process (the apps' side)."""
    control: float = 0.0
    broker: float = 0.0
    apps: float = 0.0

    @classmethod
    def now(cls, stack: Any) -> Cpu:
        return cls(cpu_seconds(stack.pid), cpu_seconds(stack.broker_pid), time.process_time())

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.control - other.control, self.broker - other.broker, self.apps - other.apps)

    def __add__(self, other: Cpu) -> Cpu:
        return Cpu(self.control + other.control, self.broker + other.broker, self.apps + other.apps)

    def per_message_ms(self, messages: int) -> dict[str, float]:
        ms = {part: round(seconds * 1000 / messages, 2) for part, seconds in vars(self).items()}
        return {**ms, "all": round(sum(ms.values()), 2)}


def moved_by(stack: Any) -> dict[tuple[str, int], str]:
    """Which way in moved each dead letter so far, (source queue, sequence) -> 'advisory' or
    'sweep', from the mover's log lines (the stack logs at info)."""
    ways: dict[tuple[str, int], str] = {}
    for match in MOVED_LINE.finditer(stack.log_path.read_text(errors="replace")):
        for seq in match.group(1).split(","):
            ways.setdefault((match.group(2), int(seq)), match.group(3))  # a later copy of it was a no-op
    return ways


class RawWorker:
    """A queue's worker on a plain nats-py connection, as an app on any NATS client: a pull
    subscription on the queue's consumer, whose nack is a plain nak (nothing tells the mover: the
    broker's advisory does, or the sweep). Duck-types the SDK queue as far as the workers here go."""

    def __init__(self, nc: Any, sub: Any, subject: str) -> None:
        self.nc, self.sub, self.subject = nc, sub, subject
        self.js = nc.jetstream()

    @classmethod
    async def open(cls, creds: dict[str, str]) -> RawWorker:
        nc = await raw_connect(creds)
        return cls(nc, await nc.jetstream().pull_subscribe_bind(creds["consumer"], stream=creds["stream"]),
                   creds["subject"])

    async def send(self, body: str) -> None:
        await self.js.publish(self.subject, body.encode(), headers={"Content-Type": envelope.TEXT})

    async def receive(self, batch: int, wait: float) -> list[RawMessage]:
        try:
            return [RawMessage(m) for m in await self.sub.fetch(batch, timeout=wait)]
        except TimeoutError:  # nats-py raises asyncio's (the builtin) when nothing came
            return []

    async def close(self) -> None:
        await self.nc.close()


class RawMessage:
    def __init__(self, msg: Any) -> None:
        self.msg, self.body = msg, msg.data.decode()

    async def nack(self) -> None:
        await self.msg.nak()


async def _dlq_worker(dlq: Any, nacked: dict[str, float], samples: int, got: list[Sample]) -> None:
    """The DLQ's worker: a pull always waiting; each sample runs from the nack to its receive."""
    while len(got) < samples:
        batch = await dlq.receive(batch=10, wait=0.5)
        arrived = time.perf_counter()
        wall = time.time() - arrived  #: the wall clock (the broker's and the mover's) at perf_counter 0
        for m in batch:
            built = envelope.parse_time(m.headers.get(envelope.DEAD_LETTERED_AT))
            got.append(Sample((arrived - nacked[m.body]) * 1000, m.headers.get("Enclave-Source-Queue", ""),
                              int(m.headers.get("Enclave-Source-Sequence", 0)), m.receive_count,
                              (built.timestamp() - wall - nacked[m.body]) * 1000 if built else None,
                              (m.sent_at.timestamp() - wall - nacked[m.body]) * 1000))
        await dlq.delete_many(batch)


async def _failing_worker(queue: Any, dlq: Any, samples: int, got: list[Sample], gap: float,
                          start: float) -> None:
    """A busy queue whose worker fails every message: a pull is always waiting on the source (as
    on any busy queue); every message is nacked on its only receive, and a worker on the DLQ takes
    the dead letters. ``queue`` is an SDK queue (its nack tells the mover at once) or, for the
    advisory's way in, a plain nats-py pull subscription (``RawWorker``: a nak, no word)."""
    nacked: dict[str, float] = {}
    done = asyncio.Event()

    async def work(queue: Any) -> None:
        while not done.is_set():
            for message in await queue.receive(batch=10, wait=0.5):
                nacked[message.body] = time.perf_counter()
                await message.nack()

    here: list[Sample] = []
    tasks = [asyncio.create_task(work(queue)), asyncio.create_task(_dlq_worker(dlq, nacked, samples, here))]
    await asyncio.sleep(start)
    for i in range(samples):
        await queue.send(f"m{i}")
        await asyncio.sleep(gap)
    await asyncio.wait_for(tasks[1], 120)
    done.set()
    await tasks[0]
    got.extend(here)


async def _idle_failing_worker(queue: Any, dlq: Any, samples: int, got: list[Sample], gap: float,
                               start: float) -> None:
    """A queue whose worker takes its messages once, nacks them all and pulls no more: no pull
    waits after the last receive, so no advisory comes by itself. The SDK's nack tells the mover
    (``idle``); a plain NATS client's (``RawWorker``: ``idle-raw``) leaves them to the sweep's probe
    (every ENCLAVE_SWEEP_SECONDS)."""
    nacked: dict[str, float] = {}
    here: list[Sample] = []
    for i in range(samples):
        await queue.send(f"m{i}")
    taken: list[Any] = []
    while len(taken) < samples:
        taken += await queue.receive(batch=samples, wait=2)
    for message in taken:
        nacked[message.body] = time.perf_counter()
        await message.nack()
    await asyncio.wait_for(_dlq_worker(dlq, nacked, samples, here), 120)
    got.extend(here)


async def _redelivering_worker(one: Any, two: Any, samples: int, got: list[Sample], gap: float,
                               start: float) -> None:
    """The baseline's busy queue: messages sent as to a failing worker's queue, two workers on two
    connections; whichever takes a message on its first receive nacks it, whichever takes it on
    its second records the latency (from the nack) and deletes it."""
    nacked: dict[str, float] = {}
    here: list[Sample] = []
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
                    here.append(Sample((arrived - nacked[message.body]) * 1000, "", message.sequence))
                    await message.delete()
            if len(here) >= samples:
                done.set()

    tasks = [asyncio.create_task(work(one)), asyncio.create_task(work(two))]
    await asyncio.sleep(start)
    for i in range(samples):
        await one.send(f"m{i}")
        await asyncio.sleep(gap)
    await asyncio.wait_for(done.wait(), 120)
    await asyncio.gather(*tasks)
    got.extend(here)


async def _phase(kind: str, pairs: list[tuple[dict[str, str], dict[str, str]]], samples: int,
                 got: list[Sample], gap: float, stack: Any, spread: bool = False) -> Cpu:
    """Every queue at once: failing its messages into the DLQ with a pull waiting ('busy', 'raw')
    or none ('idle', 'idle-raw'), the SDK's worker or a plain NATS client's, or (the baseline) the DLQs, empty again, as plain queues with no receive limit,
    redelivering theirs. Two connections a queue either way, opened (a few at a time: hundreds
    of app connects at once overrun the auth callout) before any message is sent. Returns the CPU
    the stack's two processes and this one (the apps) spent from the first message on."""
    worker = (_redelivering_worker if kind not in FAILING
              else _idle_failing_worker if kind.startswith("idle") else _failing_worker)
    async with contextlib.AsyncExitStack() as opened:
        gate = asyncio.Semaphore(CONNECTING)

        async def open_one(creds: dict[str, str], raw: bool = False) -> Any:
            async with gate:
                if not raw:
                    return await opened.enter_async_context(connect(creds))
                worker = await RawWorker.open(creds)
                opened.push_async_callback(worker.close)
                return worker

        two = [(s, d) if kind != "redelivered" else (d, d) for s, d in pairs]
        queues = await asyncio.gather(*(asyncio.gather(open_one(a, kind in RAW_KINDS), open_one(b)) for a, b in two))
        with _apart():
            before = Cpu.now(stack)
            # spread: each queue's first message a share of the gap after the last one's, as
            # independent queues would be; otherwise every queue sends at the same moments
            await asyncio.gather(*(worker(a, b, samples, got, gap, gap * i / len(queues) if spread else 0.0)
                                   for i, (a, b) in enumerate(queues)))
            return Cpu.now(stack) - before


@contextlib.contextmanager
def _apart() -> Iterator[None]:
    """While a phase runs, the garbage collector leaves alone what was there before it (the 200
    apps' connections, this harness): in one process they make a heap no app of their own would
    have, and a full collection of it stopped every app at once for 110–220 ms, once a phase."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _add_percentiles(report: Report, case: str, values: list[float], base: Optional[list[float]], q: int,
                     target: str = "", note: str = "") -> None:
    value = checked_percentile(values, q)
    baseline = checked_percentile(base, q) if base is not None else None
    if value is None or (base is not None and baseline is None):
        say(f"deadletters: no p{q} for {case}: {len(values)} samples, {samples_for(q)} needed")
        return
    report.add(f"{case}, p{q}", value, "ms", baseline=baseline, target=target, note=note,
               baseline_case=f"nack -> redelivered on as many busy queues, p{q}" if base is not None else "")


def latency(report: Report, quick: bool, queues: Optional[list[int]] = None) -> None:
    rounds = 2 if quick else MIN_ROUNDS
    cases = [(busy, GAP, False) for busy in queues or ((1, 10) if quick else (1, 100))]
    if not quick and not queues:
        cases += [(100, CALM_GAP, False), (100, CALM_GAP, True)]
    for busy, gap, spread in cases:
        samples = 5 if quick or busy > 1 else 100  #: messages per queue per round
        # the idle case waits for the sweep (up to its period a message): only with many queues at once
        kinds = ["busy", "raw", "redelivered", *(["idle", "idle-raw"] if busy > 1 and gap == GAP else [])]
        paced = ("" if gap == GAP else f" at {1 / gap:g} msg/s each") + (", spread over the period" if spread else "")
        label = f"{busy} busy queue(s){paced}"
        say(f"deadletters: latency with {busy} queue(s){paced}, {samples} message(s) each, {rounds} rounds: {kinds}")
        pooled: dict[str, list[Sample]] = {kind: [] for kind in kinds}
        spent = {kind: Cpu() for kind in kinds}
        round_p50: dict[str, list[float]] = {kind: [] for kind in kinds}
        round_steal: dict[str, list[float]] = {kind: [] for kind in kinds}  #: % of CPU time the host took
        # info: the mover names each way in
        with enclave_stack(env={**PRODUCT_PERIODS, "ENCLAVE_LOG_LEVEL": "info"}) as stack:
            pairs = []
            for i in range(busy):
                dlq = new_queue(stack, f"dlq-{i}")
                source = new_queue(stack, f"src-{i}", max_receives=1, visibility_timeout_seconds=30,
                                   dead_letter_queue=f"dlq-{i}")
                pairs.append((source, dlq))
            quiet(stack)
            # first one message a queue on each side, not recorded: it opens the control process's
            # connections into the queues' accounts (its pool keeps 64 open past 10 s unused), which
            # a queue failing steadily has open; the first round paid for them before
            for kind in ("busy", "redelivered"):
                asyncio.run(_phase(kind, pairs, 1, [], gap, stack, spread))
                quiet(stack)
            for r in range(rounds):
                for kind in round_order(r, kinds):
                    got: list[Sample] = []
                    stolen = Steal()
                    spent[kind] += asyncio.run(_phase(kind, pairs, samples, got, gap, stack, spread))
                    round_steal[kind].append(stolen.percent())
                    pooled[kind] += got
                    round_p50[kind].append(percentile([s.ms for s in got], 50))
                    quiet(stack)
            ways = moved_by(stack)
        ms = {kind: [s.ms for s in found] for kind, found in pooled.items()}
        redelivered = ms["redelivered"]
        by_path: dict[str, dict[str, list[float]]] = {}
        for kind in FAILING:
            for sample in pooled.get(kind, []):
                path = ways.get((sample.queue, sample.seq), "unknown")
                by_path.setdefault(kind, {}).setdefault(path, []).append(sample.ms)
        for q in (50, 99):
            # issue 16's targets are for 100 queues failing at once
            target = ("value <= 100" if q == 50 else "value <= 500") if busy >= 100 and not spread else ""
            again = sum(sample.receives > 1 for sample in pooled["busy"])
            note = (f"{len(ms['busy'])} and {len(redelivered)} samples pooled over {rounds} rounds; by way in: "
                    + ", ".join(f"{path} {len(v)}" for path, v in sorted(by_path["busy"].items()))
                    + f"; {again} reached the DLQ worker on a redelivery of the DLQ")
            if q == 50:
                note += ("; p50 per round: " + paired(round_p50["busy"], round_p50["redelivered"], "ms")
                         + f"; CPU stolen by the host per round, %: {round_steal['busy']}")
            _add_percentiles(report, f"nack of last receive -> on DLQ, {label}", ms["busy"],
                             redelivered, q, target, note)
            for part, reached in (("built_ms", "the mover made the copy"), ("stored_ms", "the copy stored on the DLQ")):
                split = [getattr(s, part) for s in pooled["busy"] if getattr(s, part) is not None]
                _add_percentiles(report, f"  nack -> {reached}, {label}", split, None, q,
                                 note=f"{len(split)} samples; the move above up to that step (the mover's "
                                      "clock and the broker's are this machine's): the rest is the DLQ's "
                                      "delivery to its waiting worker")
            _add_percentiles(report, f"  the same from a plain NATS client (nak), {label}", ms["raw"], redelivered, q,
                             note=f"{len(ms['raw'])} samples; nothing tells the mover but the broker's advisory; "
                                  "by way in: " + ", ".join(f"{path} {len(v)}"
                                                            for path, v in sorted(by_path["raw"].items())))
            for kind in FAILING:
                for path in PATHS:
                    values = by_path.get(kind, {}).get(path, [])
                    if values and (kind.startswith("idle") or path != "sweep" or len(values) >= samples_for(q)):
                        _add_percentiles(report, f"  {kind}, moved by the {path}, {label}", values, None, q,
                                         note=f"{len(values)} samples; " + (
                                             "no pull waits after the nack" + (
                                                 ": found by the sweep's probe (every "
                                                 f"{PRODUCT_PERIODS['ENCLAVE_SWEEP_SECONDS']} s)"
                                                 if kind == "idle-raw" else ", the SDK's word")
                                             if kind.startswith("idle") else "a pull always waits"))
        key = f"latency_ms_{busy}{'_calm' if gap != GAP else ''}{'_spread' if spread else ''}"
        report.info[key] = {
            kind: {path: [round(x, 1) for x in sorted(v)] for path, v in paths.items()} for kind, paths in by_path.items()}
        report.info[key]["redelivered"] = [round(x, 1) for x in sorted(redelivered)]
        report.info[key]["round_p50_ms"] = {k: [round(x, 1) for x in v] for k, v in round_p50.items()}
        report.info[key]["round_steal_pct"] = round_steal
        # what a message cost each process: where a move's time goes when the cores are busy
        cpu = report.info[key]["cpu_ms_a_message"] = {
            kind: spent[kind].per_message_ms(len(pooled[kind])) for kind in kinds if pooled[kind]}
        report.add(f"  CPU a message, all processes, {label}", cpu["busy"]["all"], "ms",
                   baseline=cpu["redelivered"]["all"], baseline_case="a redelivery on as many busy queues",
                   note="control process / broker / apps (this process), ms a message: " + "; ".join(
                       f"{kind} {c['control']} / {c['broker']} / {c['apps']}" for kind, c in cpu.items()))


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


def run(quick: bool, queues: Optional[list[int]] = None, no_redrive: bool = False) -> list[Report]:
    report = Report(NAME, quick)
    latency(report, quick, queues)
    if not no_redrive:
        redrive(report, quick)
    return report.done()


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queues", type=int, nargs="+", help="the numbers of queues failing at once to measure "
                                                               "(default 1 and 100; --quick: 1 and 10)")
    parser.add_argument("--no-redrive", action="store_true", help="measure the latency only")


if __name__ == "__main__":
    main(run, "bench.deadletters", _options)
