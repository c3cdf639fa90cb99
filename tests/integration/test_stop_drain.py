"""A stop whose drain runs out of time (a subscription holds a message nobody reads, so nats-py's
drain waits on it until its drain timeout) ends cleanly: nothing is left for asyncio to report as
"Future exception was never retrieved" (the control plane's log took it as a Traceback)."""

import asyncio
import gc

from enclave_queue.client import connect
from tests.helpers import eventually, make_queue, queue_account_connection


async def unread_message(nc, subject: str, publisher=None) -> None:
    """A subscription of ``nc`` without a callback that holds a message nobody reads. A core
    message is sent at most once, so it is sent again until one is held (a fresh-clone run once
    saw the only one never arrive)."""
    sub = await nc.subscribe(subject)
    await nc.flush()
    sender = publisher or nc

    async def held() -> bool:
        if sub.pending_msgs == 0:
            await sender.publish(subject, b"never read")
            await sender.flush()
            await asyncio.sleep(0.2)
        return sub.pending_msgs > 0

    await eventually(held, timeout=10)


def loop_reports() -> list[dict]:
    """What asyncio's exception handler is given from now on (each call's context)."""
    reports: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: reports.append(context))
    return reports


async def test_the_control_planes_stop_leaves_no_unretrieved_exception(runtime):
    reports = loop_reports()
    control = runtime.conn.control
    await unread_message(control, "_enclave_test.unread")
    await runtime.stop()
    assert control.is_closed
    gc.collect()
    await asyncio.sleep(0)
    assert [r.get("message") for r in reports] == []


async def test_a_clients_close_leaves_no_unretrieved_exception(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", unique_name)["id"]
    reports = loop_reports()
    queue = await connect(creds)
    try:
        async with queue_account_connection(stack, queue_id) as publisher:
            await unread_message(queue._nc, f"{creds['inbox_prefix']}.unread", publisher)
    finally:
        await queue.close()
    assert queue._nc.is_closed
    gc.collect()
    await asyncio.sleep(0)
    assert [r.get("message") for r in reports] == []


def test_a_long_poll_under_way_when_the_stack_stops_is_answered(enclave_stack_factory):
    """SIGTERM while a receive waits 15 s: the HTTP server's grace for requests under way (5 s) used
    to run out, and the request was cancelled: a plain-text 500 and a traceback in the log. The
    long poll now ends at its next round (at most 2 s), answered with what it has."""
    import signal
    import threading

    import httpx

    stack = enclave_stack_factory()
    make_queue(stack, "longpoll")
    answered: dict[str, httpx.Response] = {}

    def receive() -> None:
        answered["answer"] = httpx.post(f"{stack.api_url}/v1/projects/default/queues/longpoll/messages/receive",
                                        json={"max": 1, "wait": 15}, timeout=30,
                                        headers={"Authorization": f"Bearer {stack.token}"})

    waiting = threading.Thread(target=receive)
    waiting.start()
    waiting.join(1)
    assert waiting.is_alive()  # waiting on the empty queue
    stack.proc.send_signal(signal.SIGTERM)
    waiting.join(30)
    answer = answered["answer"]
    assert (answer.status_code, answer.json()) == (200, {"messages": []}), answer.text
    assert stack.proc.wait(30) == 0
    assert "Traceback" not in stack.log_path.read_text()
