"""A restart gives the broker no account claims its resolver directory holds already: with the
queues unchanged since the last run, not one is pushed, and the queues work on the claims the
broker kept. One whose claims changed while the stack was down (a password grace that ended) is
pushed, alone."""

import time

import httpx
import pytest

from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.client import connect
from enclave_queue.errors import Unauthorized
from tests.helpers import make_queue

pytestmark = pytest.mark.slow


def pushes(stack) -> float:
    text = httpx.get(f"{stack.api_url}/metrics", headers={"Authorization": f"Bearer {stack.token}"}, timeout=5).text
    [line] = [line for line in text.splitlines() if line.startswith("enclave_account_pushes_total ")]
    return float(line.split()[1])


async def test_a_restart_pushes_only_the_claims_that_changed(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    made = [make_queue(first, f"queue-{n}") for n in range(4)]
    assert pushes(first) >= 4  # each create gave the broker its account
    with first.admin() as admin:
        grace_ends = time.monotonic() + 1
        rotated = admin.rotate_password("default", "queue-0", grace_seconds=1)  # its grace ends while it is down
    assert first.stop() == 0
    # down until it has: a restart within the grace ends it while running (its own push, and the
    # resync's repair of the drift may push it too)
    time.sleep(max(0.0, grace_ends + 0.2 - time.monotonic()))

    second = enclave_stack_factory(home=home)
    assert pushes(second) == 1  # queue-0's claims lost the old password's signing key
    with second.admin() as admin:
        now = [admin.credentials("default", f"queue-{n}") for n in range(4)]  # on the broker's new port
    assert [c["password"] for c in now] == [rotated["password"], *(c["password"] for c in made[1:])]
    for creds in now:
        async with connect(creds) as queue:
            await queue.send("after the restart")
            [message] = await queue.receive(wait=5)
            await message.delete()
    with pytest.raises(Unauthorized):  # the old password's grace ended while the stack was down
        await connect({**now[0], "password": made[0]["password"]})
    assert second.stop() == 0

    third = enclave_stack_factory(home=home)
    assert pushes(third) == 0


async def test_a_start_with_account_claims_lost_from_the_resolver_serves_those_queues(enclave_stack_factory, tmp_path):
    """Claims files deleted while the stack was down: the broker asked for each lost account for
    2 s, one after another, while it restored its streams, and the start timed out for good. Now
    stand-in claims let it start, and each account's own are given once it is up."""
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    make_queue(first, "dlq")
    made = [make_queue(first, f"queue-{n}", max_receives=1, dead_letter_queue="dlq") for n in range(1, 10)]
    for creds in made:
        async with connect(creds) as queue:
            await queue.send({"kept": creds["subject"]})
    assert first.stop() == 0
    resolver, keys = home / "broker" / "accounts", OperatorKeys(MasterKey.load_or_create(home))
    for creds in made:
        (resolver / f"{keys.queue_account_public(creds['username'])}.jwt").unlink()

    second = enclave_stack_factory(home=home)
    assert "stand-in claims written" in second.log_path.read_text()
    with second.admin() as admin:
        now = [admin.credentials("default", f"queue-{n}") for n in range(10) if n]
    for creds in now:
        async with connect(creds) as queue:
            [message] = await queue.receive(wait=5)
            assert message.body == {"kept": creds["subject"]}
            assert await message.reject(error="dead") == "moved"  # its imports are back: the mover answers
