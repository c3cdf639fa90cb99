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

from enclave_queue.broker.process import free_port, nats_server_binary
from enclave_queue.broker.supervisor import BrokerConfigError, Supervisor
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


async def started_telling_restarts(tmp_path, **options) -> tuple[Supervisor, asyncio.Event]:
    """A started supervisor whose on_restart sets the event returned with it."""
    port = free_port()
    supervisor = Supervisor(tmp_path / "nats.conf", "127.0.0.1", port, **options)
    restarted = asyncio.Event()

    async def on_restart():
        restarted.set()

    supervisor.on_restart = on_restart
    await supervisor.start(minimal_config(tmp_path, port))
    return supervisor, restarted


async def test_a_dead_broker_is_restarted_on_the_same_port(tmp_path):
    supervisor, restarted = await started_telling_restarts(tmp_path)
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


async def test_a_broker_with_many_streams_on_disk_is_given_longer_to_start(tmp_path, monkeypatch):
    # a broker that was killed rebuilds every stream's state before it listens (3,000 queues took
    # longer than START_TIMEOUT): the start waits for it by the streams its store holds. Here the
    # real nats-server starts 1.5 s late, against a 0.5 s timeout and 0.1 s more a stream
    import sys

    from enclave_queue.broker import supervisor as module
    from enclave_queue.errors import BrokerUnavailable

    monkeypatch.setattr(module, "START_TIMEOUT", 0.5)
    monkeypatch.setattr(module, "START_PER_STREAM", 0.1)
    late = tmp_path / "late-nats-server"
    late.write_text(f"#!{sys.executable}\nimport os, sys, time\ntime.sleep(1.5)\n"
                    f"os.execv({str(nats_server_binary())!r}, ['nats-server', *sys.argv[1:]])\n")
    late.chmod(0o755)
    store = tmp_path / "store"
    port = free_port()
    config = minimal_config(tmp_path, port)

    supervisor = Supervisor(tmp_path / "nats.conf", "127.0.0.1", port, binary=late, store_dir=store)
    try:
        with pytest.raises(BrokerUnavailable, match=r"within 0\.5 s"):  # no streams: the short wait
            await supervisor.start(config)
    finally:
        await supervisor.stop()
    for n in range(30):
        (store / "jetstream" / "ACCOUNT" / "streams" / f"S{n}").mkdir(parents=True)
    assert supervisor.streams_on_disk() == 30
    supervisor = Supervisor(tmp_path / "nats.conf", "127.0.0.1", port, binary=late, store_dir=store)
    try:
        await supervisor.start(config)  # waits up to 3.5 s
        nc = await nats.connect(supervisor.url)
        await nc.close()
    finally:
        await supervisor.stop()
    assert supervisor.pid is None


async def test_a_broker_that_restarts_too_slowly_is_replaced_and_given_longer_until_it_answers(tmp_path, monkeypatch):
    # after a crash the restarted server runs but does not answer within its start timeout (0.5 s
    # here; it starts 1.5 s late): it is stopped and started again, given twice as long each time,
    # and once it answers the restart is reported (on_restart), as after any other crash
    import sys

    from enclave_queue.broker import supervisor as module

    monkeypatch.setattr(module, "START_TIMEOUT", 0.5)
    slow = tmp_path / "slow"
    wrapper = tmp_path / "maybe-late-nats-server"
    wrapper.write_text(f"#!{sys.executable}\nimport os, sys, time\nif os.path.exists({str(slow)!r}): time.sleep(1.5)\n"
                       f"os.execv({str(nats_server_binary())!r}, ['nats-server', *sys.argv[1:]])\n")
    wrapper.chmod(0o755)
    supervisor, restarted = await started_telling_restarts(tmp_path, binary=wrapper)
    try:
        first = supervisor.pid
        slow.touch()
        os.kill(first, signal.SIGKILL)
        await asyncio.wait_for(restarted.wait(), 20)  # 0.5 s, 1 s: stopped; 2 s: it answers at 1.5
        assert supervisor.restarts == 1
        nc = await nats.connect(supervisor.url)
        await nc.close()
    finally:
        await supervisor.stop()
    assert supervisor.pid is None
