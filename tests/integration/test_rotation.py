"""Password rotation without downtime: both passwords log in for the grace period, then the old
one is refused and the connections made with it are closed; bad graces are refused by name."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import subprocess
import sys

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import SpecError, Unauthorized
from tests.helpers import RawClient, make_queue


async def connected(creds) -> tuple[RawClient, asyncio.Event]:
    """An app connection with ``creds`` that does not reconnect, and an event set when it ends."""
    raw = RawClient()
    nc = await raw.connect(creds, allow_reconnect=False)
    ended = asyncio.Event()
    nc._closed_cb = lambda: ended.set() or asyncio.sleep(0)
    nc._disconnected_cb = lambda: ended.set() or asyncio.sleep(0)
    return raw, ended


async def assert_refused_and_new_works(old, new) -> None:
    with pytest.raises(Unauthorized):
        await connect(old)
    async with connect(new) as queue:
        await queue.put("after")


async def still_works(raw: RawClient, creds) -> bool:
    """Whether a live connection still talks to the broker as its queue's user (a put, confirmed)."""
    assert raw.nc is not None
    ack = await raw.nc.jetstream(timeout=2).publish(creds["subject"], b"still here")
    return ack.stream == creds["stream"]


async def test_both_passwords_log_in_during_the_grace_then_the_old_ones_connections_end(stack, unique_name):
    old = make_queue(stack, unique_name)
    raw, ended = await connected(old)
    with stack.admin() as admin:
        new = admin.rotate_password("default", unique_name, grace_seconds=3)
        again = admin.credentials("default", unique_name)  # what they say from now on (within the grace)
    assert again["password"] == new["password"] != old["password"]
    assert new["password_version"] == again["password_version"] == 2
    assert new["previous_password_valid_until"] and again["previous_password_valid_until"] in (
        new["previous_password_valid_until"], None)  # None: the 3 s were over by the time it was read
    raw_new, ended_new = await connected(new)
    async with connect(old) as by_old, connect(new) as by_new:  # both log in during the grace
        await by_old.put("from the old password")
        await by_new.put("from the new password")
        assert await by_new.len() == 2
    assert await still_works(raw, old)  # the old password's live connection too, for now
    await asyncio.wait_for(ended.wait(), 10)  # the grace ends: the old password's connection is cut
    assert not ended_new.is_set() and await still_works(raw_new, new)  # the new one's is not
    await raw.close()
    await raw_new.close()
    await assert_refused_and_new_works(old, new)


async def test_a_password_change_without_grace_cuts_the_old_passwords_live_connections(stack, unique_name):
    old = make_queue(stack, unique_name)
    raw, ended = await connected(old)
    other, other_ended = await connected(old)  # every connection of the old password, not just one
    assert await still_works(raw, old) and await still_works(other, old)
    with stack.admin() as admin:
        new = admin.rotate_password("default", unique_name, grace_seconds=0)
    assert new["previous_password_valid_until"] is None
    await asyncio.wait_for(asyncio.gather(ended.wait(), other_ended.wait()), 10)  # cut by the broker
    assert not raw.nc.is_connected and not other.nc.is_connected
    await raw.close()
    await other.close()
    await assert_refused_and_new_works(old, new)


async def test_a_rotation_during_another_s_grace_keeps_that_one_s_promise(stack, unique_name):
    """Two rotations in a row (a plan applied twice): the first password still logs in, and its live
    connection stays, until the grace the first rotation promised; an emergency rotation (grace 0)
    then ends every earlier password at once."""
    first = make_queue(stack, unique_name)
    raw, ended = await connected(first)
    with stack.admin() as admin:
        second = admin.rotate_password("default", unique_name, grace_seconds=600)
        third = admin.rotate_password("default", unique_name, grace_seconds=600)
    assert third["password_version"] == 3
    async with connect(first) as by_first, connect(second) as by_second, connect(third) as by_third:
        for queue in (by_first, by_second, by_third):
            await queue.put("logged in")
    assert not ended.is_set() and await still_works(raw, first)
    with stack.admin() as admin:
        fourth = admin.rotate_password("default", unique_name, grace_seconds=0)
    await asyncio.wait_for(ended.wait(), 10)
    await raw.close()
    for old in (first, second, third):
        await assert_refused_and_new_works(old, fourth)


@pytest.mark.parametrize("grace", [-1, 604801, 1.5, "60", True, None])
def test_a_grace_out_of_range_or_of_the_wrong_type_is_a_422_naming_it(stack, unique_name, grace):
    creds = make_queue(stack, unique_name)
    with stack.admin() as admin:
        with pytest.raises(SpecError) as refused:
            admin.request("POST", f"/v1/projects/default/queues/{unique_name}/rotate-password",
                          json={"grace_seconds": grace})
        assert refused.value.errors[0]["field"] == "grace_seconds"
        with pytest.raises(SpecError, match="only grace_seconds"):
            admin.request("POST", f"/v1/projects/default/queues/{unique_name}/rotate-password", json={"grace": 5})
        assert admin.credentials("default", unique_name)["password"] == creds["password"]  # nothing rotated


def test_the_cli_rotates_and_prints_the_new_credentials(stack, unique_name):
    creds = make_queue(stack, unique_name)
    done = subprocess.run([sys.executable, "-m", "enclave_cli.main", "queue", "rotate-password", unique_name,
                           "--grace", "60", "--json"], env=stack.env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["password"] != creds["password"] and printed["password_version"] == 2
    bad = subprocess.run([sys.executable, "-m", "enclave_cli.main", "queue", "rotate-password", unique_name,
                          "--grace", "-5"], env=stack.env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--grace" in bad.stderr


async def test_rotations_and_limit_changes_at_once_all_go_through(stack, unique_name):
    """A rotation hashes its new password between reading the account's record and writing it: a
    rotation or a new max_bytes written meanwhile made it a 409 naming the account's id."""
    make_queue(stack, unique_name)

    def rotate() -> dict:
        with stack.admin() as admin:
            return admin.rotate_password("default", unique_name, grace_seconds=600)

    def limit(n: int) -> dict:
        with stack.admin() as admin:
            return admin.update_queue("default", unique_name, {"max_bytes": (20 + n) * 1024 * 1024})

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        rotations = [pool.submit(rotate) for _ in range(4)]
        limits = [pool.submit(limit, n) for n in range(4)]
        answers = [f.result() for f in rotations]  # none raised
        [f.result() for f in limits]
    assert sorted(a["password_version"] for a in answers) == [2, 3, 4, 5]
    with stack.admin() as admin:
        now = admin.credentials("default", unique_name)
        admin.wait_ready("default", unique_name, timeout=30)
    assert now["password_version"] == 5
    async with connect(now) as queue:
        await queue.put("after")
        assert await queue.len() == 1
