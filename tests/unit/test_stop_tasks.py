"""``stop_tasks``: a loop whose cancel was lost (Python 3.11's wait_for swallows one that lands
as what it waits for completes) is cancelled again until it ends, so a stop never hangs."""

import asyncio

from enclave_queue.broker.tasks import stop_tasks


async def test_a_loop_that_lost_its_cancel_is_cancelled_again():
    lost = []

    async def loop() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost.append("swallowed")  # as wait_for can: the loop goes on

    async def fails() -> None:
        raise ValueError("while stopping")

    looping, failing = asyncio.create_task(loop()), asyncio.create_task(fails())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_tasks([looping, None, failing]), 5)
    assert lost == ["swallowed"] and looping.cancelled()
    assert isinstance(failing.exception(), ValueError)  # ended; its exception dropped, not raised


async def test_tasks_done_already_or_none_stop_at_once():
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await stop_tasks([done, None])
    assert done.done() and not done.cancelled()
