"""Three `enclave up` nodes on 127.0.0.1, their nats-servers routed into one cluster: a queue made
on one node is used through the others; a node killed with kill -9 (not the leader, then the
leader) while a publisher and a worker run loses no acknowledged message, delivers none after its
confirmed delete, takes sends again within seconds and moves the control-plane lease; a killed
node restarted on its data dir catches up; a node cut off from the others cannot acknowledge."""

import asyncio
import contextlib
import time

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import EnclaveError, Unauthorized
from enclave_queue.testing import EnclaveCluster
from tests.helpers import eventually, stream_config

pytestmark = pytest.mark.slow

CLUSTER_ENV = {"ENCLAVE_RESYNC_SECONDS": "2", "ENCLAVE_SWEEP_SECONDS": "1", "ENCLAVE_SAMPLE_SECONDS": "5"}


@pytest.fixture
def cluster(tmp_path):
    running = EnclaveCluster.start(tmp_path / "cluster", env=CLUSTER_ENV)
    try:
        yield running
    finally:
        running.stop()


def make(node, name: str, **settings) -> dict:
    with node.admin() as admin:
        admin.create_queue("default", {"name": name, **settings})
        queue = admin.wait_ready("default", name, timeout=30)
        return {**admin.credentials("default", name), "replicas": queue["replicas"]}


def only(creds: dict) -> dict:
    """The credentials with one node's URL only: what goes through that node."""
    return {**creds, "broker_urls": [creds["broker_url"]]}


def credentials(node, name: str) -> dict:
    with node.admin() as admin:
        return admin.credentials("default", name)


async def test_a_queue_made_on_one_node_is_used_through_the_others(cluster):
    a, b, c = (cluster.nodes[name] for name in cluster.names)
    assert len(cluster.leaders()) == 1  # the work that must happen once runs on one node
    made = make(a, "orders")
    assert made["replicas"] == 3  # the default on three nodes
    via_b, via_c = credentials(b, "orders"), credentials(c, "orders")
    assert sorted(via_b["broker_urls"]) == sorted(node.broker_url for node in (a, b, c))
    # one node's URL and a wrong password: nats-py learns of the other nodes and had tried them all
    # round and round for ever (the bound here is only the test's, far past the SDK's own)
    with pytest.raises(Unauthorized):
        await asyncio.wait_for(connect({**only(via_b), "password": "not-the-password"}), 120)
    async with connect(only(via_b)) as queue:
        ids = [await queue.send({"n": n}) for n in range(5)]

    def depths():  # each node's API: the counts of the stream's and the consumer's leaders
        seen = []
        for node in (a, b, c):
            with node.admin() as admin:
                stats = admin.stats("default", "orders")
                seen.append((stats["waiting"], stats["delayed"], stats["in_flight"]))
        return seen

    assert await eventually(lambda: depths() == [(5, 0, 0)] * 3, timeout=10), depths()
    async with connect(only(via_c)) as queue:
        got = await queue.receive(batch=10, wait=5)
        assert sorted(m.id for m in got) == sorted(ids)
        for message in got:
            await message.delete()
    with b.admin() as admin:  # replicas 3 needs three nodes; 2 is never a choice
        with pytest.raises(EnclaveError, match="replicas"):
            admin.create_queue("default", {"name": "pairs", "replicas": 2})
        single = admin.create_queue("default", {"name": "single", "replicas": 1})
        assert single["replicas"] == 1
        admin.update_queue("default", "single", {"replicas": 3})  # scaled in place
        scaled = admin.wait_ready("default", "single", timeout=30)
    assert scaled["replicas"] == 3
    assert (await stream_config(b, scaled["id"])).num_replicas == 3  # as the broker has it

    # cut off: with the two others stopped, a lone node cannot acknowledge a publish (no majority
    # stores it); its credentials are read before (the replicated state needs a majority too)
    via_a = credentials(a, "orders")
    b.stop()
    c.stop()
    async with connect(only(via_a)) as queue:
        with pytest.raises(EnclaveError):
            await queue.send({"n": "alone"}, timeout=3)


class Traffic:
    """A publisher and a worker on a queue through every node's URL, retrying through faults:
    what was acknowledged, what was deleted (confirmed), and any message received after its
    delete was confirmed."""

    def __init__(self, creds: dict) -> None:
        self.creds = creds
        self.acked: set[int] = set()
        self.deleted: set[int] = set()
        self.after_delete: list[int] = []
        self.stop = asyncio.Event()
        self.published = asyncio.Event()  #: the publisher's last send has ended: nothing more is acked
        self.tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> "Traffic":
        self.tasks = [asyncio.create_task(self._publish()), asyncio.create_task(self._work())]
        return self

    async def __aexit__(self, *exc) -> None:
        self.stop.set()
        try:
            await self.tasks[0]
        finally:  # the worker drains what was acked, the last send's too (it had ended before it)
            self.published.set()
            await self.tasks[1]

    async def _publish(self) -> None:
        n = 0
        async with connect(self.creds) as queue:
            while not self.stop.is_set():
                try:
                    await queue.send({"n": n}, dedupe_key=f"n{n}", timeout=5)
                except EnclaveError:
                    await asyncio.sleep(0.1)  # the same n again: its dedupe key stores it once
                    continue
                self.acked.add(n)
                n += 1
                await asyncio.sleep(0.005)

    async def _work(self) -> None:
        async with connect(self.creds) as queue:
            while not self.published.is_set() or not self.acked <= self.deleted:
                try:
                    messages = await queue.receive(batch=20, wait=1, lease_s=5)
                    for message in messages:
                        n = message.body["n"]
                        if n in self.deleted:
                            self.after_delete.append(n)
                        await message.delete()
                        self.deleted.add(n)
                except EnclaveError:
                    await asyncio.sleep(0.1)
                if self.published.is_set() and time.monotonic() > self.drain_until:
                    return

    drain_until = float("inf")

    async def more(self, count: int, timeout: float = 30) -> float:
        """Wait for ``count`` more acknowledged sends; the seconds it took."""
        started, mark = time.monotonic(), len(self.acked)
        await eventually(lambda: len(self.acked) >= mark + count, timeout=timeout)
        return time.monotonic() - started


async def test_nodes_killed_one_after_the_other_lose_nothing_and_the_lease_moves(cluster):
    first = cluster.names[0]
    creds = make(cluster.nodes[first], "payments")
    leader = cluster.leader()
    follower = next(name for name in cluster.names if name != leader)
    traffic = Traffic(creds)
    async with traffic:
        await traffic.more(100)
        cluster.nodes[follower].kill()  # kill -9 of a node that does not hold the lease
        await traffic.more(100)
        assert cluster.leader() == leader
        survivor = next(name for name in cluster.names if name not in (leader, follower))
        make(cluster.nodes[survivor], "while-one-is-down")

        cluster.restart(follower)  # on its data dir: it rejoins and catches up
        await eventually(lambda: _ready_through(cluster.nodes[follower], "while-one-is-down"), timeout=30)
        async with connect(only(credentials(cluster.nodes[follower], "while-one-is-down"))) as queue:
            await queue.send("through the node that was down")
            [message] = await queue.receive(wait=5)
            await message.delete()

        cluster.nodes[leader].kill()  # now the lease's holder
        await eventually(lambda: cluster.leader() not in (None, leader), timeout=30)
        assert len(cluster.leaders()) == 1
        await traffic.more(100)
        # a replicated queue made while a node is away: placed once JetStream can (the broker
        # refuses "no suitable peers … peer offline" as soon as it knows the node is gone), so it
        # is Reconciling, not Errored, until then; and it reconciles on the new lease holder
        with cluster.nodes[follower].admin() as admin:
            admin.create_queue("default", {"name": "after-the-leader"})
            cluster.restart(leader)
            assert admin.wait_ready("default", "after-the-leader", timeout=30)["replicas"] == 3
        assert cluster.leader() not in (None, leader)  # the lease stayed where it went
        traffic.drain_until = time.monotonic() + 30
    assert traffic.acked <= traffic.deleted, sorted(traffic.acked - traffic.deleted)[:20]
    assert traffic.after_delete == []


def _ready_through(node, name: str) -> bool:
    with contextlib.suppress(EnclaveError), node.admin() as admin:
        return admin.queue_status("default", name)["state"] == "Ready"
    return False
