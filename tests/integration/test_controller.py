"""The controller in-process: coalesced reloads, the spare account pool, and a drift it cannot
repair shown as Errored with its reason."""

import asyncio

import pytest
from nats.js import api

from enclave_queue.retry import retry_unavailable
from enclave_queue.server import Runtime
from enclave_queue.settings import EnclaveSettings
from enclave_queue.spec import QueueSpec
from tests.helpers import eventually


@pytest.fixture
async def runtime(tmp_path, request):
    pool = getattr(request, "param", 2)
    settings = EnclaveSettings(home=tmp_path / "home", api_port=0, broker_port=0, resync_seconds=0.5,
                               account_pool=pool)
    running = Runtime(settings)
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def ready(runtime, name, project="default"):
    status = await runtime.service.status(project, name)
    return status["state"] == "Ready" and status["observed_generation"] == status["generation"]


@pytest.mark.parametrize("runtime", [0], indirect=True)
async def test_many_creates_share_few_config_reloads(runtime):
    before = runtime.accounts.reloads
    names = [f"burst-{i}" for i in range(20)]
    await asyncio.gather(*(runtime.service.create(QueueSpec(name=n)) for n in names))
    for name in names:
        await eventually(lambda name=name: ready(runtime, name), timeout=20)
    reloads = runtime.accounts.reloads - before
    assert 1 <= reloads <= len(names) // 2, reloads  # one reload per create would be 20


async def test_a_create_claims_an_account_the_broker_already_runs(runtime):
    await eventually(lambda: len([a for a in runtime.accounts.pooled() if a.id in runtime.accounts.applied]) == 2)
    spare = {a.id for a in runtime.accounts.pooled()}
    reloads = runtime.accounts.reloads
    queue = await runtime.service.create(QueueSpec(name="from-pool"))
    assert queue.id in spare
    await eventually(lambda: ready(runtime, "from-pool"), timeout=10)
    assert runtime.accounts.get(queue.id).owner == "default.from-pool"
    # the pool refills in the background: that is the only reload the create caused
    await eventually(lambda: len(runtime.accounts.pooled()) == 2)
    assert runtime.accounts.reloads - reloads <= 1


async def test_drift_that_cannot_be_repaired_in_place_is_errored_with_the_reason(runtime):
    queue = await runtime.service.create(QueueSpec(name="broken"))
    await eventually(lambda: ready(runtime, "broken"), timeout=10)
    js = runtime.conn.queue_js(queue.id)
    stream = queue.id.upper()
    # the pool's refill may be reloading the broker: its API answers "no responders" for a moment
    await retry_unavailable(lambda: js.delete_stream(stream))
    await retry_unavailable(lambda: js.add_stream(name=stream, subjects=[queue.subject],
                                                  retention=api.RetentionPolicy.LIMITS))

    async def errored():
        status = await runtime.service.status("default", "broken")
        return status if status["state"] == "Errored" else None

    status = await eventually(errored, timeout=10)
    assert "was changed outside Enclave (retention)" in status["message"]
    condition = {c["type"]: c for c in status["conditions"]}["Errored"]
    assert condition["status"] is True and condition["message"] == status["message"]

    # the operator fixes it by hand; the next resync brings the queue back to Ready
    await retry_unavailable(lambda: js.delete_stream(stream))
    await eventually(lambda: ready(runtime, "broken"), timeout=10)
