"""No configuration reloads: queue accounts reach the broker as pushed JWTs, so creates, updates
and deletes never reload it, and apps sending, receiving and deleting meanwhile lose nothing and
see nothing twice."""

import json
import threading

from enclave_queue.client import connect
from tests.helpers import make_queue, system_connection


async def config_load_time(stack) -> str:
    """When the broker last loaded its configuration file (a reload changes it)."""
    async with system_connection(stack) as nc:
        reply = await nc.request("$SYS.REQ.SERVER.PING.VARZ", b"{}", timeout=2)
    return json.loads(reply.data)["data"]["config_load_time"]


def churn(stack) -> None:
    with stack.admin() as admin:
        for i in range(12):
            make_queue(stack, f"churn-{i}")
            admin.update_queue("default", f"churn-{i}", {"visibility_timeout_seconds": 40})
            if i % 2:
                admin.delete_queue("default", f"churn-{i}")
                admin.wait_deleted("default", f"churn-{i}", timeout=20)


async def test_creates_updates_and_deletes_never_reload_and_lose_nothing(enclave_stack_factory):
    stack = enclave_stack_factory()
    loaded = await config_load_time(stack)
    creds = make_queue(stack, "steady", visibility_timeout_seconds=2)
    creating = threading.Thread(target=churn, args=(stack,))
    sent = received = 0
    seen: set[int] = set()
    async with connect(creds) as queue:
        creating.start()
        while creating.is_alive() or received < sent:
            if creating.is_alive():
                sent += await queue.send_batch([{"n": sent + i} for i in range(20)])
            batch = await queue.receive(batch=50, wait=0.2)
            for message in batch:
                assert message.receive_count == 1, "a deleted or unexpired message came back"
                assert message.body["n"] not in seen
                seen.add(message.body["n"])
            await queue.delete_many(batch)
            received += len(batch)
        creating.join()
        # an acknowledgement the broker dropped would bring its message back after 2 s
        assert await queue.receive(wait=3) == []
    assert seen == set(range(sent)) and sent >= 100
    with stack.admin() as admin:
        assert len(admin.list_queues("default")) == 7
    assert await config_load_time(stack) == loaded  # not one reload
    assert "Reloaded" not in (stack.home / "logs" / "nats-server.log").read_text()
