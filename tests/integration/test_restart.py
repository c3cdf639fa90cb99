"""Restarts: a stopped and restarted stack keeps queues, credentials and messages; a broker
killed while a producer publishes is restarted and loses no acknowledged message, and what it
acknowledged is on the disk, not only in the page cache (which a process kill leaves alone, but an
OS crash or a power cut does not); a control process killed mid-reconcile converges when started
again, with nothing orphaned."""

import asyncio
import json
import os
import shutil
import signal

import nats
import nats.errors
import nats.js.errors
import pytest

from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.client import connect
from enclave_queue.client.connecting import drop_failed_attempt
from enclave_queue.testing import EnclaveStack
from tests.conftest import files_under
from tests.helpers import account_store, dirty_pages, eventually, make_queue, system_connection

pytestmark = pytest.mark.slow


async def test_stop_and_start_keeps_queues_credentials_and_waiting_messages(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    creds = make_queue(first, "orders", visibility_timeout_seconds=5)
    async with connect(creds) as queue:
        assert await queue.send_batch([{"n": i} for i in range(20)]) == 20
    assert first.stop() == 0
    assert not (home / "enclave.json").exists()

    second = enclave_stack_factory(home=home)
    with second.admin() as admin:
        assert [q["name"] for q in admin.list_queues("default")] == ["orders"]
        again = admin.credentials("default", "orders")
    assert {k: v for k, v in again.items() if k not in ("broker_url", "broker_urls")} == \
        {k: v for k, v in creds.items() if k not in ("broker_url", "broker_urls")}  # the port may change
    async with connect(again) as queue:
        messages = await queue.receive(batch=50, wait=2)
        assert sorted(m.body["n"] for m in messages) == list(range(20))
        await queue.delete_many(messages)


async def broker_sync(stack) -> tuple[object, object]:
    """The durability mode as rendered into the broker's configuration file, and as the running
    broker reports it (JSZ: ``sync_always``)."""
    rendered = json.loads((stack.home / "broker" / "nats.conf").read_text())["jetstream"].get("sync_interval")
    async with system_connection(stack) as nc:
        reply = json.loads((await nc.request("$SYS.REQ.SERVER.PING.JSZ", b"{}", timeout=2)).data)
    return rendered, reply["data"]["config"].get("sync_always", False)


@pytest.mark.parametrize("sync", ["", "interval"], ids=["default", "interval"])
async def test_acknowledged_messages_are_on_the_disk_not_only_in_the_page_cache(enclave_stack_factory, sync):
    """The default (ENCLAVE_SYNC unset) fsyncs before it acknowledges: once a put is confirmed, no
    page of the queue's store is left for the kernel to write, so an OS crash loses nothing
    acknowledged. ``interval`` (the broker's own default) acknowledges first: its pages wait in
    the page cache, which shows the check sees unsynced data when there is some."""
    stack = enclave_stack_factory(env={"ENCLAVE_SYNC": sync})  # empty: as if unset
    assert await broker_sync(stack) == (("always", True) if not sync else (None, False))
    creds = make_queue(stack, "durable")
    with stack.admin() as admin:
        queue_id = admin.get_queue("default", "durable")["id"]
    async with connect(creds) as queue:
        for n in range(100):
            await queue.put(str(n))
    store = account_store(stack, queue_id) / "streams"
    blocks = [path for path in files_under(store) if path.suffix == ".blk"]  # the messages themselves
    assert blocks, list(files_under(store))
    dirty = {str(path.relative_to(store)): dirty_pages(path) for path in blocks}
    if sync:
        assert sum(dirty.values()) > 0, dirty
        return
    assert sum(dirty.values()) == 0, dirty

    old_pid = stack.broker_pid
    os.kill(old_pid, signal.SIGKILL)  # then the broker dies: all it acknowledged is read back
    await eventually(lambda: stack.refresh().get("broker_pid") not in (None, old_pid), timeout=15)
    async with connect(creds) as queue:
        bodies = []
        while batch := await queue.receive(batch=100, wait=1):
            bodies += [m.body for m in batch]
            await queue.delete_many(batch)
    assert sorted(bodies, key=int) == [str(n) for n in range(100)]


async def test_a_killed_broker_is_restarted_and_no_acknowledged_message_is_lost(enclave_stack_factory):
    stack = enclave_stack_factory(env={"ENCLAVE_SYNC": ""})  # the default durability mode
    assert await broker_sync(stack) == ("always", True)
    creds = make_queue(stack, "payments")
    acked: set[int] = set()
    async def on_error(exc: Exception) -> None:  # refused (or slow) until the control plane's callout is back
        drop_failed_attempt(nc)

    nc = await nats.connect(creds["broker_url"], user=creds["username"], password=creds["password"],
                            inbox_prefix=creds["inbox_prefix"], max_reconnect_attempts=-1, reconnect_time_wait=0.1,
                            error_cb=on_error)
    js = nc.jetstream(timeout=1)
    stop = asyncio.Event()

    async def produce():
        n = 0
        while not stop.is_set():
            try:
                await js.publish(creds["subject"], str(n).encode(), headers={"Nats-Msg-Id": str(n)})
            except (TimeoutError, nats.errors.Error):
                await asyncio.sleep(0.05)  # broker down: retry the same message (deduplicated by id)
                continue
            acked.add(n)
            n += 1

    producer = asyncio.create_task(produce())
    try:
        await eventually(lambda: len(acked) > 200, timeout=10)
        old_pid = stack.broker_pid
        os.kill(old_pid, signal.SIGKILL)
        await eventually(lambda: stack.refresh().get("broker_pid") not in (None, old_pid), timeout=15)
        mark = len(acked)
        await eventually(lambda: len(acked) > mark + 200, timeout=20)
    finally:
        stop.set()
        await producer
        await nc.close()

    async with connect(creds) as queue:
        seen = set()
        while True:
            batch = await queue.receive(batch=1000, wait=1)
            if not batch:
                break
            seen.update(int(m.data) for m in batch)
            await queue.delete_many(batch)
    assert acked <= seen, f"lost {len(acked - seen)} acknowledged messages"
    assert len(acked) > 400


async def test_a_redrive_rides_out_a_broker_restart(enclave_stack_factory):
    """The broker killed under a running redrive (the supervisor restarts it): the read asked just
    before is never answered, and the redrive asks again instead of failing with half its letters left."""
    stack = enclave_stack_factory()
    make_queue(stack, "dead")
    creds = make_queue(stack, "source", max_receives=1, visibility_timeout_seconds=60, dead_letter_queue="dead")
    async with connect(creds) as queue:
        await queue.send_batch([f"m{i}" for i in range(300)])
        taken = 0
        while taken < 300:
            batch = await queue.receive(batch=100, wait=2)
            await asyncio.gather(*(m.nack() for m in batch))
            taken += len(batch)
    with stack.admin() as admin:
        await eventually(lambda: admin.stats("default", "dead")["waiting"] == 300, timeout=30)
        task = admin.start_redrive("default", "dead", rate=100)
        await asyncio.sleep(1)
        old_pid = stack.refresh()["broker_pid"]
        os.kill(old_pid, signal.SIGKILL)
        ended = await eventually(lambda: (t := admin.redrive_status("default", "dead", task["id"]))["state"] != "running"
                                 and t, timeout=60)
        assert (ended["state"], ended["moved"], ended["failed"]) == ("done", 300, 0), ended
        assert (admin.stats("default", "source")["waiting"], admin.stats("default", "dead")["waiting"]) == (300, 0)


async def test_a_control_process_killed_mid_reconcile_converges_with_nothing_orphaned(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    with first.admin() as admin:
        admin.create_queue("default", {"name": "stays"})
        admin.wait_ready("default", "stays")
        admin.create_queue("default", {"name": "goes"})
        admin.wait_ready("default", "goes")
        for i in range(6):
            admin.create_queue("default", {"name": f"burst-{i}"})
        admin.delete_queue("default", "goes")
    first.kill()  # SIGKILL while the creates and the delete are in flight

    second = enclave_stack_factory(home=home)
    with second.admin() as admin:
        admin.wait_deleted("default", "goes", timeout=20)
        for name in ["stays"] + [f"burst-{i}" for i in range(6)]:
            admin.wait_ready("default", name, timeout=20)
        ids = {q["id"] for q in admin.list_queues("default")}
    assert len(ids) == 7
    keys = OperatorKeys(MasterKey.load_or_create(home))
    queue_keys = {keys.public(keys.queue_account(queue_id)) for queue_id in ids}
    platform = {keys.public(keys.platform_account(role)) for role in ("system", "control", "auth")}
    on_broker = {p.name.removesuffix(".jwt") for p in (home / "broker" / "accounts").glob("*.jwt")} - platform
    assert on_broker == queue_keys  # the deleted queue's account went, no spare or orphan stayed
    store_accounts = {p.name for p in (home / "broker" / "jetstream").iterdir()} - platform
    assert store_accounts <= queue_keys


async def test_no_plaintext_password_under_the_data_dir_or_in_the_logs(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    stack = enclave_stack_factory(home=home, env={"ENCLAVE_LOG_LEVEL": "debug"})
    passwords = []
    for name in ("alpha", "beta", "gamma"):
        creds = make_queue(stack, name)
        passwords.append(creds["password"])
        async with connect(creds) as queue:
            await queue.send("x")
    with stack.admin() as admin:
        admin.read_secret("default", "alpha-password")
        admin.delete_queue("default", "gamma")
        admin.wait_deleted("default", "gamma")
    stack.stop()
    checked = 0
    for path in files_under(home):
        data = path.read_bytes()
        checked += 1
        for password in passwords:
            assert password.encode() not in data, f"a password in plaintext in {path}"
    assert checked > 10
    assert (home / "admin-token").stat().st_mode & 0o777 == 0o600
    assert (home / "master.key").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("bucket", ["KV_enclave-queues", "KV_enclave-accounts"])
async def test_a_lost_state_bucket_deletes_no_queue_s_messages(enclave_stack_factory, tmp_path, bucket):
    """The queue records or the account records gone (a damaged or partly restored disk): the
    accounts and store directories that no record names hold messages, so they are kept for an
    operator to recover, where they were removed as an interrupted create's leftovers."""
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    creds = make_queue(first, "orders")
    async with connect(creds) as queue:
        assert await queue.send_batch([{"n": i} for i in range(5)]) == 5
    assert first.stop() == 0
    keys = OperatorKeys(MasterKey.load_or_create(home))
    account_dir = home / "broker" / "jetstream" / keys.public(keys.queue_account(creds["stream"].lower()))
    blocks = sorted(p.name for p in account_dir.rglob("*.blk"))
    assert blocks
    [lost] = (home / "broker" / "jetstream").glob(f"*/streams/{bucket}")
    shutil.rmtree(lost)

    second = enclave_stack_factory(home=home)
    assert sorted(p.name for p in account_dir.rglob("*.blk")) == blocks
    log = second.log_path.read_text()
    assert "kept" in log, log[-3000:]
    assert second.stop() == 0
    assert sorted(p.name for p in account_dir.rglob("*.blk")) == blocks


async def test_a_data_dir_whose_path_is_not_ascii_starts_and_serves(enclave_stack_factory, tmp_path):
    """/home/zoë/.enclave: the broker's configuration used to carry the path as \\u escapes,
    which nats-server's parser refuses."""
    stack = enclave_stack_factory(home=tmp_path / "zoë" / "données" / ".enclave")
    creds = make_queue(stack, "orders")
    async with connect(creds) as queue:
        await queue.put("é")
        assert (await queue.get(timeout_s=5)).body == "é"


def test_a_store_made_smaller_than_what_it_reserves_is_refused_in_one_line(enclave_stack_factory, tmp_path):
    """A restart with a smaller ENCLAVE_MAX_FILE_STORE (or a data dir restored onto a smaller
    disk): the control plane's streams no longer fit. A one-line StorageFull and exit 9, where it
    was a traceback's last line, or a start that hung and ignored SIGTERM."""
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home, env={"ENCLAVE_MAX_FILE_STORE": "4G"})
    with first.admin() as admin:
        for i in range(4):
            admin.create_queue("default", {"name": f"big-{i}", "max_bytes": 512 << 20})
            admin.wait_ready("default", f"big-{i}", timeout=20)
    assert first.stop() == 0
    second = EnclaveStack.launch(home, {"ENCLAVE_MAX_FILE_STORE": "128M"})
    try:
        assert second.proc.wait(timeout=60) == 9
    finally:
        if second.proc.poll() is None:
            second.kill()
    last = second.log_path.read_text().strip().splitlines()[-1]
    assert last.startswith("error: The broker's store has no room left for the control plane's "), last
    assert "ENCLAVE_MAX_FILE_STORE" in last and "unexpected" not in last
