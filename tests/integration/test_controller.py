"""The controller in-process: creates that push one account each and reload nothing, a deleted
account JWT put back, and a drift it cannot repair shown as Errored with its reason."""

import asyncio
import json

from nats.js import api

from enclave_queue.auth import jwt
from enclave_queue.retry import retry_unavailable
from enclave_queue.spec import QueueSpec
from tests.helpers import eventually


async def ready(runtime, name, project="default"):
    status = await runtime.service.status(project, name)
    return status["state"] == "Ready" and status["observed_generation"] == status["generation"]


async def varz(runtime):
    reply = await runtime.conn.system.request("$SYS.REQ.SERVER.PING.VARZ", b"{}", timeout=2)
    return json.loads(reply.data)["data"]


async def test_a_burst_of_creates_pushes_one_account_each_and_reloads_nothing(runtime):
    loaded = (await varz(runtime))["config_load_time"]
    names = [f"burst-{i}" for i in range(20)]
    await asyncio.gather(*(runtime.service.create(QueueSpec(name=n)) for n in names))
    for name in names:
        await eventually(lambda name=name: ready(runtime, name), timeout=20)
    assert (await varz(runtime))["config_load_time"] == loaded
    listed = set(await runtime.conn.list_accounts())
    keys = runtime.accounts.keys
    for name in names:
        queue = await runtime.service.get("default", name)
        assert keys.public(keys.queue_account(queue.id)) in listed


async def test_an_account_removed_behind_the_controllers_back_is_pushed_again(runtime):
    queue = await runtime.service.create(QueueSpec(name="gone-jwt"))
    await eventually(lambda: ready(runtime, "gone-jwt"), timeout=10)
    keys = runtime.accounts.keys
    key = keys.public(keys.queue_account(queue.id))
    notice = jwt.encode({"sub": keys.public(keys.operator),
                         "nats": {"type": "generic", "version": 2, "accounts": [key]}}, keys.operator)
    await runtime.conn.delete_accounts(notice)
    assert key not in await runtime.conn.list_accounts()

    async def back():
        return key in await runtime.conn.list_accounts()

    await eventually(back, timeout=10)  # the next resync gives the broker its claims again
    await eventually(lambda: ready(runtime, "gone-jwt"), timeout=10)


async def test_drift_that_cannot_be_repaired_in_place_is_errored_with_the_reason(runtime):
    queue = await runtime.service.create(QueueSpec(name="broken"))
    await eventually(lambda: ready(runtime, "broken"), timeout=10)
    js = runtime.conn.queue_js(queue.id)
    stream = queue.id.upper()
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
