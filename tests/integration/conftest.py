"""Fixtures of the integration tests that run the control plane in the test's own event loop."""

import pytest

from enclave_queue.server import Runtime
from enclave_queue.settings import EnclaveSettings


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
