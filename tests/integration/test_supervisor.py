"""The broker supervisor against a real nats-server: validation before use, restart on death,
stop by PID. And the pytest plugin's own fixture."""

import asyncio
import os
import signal

import nats
import pytest

from enclave_queue.broker.supervisor import BrokerConfigError, Supervisor, free_port
from tests.helpers import eventually


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


async def test_the_plugins_nats_server_fixture_is_a_real_broker(nats_server):
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="PLUGIN", subjects=["plugin"])
        assert (await js.publish("plugin", b"x")).seq == 1
    finally:
        await nc.close()
    await eventually(lambda: nats_server.proc.poll() is None)
