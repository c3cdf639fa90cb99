"""The pure parts of storage-fault handling (issue 12): the control state's reservation scaled to
the store, the headroom, the broker's HEALTHZ read for write errors, the frozen configuration,
the refusal mapped to StorageFull, the disk reserve, and background tasks that never die silently."""

import asyncio
import logging
from pathlib import Path

import pytest

from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.broker.config import (
    CONTROL_STREAM_BYTES,
    FULL_CONTROL_BYTES,
    BrokerConfig,
    control_reserve,
    control_stream_bytes,
    render,
)
from enclave_queue.broker.storage import INSUFFICIENT_RESOURCES, Reserve, StoreHealth, headroom, write_errors
from enclave_queue.broker.supervisor import Supervisor
from enclave_queue.broker.tasks import keep_running, log_failure
from enclave_queue.errors import QueueFull, SpecError, StorageFull, publish_refused
from enclave_queue.settings import EnclaveSettings

MIB = 1 << 20
BASE = BrokerConfig(host="127.0.0.1", port=4999, store_dir=Path("/data/js"), log_file=Path("/data/log"),
                    sync="always")


@pytest.mark.parametrize(("store_mib", "streams_mib", "reserve_mib"), [
    (64, (4, 4, 4, 4), 20),
    (160, (4, 4, 4, 6), 22),
    (256, (4, 4, 4, 16), 32),
    (512, (4, 16, 16, 64), 116),
    (1024, (16, 64, 64, 256), 464),
    (10240, (16, 64, 64, 256), 464),
    (0, (16, 64, 64, 256), 464),  # the server's own default store: full sizes
])
def test_the_control_reservation_scales_with_the_store(store_mib, streams_mib, reserve_mib):
    sizes = control_stream_bytes(store_mib * MIB)
    assert tuple(sizes[name] // MIB for name in FULL_CONTROL_BYTES) == streams_mib
    assert control_reserve(store_mib * MIB) == reserve_mib * MIB


def test_the_control_reservation_never_shrinks_as_the_store_grows():
    sizes = [control_reserve(mib * MIB) for mib in range(64, 1100, 7)]
    assert sizes == sorted(sizes)


def test_control_stream_bytes_is_sized_once_for_the_process_store():
    try:
        CONTROL_STREAM_BYTES.size_for(160 * MIB)
        assert CONTROL_STREAM_BYTES["ENCLAVE_SAMPLES"] == 6 * MIB
        assert dict(CONTROL_STREAM_BYTES) == control_stream_bytes(160 * MIB)
    finally:
        CONTROL_STREAM_BYTES.size_for(0)
    assert dict(CONTROL_STREAM_BYTES) == FULL_CONTROL_BYTES


def test_a_store_down_to_64_mib_is_accepted():
    assert EnclaveSettings.from_env({"ENCLAVE_HOME": "/tmp/x", "ENCLAVE_MAX_FILE_STORE": "64M"}).max_file_store == 64 * MIB
    with pytest.raises(SpecError, match="at least 64MiB"):
        EnclaveSettings.from_env({"ENCLAVE_HOME": "/tmp/x", "ENCLAVE_MAX_FILE_STORE": "63M"})


@pytest.mark.parametrize(("store", "expected"), [(64 * MIB, 4 * MIB), (160 * MIB, 4 * MIB), (1 << 30, 16 * MIB),
                                                 (100 << 30, 64 * MIB)])
def test_the_headroom_is_a_64th_of_the_store_within_4_to_64_mib(store, expected):
    assert headroom(store) == expected


@pytest.mark.parametrize(("store", "disk", "expected"), [
    (4 << 30, 128 * MIB, 8 * MIB),  # a store overcommitted past a small disk: emptied, it is free enough to thaw
    (4 << 30, 32 * MIB, 4 * MIB), (100 << 30, 200 << 30, 64 * MIB), (1 << 30, 1 << 30, 16 * MIB),
])
def test_the_headroom_is_at_most_a_16th_of_the_disk(store, disk, expected):
    assert headroom(store, disk) == expected
    assert 2 * headroom(store, disk) <= disk // 4  # twice it (the thaw) is reached long before the disk is empty


#: nats-server 2.15.1's HEALTHZ (details) after a write failed on a full tmpfs (measured)
FULL_DISK_HEALTHZ = {"status": "error", "status_code": 503, "errors": [
    {"type": "STREAM", "account": "A", "stream": "KV_b",
     "error": "JetStream stream 'A > KV_b' write error: write /d/js/A/streams/KV_b/msgs/1.blk: no space left on device"},
    {"type": "STREAM", "account": "A", "stream": "S", "error": "JetStream stream 'A > S' could not be recovered"},
    {"type": "JETSTREAM", "error": "JetStream not enabled"},
]}


def test_healthz_write_errors_and_disabled_jetstream_are_store_faults_and_nothing_else_is():
    assert write_errors({"status": "ok", "status_code": 200}) == ()
    assert write_errors(FULL_DISK_HEALTHZ) == (FULL_DISK_HEALTHZ["errors"][0]["error"], "JetStream not enabled")
    # a cluster node in a minority: not its disk's fault (all puts were refused as "disk full")
    for text in ("JetStream is not current with the meta leader", "JetStream has not established contact with a "
                 "meta leader"):
        assert write_errors({"status": "unavailable", "errors": [{"type": "JETSTREAM", "error": text}]}) == ()


def test_store_health_says_why_puts_are_refused():
    fine = StoreHealth(100 * MIB, 4 * MIB, 8 * MIB)
    assert fine.ok and fine.problem is None
    short = StoreHealth(int(3.5 * MIB), 4 * MIB, 8 * MIB, short=True, frozen=True)
    assert not short.ok
    assert short.problem == ("the broker's disk is full: 3.5 MiB free; puts are refused (StorageFull) until 8 MiB "
                             "are free again (the last 4 MiB are kept for the control state)")
    broken = StoreHealth(100 * MIB, 4 * MIB, 8 * MIB, write_errors=("write error: no space left on device",), frozen=True)
    assert "failed to write (write error: no space left on device)" in broken.problem


@pytest.mark.parametrize("sync", ["always", "interval"])
async def test_nats_server_accepts_the_operator_mode_configuration(tmp_path, sync):
    """As the supervisor checks every configuration before it is used (frozen or not, a queue
    account is claims pushed later: the file is the same; broker/claims.py tests the claims)."""
    path = tmp_path / "nats.conf"
    keys = OperatorKeys(MasterKey.load_or_create(tmp_path))
    path.write_text(render(BrokerConfig(**{**BASE.__dict__, "store_dir": tmp_path / "js", "log_file": tmp_path / "log",
                                           "sync": sync, "max_file_store": 256 * MIB}), keys))
    await Supervisor(path, "127.0.0.1", 4999).validate(path)


@pytest.mark.parametrize("error", [
    INSUFFICIENT_RESOURCES,
    {"code": 500, "err_code": 10047, "description": "insufficient storage resources available"},
    {"code": 500, "err_code": 10077, "description": "write /d/1.blk: no space left on device"},
])
def test_the_brokers_out_of_room_answers_are_storage_full(error):
    refused = publish_refused(error, "'orders' in project 'shop'")
    assert isinstance(refused, StorageFull)
    assert (refused.status, refused.exit_code) == (507, 9)
    assert str(refused).startswith("The broker's disk is full; the message to queue 'orders' in project 'shop' was "
                                   "not stored.")


def test_a_queue_at_its_own_limits_is_still_queue_full():
    assert isinstance(publish_refused({"err_code": 10002, "description": "resource limits exceeded for account"},
                                      "'q'"), QueueFull)
    assert isinstance(publish_refused({"err_code": 10077, "description": "maximum messages exceeded"}, "'q'"), QueueFull)


def test_the_disk_reserve_is_written_and_released(tmp_path):
    reserve = Reserve(tmp_path / "reserve", size=2 * MIB)
    assert not reserve.present
    assert reserve.restore() and reserve.present
    assert (tmp_path / "reserve").stat().st_size == 2 * MIB
    reserve.release()
    assert not reserve.present
    assert Reserve(tmp_path / "missing-dir" / "reserve").restore() is False


async def test_a_failing_loop_is_logged_and_started_again(caplog):
    runs = []

    async def loop():
        runs.append(1)
        if len(runs) < 3:
            raise OSError(28, "No space left on device")

    with caplog.at_level(logging.ERROR, logger="enclave.tasks"):
        task = keep_running(loop, "flaky", delays=(0.01, 0.05))
        await asyncio.wait_for(task, 5)
    assert len(runs) == 3
    failures = [r for r in caplog.records if "background task flaky failed" in r.getMessage()]
    assert len(failures) == 2 and failures[0].exc_info[0] is OSError


async def test_a_one_shot_task_that_fails_is_logged_when_it_ends(caplog):
    async def boom():
        raise OSError(28, "No space left on device")

    with caplog.at_level(logging.ERROR, logger="enclave.tasks"):
        task = asyncio.create_task(boom(), name="account-pool")
        task.add_done_callback(log_failure)
        with pytest.raises(OSError):
            await task
        await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records] == ["background task account-pool failed"]
