"""Background tasks that never die silently: ``keep_running`` logs a loop's exception with its
traceback and starts the loop again; ``log_failure`` logs a one-shot task's exception as soon as
it ends, instead of asyncio's "Task exception was never retrieved" at garbage collection;
``stop_tasks`` cancels tasks until they have ended, however often a cancel is lost.

Used by the control process's long-running loops (the broker watch and the storage guard here;
the reconciler's watch and resync, the depth sampler and the account pool in controller/).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

log = logging.getLogger("enclave.tasks")

RESTART_DELAYS = (1.0, 30.0)  #: seconds: the first and the longest wait before a failed loop starts again
#: seconds a cancelled task has to end before it is cancelled again: Python 3.11's wait_for (in
#: nats-py's requests, say) swallows a cancel that lands as what it waits for completes, and a
#: loop whose only way out is the cancel would then go on for ever, its stop waiting with it
RECANCEL_SECONDS = 0.25


async def stop_tasks(tasks: Iterable[asyncio.Task[object] | None]) -> None:
    """Cancel ``tasks`` (None: never started) and wait until every one has ended, cancelling
    again any that is still running after RECANCEL_SECONDS. Their exceptions are dropped: what
    a task raises as it is stopped is not news (a failure while running was logged then)."""
    given = [task for task in tasks if task is not None]
    pending = {task for task in given if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
    for task in given:
        if not task.cancelled():
            task.exception()  # retrieved: nothing for asyncio to log at garbage collection


def keep_running(loop: Callable[[], Awaitable[None]], name: str,
                 delays: tuple[float, float] = RESTART_DELAYS) -> asyncio.Task[None]:
    """Run ``loop()`` in a task named ``name``. If it raises (anything but cancellation), the
    exception is logged at error level with its traceback and ``loop()`` is started again after
    ``delays[0]`` seconds, the wait doubling up to ``delays[1]`` while it keeps failing at once
    (a run that lasted longer than the longest wait starts the count again). A loop that returns
    ends the task."""

    async def guarded() -> None:
        delay = delays[0]
        while True:
            started = asyncio.get_running_loop().time()
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                if asyncio.get_running_loop().time() - started > delays[1]:
                    delay = delays[0]
                log.exception("background task %s failed; starting it again in %.1f s", name, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, delays[1])

    return asyncio.create_task(guarded(), name=name)


def log_failure(task: asyncio.Task[object]) -> None:
    """A done callback: log the task's exception (if it raised one) with its traceback."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("background task %s failed", task.get_name(), exc_info=exc)
