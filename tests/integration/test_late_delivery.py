"""A receive whose wait ends while a delivery is already on its way (here: the event loop busy
as the broker sends it) hands that message back at once (it goes to the next receive), instead of
dropping it with its subscription, leased to nobody for the visibility timeout."""

import asyncio
import threading
import time

from enclave_queue.client import connect
from tests.helpers import make_queue


async def test_a_message_read_as_a_receives_wait_ends_is_handed_back_not_left_leased(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=60)

    def put_from_another_thread() -> None:
        async def put() -> None:
            async with connect(creds) as producer:
                await producer.put("late")
        asyncio.run(put())

    async with connect(creds) as worker:
        receiving = asyncio.ensure_future(worker.receive(batch=10, wait=0.3))
        await asyncio.sleep(0.1)  # its pull request is with the broker
        putter = threading.Thread(target=put_from_another_thread)
        putter.start()
        putter.join()
        time.sleep(1.0)  # the loop is blocked: the delivery is in the socket when the wait is over
        got = await receiving  # empty (the wait was over before the delivery was read), or it
        if not got:
            got = await worker.receive(batch=10, wait=5)  # within the 60 s lease a lost one would hold
        assert [m.body for m in got] == ["late"]
        await got[0].delete()
