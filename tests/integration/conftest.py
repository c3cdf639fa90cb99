"""Fixtures of the integration tests that run the control plane in the test's own event loop."""

import nats
import pytest

from enclave_queue.server import Runtime
from enclave_queue.settings import EnclaveSettings
from enclave_queue.state.kv import Store


@pytest.fixture
async def runtime(tmp_path):
    """A Runtime (broker, reconciler, sampler, mover, API) on free ports, resyncing every 0.5 s."""
    settings = EnclaveSettings(home=tmp_path / "home", api_port=0, broker_port=0, resync_seconds=0.5)
    running = Runtime(settings)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def store(nats_server):
    """The state store on a plain nats-server, on a connection that reconnects if it restarts."""
    nc = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        yield await Store.open(nc.jetstream())
    finally:
        await nc.close()
