"""Shared fixtures: one running stack for the tests that only need *a* stack, and strict checks
that every test stops the processes and asyncio tasks it started."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import pytest_asyncio

from enclave_queue.errors import EnclaveError
from enclave_queue.testing import EnclaveStack

_names = itertools.count(1)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnclaveStack]:
    """One ``enclave up`` shared by the tests that create their own uniquely named queues."""
    running = EnclaveStack.start(tmp_path_factory.mktemp("shared-stack"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A queue name no other test in the run uses. On the shared stack, the queues the test made
    with it (``<name>``, ``<name>-dlq``, …) are deleted afterwards: every live queue costs the
    stack a reconcile, a sweep and a sample each second, and a run makes a few hundred."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:24].strip("-")
    name = f"t{next(_names)}-{base}"[:40].rstrip("-")
    yield name
    if "stack" in request.fixturenames:
        _delete_queues_named(request.getfixturevalue("stack"), name)


def _delete_queues_named(stack: EnclaveStack, prefix: str) -> None:
    """Ask the shared stack to delete the queues whose names start with ``prefix`` (in any project
    a test uses); a dead-letter queue goes once the queue using it has gone."""
    with stack.admin() as admin:
        left = [(project, queue["name"]) for project in ("default", "iso-other")
                for queue in admin.list_queues(project) if queue["name"].startswith(prefix)]
        for _ in range(3):
            refused = []
            for project, queue_name in left:
                try:
                    admin.delete_queue(project, queue_name)
                except EnclaveError:  # still another queue's dead-letter queue, or gone already
                    refused.append((project, queue_name))
            if not refused:
                return
            left = refused
            time.sleep(0.5)


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a child process (a broker, a stack) running. Only direct children
    count: a running stack's own children (its broker, config checks) come and go."""
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    yield
    leaked = []
    for child in me.children():
        if child.pid not in before:
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    leaked.append(f"{child.pid} {' '.join(child.cmdline()[:4])}")
            except psutil.NoSuchProcess:
                continue
    if leaked:
        for child in me.children():
            if child.pid not in before:
                child.kill()
        pytest.fail(f"the test left processes running: {leaked}")


@pytest_asyncio.fixture(autouse=True)
async def no_leaked_tasks() -> None:
    """Fail an async test that leaves asyncio tasks running (an unclosed client, say)."""
    yield
    await asyncio.sleep(0)
    ending = {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}
    if ending:  # one cancelled, or ending on its own (a stop spawned as the test's stops ran), has a moment
        await asyncio.wait(ending, timeout=1.0)
    leaked = [t for t in ending if not t.done()]
    if leaked:
        for task in leaked:
            task.cancel()
        await asyncio.gather(*leaked, return_exceptions=True)
        pytest.fail(f"the test left asyncio tasks running: {[f'{t.get_name()} {t.get_coro()!r}' for t in leaked]}")


def files_under(root: Path) -> Iterator[Path]:
    return (p for p in root.rglob("*") if p.is_file())
