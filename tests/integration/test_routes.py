"""Brokers routed into a cluster, each run by the Supervisor on the configuration broker/config.py
renders: the routes log in whatever shape the password derived from the master key takes, and the
state store waits for a forming cluster's peers rather than giving up.

nats-server reads the route password and URLs from its environment (``route_env``) and parses each
value as configuration text, where a bare value starting ``-X`` or ``2024-x`` is a malformed number
or date: the broker refused to start on such a password.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import nats.js.errors
import pytest
from nats.js import api

from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.broker.config import BrokerConfig, render, route_env, route_password
from enclave_queue.broker.connection import BrokerConnection
from enclave_queue.broker.process import free_port
from enclave_queue.broker.supervisor import Supervisor
from enclave_queue.retry import NO_PEERS
from enclave_queue.state.kv import Store
from tests.helpers import eventually

#: passwords of the urlsafe base64 alphabet route_password draws from, of the shapes nats-server
#: reads as something other than a string when they stand bare
AWKWARD = ["-XbQ9rT_2mVw8LkPz0aYc4hNdE7sJfUg", "2024-xKq9_TbVw8LmPz0aYc4hNdE7sJf", "12-Zq9rT_2mVw8LkPz0aYc4hNdE7sJfU",
           "1234567890123456789012345678901-"]


class Brokers:
    """Nodes ``node-a``, ``node-b``, … of one cluster, sharing operator keys and a route password;
    each started on demand (``start``), all stopped by ``stop``."""

    def __init__(self, root: Path, size: int, password: str) -> None:
        self.root, self.password = root, password
        self.keys = OperatorKeys(MasterKey(os.urandom(32)))
        self.names = [f"node-{chr(ord('a') + i)}" for i in range(size)]
        self.ports = {name: free_port() for name in self.names}
        self.cluster_ports = {name: free_port() for name in self.names}
        self.supervisors: dict[str, Supervisor] = {}

    async def start(self, name: str) -> Supervisor:
        root = self.root / name
        root.mkdir()
        config = BrokerConfig(host="127.0.0.1", port=self.ports[name], store_dir=root / "js", log_file=root / "nats.log",
                              sync="interval", max_file_store=64 << 20, server_name=name,
                              cluster_port=self.cluster_ports[name],
                              routes=tuple(f"127.0.0.1:{port}" for other, port in self.cluster_ports.items() if other != name))
        supervisor = Supervisor(root / "nats.conf", "127.0.0.1", self.ports[name],
                                secret_env=route_env(config, self.password))
        self.supervisors[name] = supervisor
        await supervisor.start(render(config, self.keys))
        assert self.password not in (root / "nats.conf").read_text()  # the secret stays in the environment
        return supervisor

    async def stop(self) -> None:
        for supervisor in self.supervisors.values():
            await supervisor.stop()


@asynccontextmanager
async def brokers(root: Path, size: int, password: str) -> AsyncIterator[Brokers]:
    running = Brokers(root, size, password)
    try:
        yield running
    finally:
        await running.stop()


def test_a_derived_route_password_is_the_alphabet_the_awkward_ones_are_drawn_from():
    password = route_password(MasterKey(os.urandom(32)))
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert len(password) == 32 and set(password) <= alphabet
    assert all(len(p) == 32 and set(p) <= alphabet for p in AWKWARD)


@pytest.mark.parametrize("password", AWKWARD)
async def test_two_brokers_route_to_each_other_with_a_password_of_any_shape(tmp_path: Path, password: str):
    async with brokers(tmp_path, 2, password) as cluster:
        for name in cluster.names:
            await cluster.start(name)
        conn = await BrokerConnection.connect(cluster.supervisors["node-a"].url, cluster.keys)
        try:
            async def routed() -> list[str]:  # the first node to answer names a route to the other
                reply = await conn.system.request("$SYS.REQ.SERVER.PING.ROUTEZ", b"", timeout=2)
                answer = json.loads(reply.data)
                other = {"node-a": "node-b", "node-b": "node-a"}[answer["server"]["name"]]
                return [r["remote_name"] for r in answer["data"].get("routes") or [] if r.get("remote_name") == other]

            assert await eventually(routed, timeout=10)
        finally:
            await conn.close()


async def test_the_state_store_waits_for_the_peers_a_forming_cluster_has_not_got_yet(tmp_path: Path):
    async with brokers(tmp_path, 3, route_password(MasterKey(os.urandom(32)))) as cluster:
        await cluster.start("node-a")
        await cluster.start("node-b")
        conn = await BrokerConnection.connect(cluster.supervisors["node-a"].url, cluster.keys)
        try:
            # two of three: a meta leader, but no third peer to place a bucket of three replicas on
            refusal = await eventually(_placement_answer(conn), timeout=20)
            assert isinstance(refusal, nats.js.errors.BadRequestError) and refusal.err_code == NO_PEERS, refusal
            opening = asyncio.create_task(Store.open(conn.js, replicas=3, attempts=300))
            await asyncio.sleep(1)
            assert not opening.done(), opening  # still waiting, not given up on the 400
            await cluster.start("node-c")
            store = await asyncio.wait_for(opening, 30)
            assert await store.queues.get("nothing") is None
        finally:
            await conn.close()


def _placement_answer(conn: BrokerConnection) -> Callable[[], object]:
    """A check for ``eventually``: the error creating a stream of three replicas gets once the meta
    group has a leader (None while it has none, which times out or finds no responders)."""
    async def check() -> object:
        try:
            await conn.js.add_stream(api.StreamConfig(name="PROBE", subjects=["probe"], num_replicas=3))
        except nats.js.errors.BadRequestError as exc:
            return exc
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
            return None
        raise AssertionError("a stream of three replicas was placed on two nodes")
    return check

