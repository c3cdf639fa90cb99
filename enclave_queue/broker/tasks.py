"""Background tasks that never die silently: ``keep_running`` logs a loop's exception with its
traceback and starts the loop again; ``log_failure`` logs a one-shot task's exception as soon as
it ends, instead of asyncio's "Task exception was never retrieved" at garbage collection.

Used by the control process's long-running loops (the broker watch and the storage guard here;
the reconciler's watch and resync, the depth sampler and the account pool in controller/).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("enclave.tasks")

RESTART_DELAYS = (1.0, 30.0)  #: seconds: the first and the longest wait before a failed loop starts again


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
