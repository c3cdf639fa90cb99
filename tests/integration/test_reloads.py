"""Configuration reloads (every queue create or delete causes one) do not disturb apps:
nothing an app sends, receives or deletes meanwhile is lost or done twice.

(During a reload nats-server answers JetStream *API* requests — stream or consumer info,
creates — with "no responders" for a moment, in every account; publishes, pulls and acks were
not affected in our measurements. The control plane and the SDK retry either kind.)
"""

import threading

from enclave_queue.client import connect
from tests.helpers import make_queue


async def test_send_receive_delete_through_many_reloads_lose_and_repeat_nothing(enclave_stack_factory):
    stack = enclave_stack_factory(env={"ENCLAVE_ACCOUNT_POOL": "0"})  # every create reloads
    creds = make_queue(stack, "steady", visibility_timeout_seconds=2)
    creating = threading.Thread(target=lambda: [make_queue(stack, f"churn-{i}") for i in range(12)])
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
        assert len(admin.list_queues("default")) == 13
