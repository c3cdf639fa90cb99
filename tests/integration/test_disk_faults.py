"""Storage faults (issue 12), injected on real stacks whose data dir is a small tmpfs of its own:
a stack starts and serves on a 200 MiB filesystem, refuses to start (exit 9, one line) on one
without room, and a disk filled up under a running publisher refuses puts with StorageFull (not a
timeout), says so in /healthz, /metrics and the queue's status, takes puts again by itself once
the space is freed, and loses no acknowledged message.

Needs root (to mount); every stack is stopped by its PID and every mount unmounted in ``finally``.
Run with ``-s`` to see the measured figures (docs/operations.md, "Failures and what happens").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from enclave_queue.broker.config import control_reserve
from enclave_queue.broker.storage import START_ROOM, free_bytes
from enclave_queue.client import connect
from enclave_queue.errors import BrokerUnavailable, StorageFull
from enclave_queue.testing import EnclaveStack
from tests.helpers import eventually, make_queue, runtime_queue

pytestmark = pytest.mark.slow

MIB = 1 << 20
PUT_TIMEOUT = 3.0  #: seconds; above the SDK's resend (2 s), so a put whose PubAck the broker dropped is sent again
REFUSED_WITHIN = 5.0  #: seconds from the disk being full to puts refused with StorageFull
RECOVERED_WITHIN = 10.0  #: seconds from the space being freed to a put stored again
TRIALS = 3
BODY = "x" * 1000  #: about 1 KiB a message: the last page of a block holds a few, then the broker hits ENOSPC


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the test; unmounted at the end, whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        for _ in range(50):  # a process that just exited may hold it for a moment
            if subprocess.run(["umount", str(path)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(path)], check=False)
            pytest.fail(f"{path} was still in use after the test; unmounted lazily")


def stop(stack: EnclaveStack) -> None:
    """Stop the stack by its PID, and its broker by the PID it has now (a restart changes it)."""
    with contextlib.suppress(OSError, ValueError):
        stack.refresh()
    stack.stop()


def fill(path: Path, leave: int = 0) -> Path:
    """Write zeros to ``path`` until its filesystem has only ``leave`` bytes left (never fewer on
    the way: with ``leave`` the disk is never full); returns the file."""
    chunk = bytes(MIB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (MIB, 4096, 1):
            while free_bytes(path) - size >= leave:
                try:
                    os.write(fd, chunk[:size])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path


def health(stack: EnclaveStack) -> tuple[int, dict]:
    response = httpx.get(stack.api_url + "/healthz", timeout=5)
    return response.status_code, response.json()


def metric(stack: EnclaveStack, name: str) -> float:
    text = httpx.get(stack.api_url + "/metrics", headers={"Authorization": f"Bearer {stack.token}"}, timeout=10).text
    (line,) = [line for line in text.splitlines() if line.startswith(f"{name} ")]
    return float(line.split()[1])


class Publisher:
    """Puts numbered messages one after another and keeps what became of each."""

    def __init__(self, queue) -> None:
        self.queue = queue
        self.acked: set[int] = set()
        self.outcomes: list[tuple[float, str]] = []  #: (monotonic time, "ok" | class name of the error)
        self.stop = asyncio.Event()
        self.n = 0

    async def run(self) -> None:
        while not self.stop.is_set():
            self.n += 1
            try:
                await self.queue.put({"n": self.n, "pad": BODY}, timeout=PUT_TIMEOUT)
            except (StorageFull, BrokerUnavailable) as exc:
                self.outcomes.append((time.monotonic(), type(exc).__name__))
                await asyncio.sleep(0.05)
                continue
            self.acked.add(self.n)
            self.outcomes.append((time.monotonic(), "ok"))

    def first(self, outcome: str, after: float) -> float:
        """When the first put of ``outcome`` ended at or after ``after`` (waits for it up to 30 s)."""
        for at, what in self.outcomes:
            if at >= after and what == outcome:
                return at
        raise LookupError(outcome)

    async def wait_for(self, outcome: str, after: float, timeout: float) -> float:
        def found():
            with contextlib.suppress(LookupError):
                return self.first(outcome, after)
            return None
        return await eventually(found, timeout=timeout, interval=0.02)


async def drain(creds) -> set[int]:
    """Every message the queue holds, received and deleted."""
    seen: set[int] = set()
    async with connect(creds) as queue:
        while True:
            batch = await queue.receive(batch=100, wait=1)
            if not batch:
                return seen
            seen.update(m.body["n"] for m in batch)
            await queue.delete_many(batch)


async def test_a_stack_starts_on_a_200_mib_filesystem_and_serves_a_queue(tmp_path):
    with tmpfs(tmp_path / "disk", "200m") as disk:
        stack = EnclaveStack.start(disk / "home")
        try:
            creds = make_queue(stack, "orders")  # the default max_bytes: 64 MiB
            async with connect(creds) as queue:
                await queue.put({"n": 1})
                (message,) = await queue.receive(batch=1, wait=5)
                assert message.body == {"n": 1}
                await message.delete()
            # the store is 80 % of 200 MiB; the control state keeps 22 MiB of it, and no spare
            # account holds any of the rest (on a store under 256 MiB the pool keeps none)
            store = 160 * MIB
            left = store - control_reserve(store) - 64 * MIB
            with stack.admin() as admin:
                with pytest.raises(StorageFull, match=f"only {left} bytes"):
                    admin.create_queue("default", {"name": "rest", "max_bytes": left + 1})
                admin.create_queue("default", {"name": "rest", "max_bytes": left})
                admin.wait_ready("default", "rest", timeout=20)
            assert health(stack) == (200, {"status": "ok", "detail": "ready", "node": "enclave", "leader": True})
            assert metric(stack, "enclave_broker_storage_ok") == 1
        finally:
            stop(stack)


def test_enclave_up_on_a_filesystem_without_room_says_so_and_exits_9(tmp_path):
    with tmpfs(tmp_path / "disk", "24m") as disk:
        fill(disk / "other-data", leave=8 * MIB)
        home = disk / "home"
        env = {**os.environ, "ENCLAVE_HOME": str(home)}
        env.pop("ENCLAVE_URL", None)
        proc = subprocess.Popen([sys.executable, "-m", "enclave_cli.main", "up", "--api-port", "0", "--broker-port", "0"],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        text = err.decode()
        assert proc.returncode == 9, text
        assert "Traceback" not in text
        free = text.strip().splitlines()[-1].removeprefix("error: the data dir's filesystem has ").split(" MiB")[0]
        assert 7.5 <= float(free) <= 8.0, text
        assert text.strip().splitlines()[-1].startswith(
            f"error: the data dir's filesystem has {free} MiB free; Enclave needs at least {START_ROOM // MIB} MiB to start ")
        assert not [p for p in psutil.process_iter(["cmdline"]) if str(home) in " ".join(p.info["cmdline"] or [])]
        assert not (home / "broker").exists()  # nothing was started


@pytest.mark.parametrize("leave", [0, 3 * MIB], ids=["to-the-last-byte", "to-3-mib-left"])
async def test_a_full_disk_refuses_puts_with_storage_full_and_recovers_by_itself(tmp_path, leave):
    """To the last byte, the broker's own write fails first (it answers nothing and keeps the error
    until it is restarted); with 3 MiB left, under the headroom, the guard freezes it before."""
    with tmpfs(tmp_path / "disk", "200m") as disk:
        stack = EnclaveStack.start(disk / "home")
        try:
            creds = make_queue(stack, "orders", max_bytes=64 * MIB)
            figures = []
            async with connect(creds) as queue:
                publisher = Publisher(queue)
                task = asyncio.create_task(publisher.run())
                try:
                    for trial in range(1, TRIALS + 1):
                        figures.append(await one_fault(stack, disk, publisher, trial, leave))
                finally:
                    publisher.stop.set()
                    await task
            received = await drain(creds)
            lost = publisher.acked - received
            print(f"\ndisk filled {'to the last byte' if not leave else f'to {leave // MIB} MiB left'}, {TRIALS} trials: acked {len(publisher.acked)}, lost {len(lost)}; "
                  + "; ".join(f"trial {f['trial']}: degraded {f['degraded_after']:.2f} s and the publisher's "
                              f"StorageFull {f['refused_after']:.2f} s after the disk filled "
                              f"({f['timeouts']} unconfirmed first), put stored {f['recovered_after']:.2f} s after "
                              f"the space was freed ({f['restarts']} broker restart(s))" for f in figures))
            assert lost == set()
            assert all(f["refused_after"] < REFUSED_WITHIN and f["recovered_after"] < RECOVERED_WITHIN for f in figures)
            if leave:  # frozen before the broker's own write failed: no restart needed, and no put unanswered
                assert all(f["restarts"] == 0 and f["timeouts"] == 0 and f["refused_after"] < 1 for f in figures), figures
        finally:
            stop(stack)
            log = stack.log_path.read_text()
            if os.environ.get("SHOW_STACK_LOG"):
                print(log)
                with contextlib.suppress(OSError):
                    print((disk / "home" / "logs" / "nats-server.log").read_text()[-6000:])
        assert "Traceback" not in log and "never retrieved" not in log  # no task died, silently or not


async def one_fault(stack: EnclaveStack, disk: Path, publisher: Publisher, trial: int, leave: int) -> dict:
    """Fill the disk under the running publisher, check what every reader of the stack sees, free it."""
    await publisher.wait_for("ok", time.monotonic(), timeout=10)
    restarts = metric(stack, "enclave_broker_restarts_total")
    filler = await asyncio.to_thread(fill, disk / f"filler-{trial}", leave)
    full_at = time.monotonic()
    await eventually(lambda: health(stack)[1]["status"] == "degraded", timeout=REFUSED_WITHIN, interval=0.02)
    degraded = time.monotonic()
    refused = await publisher.wait_for("StorageFull", full_at, timeout=REFUSED_WITHIN + PUT_TIMEOUT)
    timeouts = sum(1 for at, what in publisher.outcomes if full_at <= at <= refused and what != "StorageFull"
                   and what != "ok")

    status, body = health(stack)
    assert status == 503 and body["status"] == "degraded" and "disk is full" in body["detail"], body
    assert metric(stack, "enclave_broker_storage_ok") == 0
    assert metric(stack, "enclave_store_free_bytes") < 8 * MIB
    assert metric(stack, "enclave_puts_refused_total") > 0
    with stack.admin() as admin:
        queue_status = await eventually(lambda: _errored(admin), timeout=10)
        assert {c["type"]: c["reason"] for c in queue_status["conditions"]}["Errored"] == "StorageFull"
        with pytest.raises(StorageFull, match="disk is full"):  # by hand too: HTTP 507
            admin.send("default", "orders", "by hand")
    assert await publisher.queue.len() >= 1  # reads go on

    filler.unlink()
    freed_at = time.monotonic()
    recovered = await publisher.wait_for("ok", freed_at, timeout=RECOVERED_WITHIN + PUT_TIMEOUT)
    await eventually(lambda: health(stack)[0] == 200, timeout=10)
    with stack.admin() as admin:
        await eventually(lambda: admin.queue_status("default", "orders")["state"] == "Ready", timeout=10)
    assert metric(stack, "enclave_broker_storage_ok") == 1
    return {"trial": trial, "refused_after": refused - full_at, "degraded_after": degraded - full_at,
            "recovered_after": recovered - freed_at,
            "timeouts": timeouts, "restarts": int(metric(stack, "enclave_broker_restarts_total") - restarts)}


def _errored(admin) -> dict | None:
    status = admin.queue_status("default", "orders")
    return status if status["state"] == "Errored" else None


async def test_a_store_overcommitted_past_a_small_disk_takes_puts_again_once_the_disk_is_emptied(tmp_path):
    """``ENCLAVE_MAX_FILE_STORE`` larger than the disk (overcommitted): the headroom follows the
    disk too, so emptying it frees twice the headroom and puts are taken again, with no restart by
    hand. (With the headroom of a 4 GiB store, 64 MiB, a 128 MiB disk never had 128 MiB free.)"""
    with tmpfs(tmp_path / "disk", "128m") as disk:
        stack = EnclaveStack.start(disk / "home", env={"ENCLAVE_MAX_FILE_STORE": "4G"})
        try:
            creds = make_queue(stack, "orders", max_bytes=16 * MIB)
            async with connect(creds) as queue:
                await queue.put("before")
                filler = await asyncio.to_thread(fill, disk / "filler", 3 * MIB)
                await eventually(lambda: health(stack)[1]["status"] == "degraded", timeout=REFUSED_WITHIN)
                with pytest.raises(StorageFull):
                    await queue.put("while full", timeout=PUT_TIMEOUT)
                filler.unlink()
                await eventually(lambda: health(stack)[0] == 200, timeout=RECOVERED_WITHIN)
                await queue.put("after", timeout=PUT_TIMEOUT)
            assert sorted(await _bodies(creds)) == ["after", "before"]
        finally:
            stop(stack)


async def _bodies(creds) -> list[str]:
    async with connect(creds) as queue:
        return [m.body for m in await queue.receive(batch=10, wait=1)]


async def test_a_guard_that_starts_thaws_accounts_another_guard_left_frozen(runtime):
    """On a cluster the lease can move in the middle of a freeze: the accounts stay frozen on the
    broker while the new holder's guard has never frozen anything. A guard that starts thaws
    them (every put was refused as "disk full" until a restart)."""
    creds = await runtime_queue(runtime, "thawed")
    runtime.storage.shared = True  # as on a cluster (alone, the start's own push thaws them)
    async with connect(creds) as queue:
        await queue.put("before")
        await runtime.storage.stop()
        await runtime.accounts.set_frozen(True)  # what the node that lost the lease left behind
        with pytest.raises((StorageFull, BrokerUnavailable)):  # the refusals are the guard's to answer
            await queue.put("frozen", timeout=2)
        await runtime.storage.start()
        await queue.put("after", timeout=10)
        assert await queue.len() == 2


async def test_messages_acked_while_their_store_could_not_write_are_gone_after_the_recovery(tmp_path):
    """The disk filled to the last byte under a publisher, so the queue's stream holds a write error;
    a worker acks part of the backlog meanwhile (the broker confirms). The acks moved the consumer
    past those messages, but their deletes were never written: after the restart that clears the
    error they stayed for good, never delivered, counted as delayed, beyond any clear."""
    with tmpfs(tmp_path / "disk", "200m") as disk:
        stack = EnclaveStack.start(disk / "home")
        try:
            creds = make_queue(stack, "orders", max_bytes=64 * MIB)
            async with connect(creds) as queue, connect(creds) as worker:
                backlog = [await queue.put({"n": -i, "pad": BODY}) for i in range(1, 101)]
                publisher = Publisher(queue)
                task = asyncio.create_task(publisher.run())
                try:
                    await publisher.wait_for("ok", time.monotonic(), timeout=10)
                    restarts = metric(stack, "enclave_broker_restarts_total")
                    filler = await asyncio.to_thread(fill, disk / "filler", 0)
                    await publisher.wait_for("StorageFull", time.monotonic(), timeout=REFUSED_WITHIN + PUT_TIMEOUT)
                    acked = []
                    while len(acked) < 40:  # the oldest first: the consumer's floor moves past them
                        batch = await worker.receive(batch=40 - len(acked), wait=3)
                        for message in batch:
                            await message.ack()
                            acked.append(message.body["n"])
                    filler.unlink()
                    await publisher.wait_for("ok", time.monotonic(), timeout=RECOVERED_WITHIN + PUT_TIMEOUT)
                finally:
                    publisher.stop.set()
                    await task
                assert metric(stack, "enclave_broker_restarts_total") > restarts  # the write error's restart
                await eventually(lambda: health(stack)[0] == 200, timeout=10)
            assert len(backlog) == 100 and sorted(acked) == list(range(-40, 0))
            with stack.admin() as admin:
                stats = await eventually(lambda: (lambda s: s if s["delayed"] == 0 else None)(
                    admin.stats("default", "orders")), timeout=10)
            assert stats["waiting"] == 60 + len(publisher.acked)
            assert await drain(creds) == set(range(-100, -40)) | publisher.acked
        finally:
            stop(stack)
