"""The broker supervisor against a real nats-server: validation before use, restart on death,
stop by PID. And the pytest plugin's own fixture."""

import asyncio
import os
import signal
import socket

import nats
import psutil
import pytest
from nats.js import api

from enclave_queue.broker.supervisor import BrokerConfigError, Supervisor, free_port
from enclave_queue.testing import NatsServer


def minimal_config(tmp_path, port):
    return f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{tmp_path / "js"}" }}\n'


async def test_a_bad_configuration_never_replaces_a_good_one(tmp_path):
    port = free_port()
    supervisor = Supervisor(tmp_path / "nats.conf", "127.0.0.1", port)
    good = minimal_config(tmp_path, port)
    await supervisor.start(good)
    try:
        with pytest.raises(BrokerConfigError, match="nats-server refused the configuration"):
            await supervisor.write_config(good + "accounts { broken: { users: [ { user: } ] } }\n")
        assert (tmp_path / "nats.conf").read_text() == good
        assert not (tmp_path / "nats.conf.new").exists()
        assert await supervisor.write_config(good) is False  # unchanged: nothing to reload
        nc = await nats.connect(supervisor.url)
        await nc.close()
    finally:
        await supervisor.stop()
    assert supervisor.pid is None


async def test_a_dead_broker_is_restarted_on_the_same_port(tmp_path):
    port = free_port()
    supervisor = Supervisor(tmp_path / "nats.conf", "127.0.0.1", port)
    restarted = asyncio.Event()

    async def on_restart():
        restarted.set()

    supervisor.on_restart = on_restart
    await supervisor.start(minimal_config(tmp_path, port))
    try:
        first = supervisor.pid
        os.kill(first, signal.SIGKILL)
        await asyncio.wait_for(restarted.wait(), 10)
        assert supervisor.pid not in (None, first)
        assert supervisor.restarts == 1
        nc = await nats.connect(supervisor.url)
        await nc.close()
    finally:
        await supervisor.stop()


async def test_the_plugins_nats_server_fixture_is_a_real_broker_on_loopback_with_its_own_store(nats_server):
    listening = [c.laddr for c in psutil.Process(nats_server.pid).net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", nats_server.port)]  # one client port, loopback only
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="PLUGIN", subjects=["plugin"])
        assert (await js.publish("plugin", b"x")).seq == 1
        assert (await js.stream_info("PLUGIN")).config.storage == api.StorageType.FILE
    finally:
        await nc.close()
    # the stream's files are in the test's own temporary store
    assert list((nats_server.store_dir / "js").rglob("PLUGIN/msgs/*.blk"))


def test_the_plugins_nats_server_stops_by_its_pid(tmp_path):
    server = NatsServer.start(tmp_path / "nats")
    pid = server.pid
    assert psutil.Process(pid).name().startswith("nats-server")
    server.stop()
    assert server.proc.returncode is not None and not psutil.pid_exists(pid)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
