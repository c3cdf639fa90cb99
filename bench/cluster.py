"""A cluster of three `enclave up` nodes on this machine (EnclaveCluster: real nats-servers routed
together, ENCLAVE_SYNC=interval, the cluster's default): what replication costs, and how long a
lost node interrupts.

- **Publish throughput**: ``send_batch`` of BATCH messages on a queue of replicas 3 against the
  same on a queue of replicas 1 on the same cluster, and against a single-node stack on the
  durable default (``always``), rounds alternated; msg/s.
- **End-to-end latency**: a put, then a worker already waiting in ``get`` receives it; R3 against
  R1 on the same cluster, one message at a time (about 100 msg/s); p50 / p99 from SAMPLES each.
- **A node killed** (kill -9 of the node holding the control-plane lease, under a publisher):
  seconds from the kill to the first send acknowledged after it, and to another node holding the
  lease. One sample per run (a cluster each); say so beside the figure.
- **Creates on the cluster**: ``create --wait`` (API) with FILL queues there (R3 each), p50 / p99,
  against the same on a single node with as many queues.

Not part of ``python -m bench`` (three nodes and a thousand replicated queues take minutes):
``python -m bench.cluster [--quick] [--fill N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from enclave_queue.client import connect
from enclave_queue.testing import EnclaveCluster

from . import (
    BODY,
    PRODUCT_PERIODS,
    Report,
    checked_percentile,
    enclave_stack,
    main,
    median,
    paired,
    round_order,
    say,
    spread,
)
from . import wait_ready as wait_until_ready

NAME = "cluster"
BATCH = 1000  #: messages per send_batch round (its most)
SAMPLES = 500  #: end-to-end latency samples per side (enough for a p99)
FILL = 1000  #: queues on the cluster when creates are timed
CREATES = 50  #: creates timed per side


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fill", type=int, help=f"queues on the cluster when creates are timed (default {FILL})")


def make(node: Any, name: str, **settings: Any) -> dict[str, Any]:
    with node.admin() as admin:
        admin.create_queue("bench", {"name": name, **settings})
        wait_until_ready(admin, "bench", name)
        return admin.credentials("bench", name)


async def throughput(creds: dict[str, Any], count: int) -> float:
    async with connect(creds) as queue:
        started = time.perf_counter()
        sent = await queue.send_batch([BODY] * count)
        elapsed = time.perf_counter() - started
        assert sent == count
        async for message in queue.messages(batch=500, wait=0.2):
            await message.delete(confirm=False)
    return count / elapsed


async def latencies(creds: dict[str, Any], samples: int) -> list[float]:
    """ms from before a put to the waiting worker's ``get`` returning it."""
    out = []
    async with connect(creds) as producer, connect(creds) as worker:
        for _ in range(samples):
            waiting = asyncio.create_task(worker.get(timeout_s=5))
            await asyncio.sleep(0.005)  # the worker's pull is at the broker
            started = time.perf_counter()
            await producer.send(BODY)
            message = await waiting
            out.append((time.perf_counter() - started) * 1000)
            assert message is not None
            await message.delete(confirm=False)
    return out


async def kill_timings(cluster: EnclaveCluster, creds: dict[str, Any]) -> dict[str, float]:
    leader = cluster.leader()
    assert leader is not None
    acked: list[float] = []
    stop = asyncio.Event()

    async def publish() -> None:
        async with connect(creds) as queue:
            n = 0
            while not stop.is_set():
                try:
                    await queue.send({"n": n}, dedupe_key=f"k{n}", timeout=5)
                except Exception:  # noqa: BLE001 - the node is down: try the same message again
                    await asyncio.sleep(0.02)
                    continue
                acked.append(time.monotonic())
                n += 1

    task = asyncio.create_task(publish())
    await asyncio.sleep(2)
    killed = time.monotonic()
    cluster.nodes[leader].proc.send_signal(signal.SIGKILL)
    moved = None
    while time.monotonic() - killed < 60:
        found = await asyncio.to_thread(cluster.leader)
        if found not in (None, leader):
            moved = time.monotonic() - killed
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1)
    stop.set()
    await task
    after = [t for t in acked if t > killed]
    cluster.nodes[leader].kill()
    return {"first_send_s": (after[0] - killed) if after else float("nan"), "lease_s": moved or float("nan")}


def fill(node: Any, count: int) -> None:
    def one(i: int) -> None:
        with node.admin() as admin:
            admin.create_queue("fill", {"name": f"fill-{i:05d}"})
            wait_until_ready(admin, "fill", f"fill-{i:05d}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


def timed_creates(node: Any, prefix: str, count: int) -> list[float]:
    out = []
    with node.admin() as admin:
        for i in range(count):
            started = time.perf_counter()
            admin.create_queue("bench", {"name": f"{prefix}-{i:03d}"})
            admin.wait_ready("bench", f"{prefix}-{i:03d}", timeout=120)
            out.append((time.perf_counter() - started) * 1000)
    return out


def run(quick: bool, fill_count: Any = None, **_: Any) -> list[Report]:
    report = Report(NAME, quick)
    rounds = 3 if quick else 5
    batch, samples = (500, 50) if quick else (BATCH, SAMPLES)
    queues = fill_count if fill_count is not None else (50 if quick else FILL)
    report.info.update({"rounds": rounds, "batch": batch, "latency_samples": samples, "fill": queues,
                        "cores": os.cpu_count()})
    root = Path(tempfile.mkdtemp(prefix="enclave-bench-cluster-"))
    try:
        say("cluster: three nodes")
        cluster = EnclaveCluster.start(root / "nodes", env=PRODUCT_PERIODS)
        try:
            a, b, _ = (cluster.nodes[n] for n in cluster.names)
            r3, r1 = make(a, "three", replicas=3), make(b, "one", replicas=1)
            say("cluster: throughput and latency, R3 against R1")
            rates: dict[str, list[float]] = {"r3": [], "r1": []}
            for index in range(rounds):
                for key in round_order(index, ["r3", "r1"]):
                    rates[key].append(asyncio.run(throughput(r3 if key == "r3" else r1, batch)))
            lat = {key: asyncio.run(latencies(creds, samples)) for key, creds in (("r3", r3), ("r1", r1))}
            say(f"cluster: {queues} replicated queues, then {CREATES} timed creates")
            fill(a, queues)
            cluster_creates = timed_creates(b, "timed", CREATES if not quick else 10)
            say("cluster: kill -9 of the lease's node under a publisher")
            kill = asyncio.run(kill_timings(cluster, r3))
        finally:
            cluster.stop()
        say("single node (ENCLAVE_SYNC=always): throughput and creates")
        with enclave_stack(PRODUCT_PERIODS) as stack:
            one = make(stack, "single")
            single_rates = [asyncio.run(throughput(one, batch)) for _ in range(rounds)]
            fill(stack, queues)
            single_creates = timed_creates(stack, "timed", CREATES if not quick else 10)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    report.add("send_batch, R3 on 3 nodes", median(rates["r3"]), "msg/s", baseline=median(rates["r1"]),
               baseline_case="R1 on the same cluster", note=paired(rates["r3"], rates["r1"], "msg/s"))
    report.add("send_batch, R3 on 3 nodes (sync interval)", median(rates["r3"]), "msg/s",
               baseline=median(single_rates), baseline_case="one node, sync always (the default)",
               note=f"single node {spread(single_rates, 'msg/s')}")
    for q in (50, 99):
        value, base = checked_percentile(lat["r3"], q), checked_percentile(lat["r1"], q)
        if value is not None and base is not None:
            report.add(f"put -> waiting get, R3, p{q}", value, "ms", baseline=base, baseline_case="R1, same cluster",
                       note=f"{len(lat['r3'])} samples each")
    for q in (50, 99):
        value, base = checked_percentile(cluster_creates, q), checked_percentile(single_creates, q)
        if value is not None and base is not None:
            report.add(f"create --wait @{queues} R3 queues on 3 nodes, p{q}", value, "ms", baseline=base,
                       baseline_case=f"one node @{queues}", note=f"{len(cluster_creates)} creates each")
    report.add("kill -9 of the lease's node: first send acknowledged after", kill["first_send_s"], "s",
               note="one sample (a run kills one node)")
    report.add("kill -9 of the lease's node: lease on another node after", kill["lease_s"], "s",
               note="one sample; the lease lapses 6 s after its last renewal")
    return report.done()


if __name__ == "__main__":
    main(lambda quick, fill=None: run(quick, fill), "bench.cluster", options)
