"""Upgrade in place: a data dir written by the configuration-file version of the stack (every
queue an account in nats.conf) starts under operator mode with its queues, messages, dead letters,
passwords and counters. That version's own code writes the data dir afresh for each run
(tests/fixtures/make_config_mode_home.py), so no message in it is ever past its retention."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from enclave_queue.client import connect

FIXTURES = Path(__file__).parents[1] / "fixtures"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def config_mode_home(tmp_path_factory) -> Path:
    """The data dir as the configuration-file version leaves it, made once for this module."""
    root = tmp_path_factory.mktemp("config-mode")
    with tarfile.open(FIXTURES / "config-mode-stack.tar.gz") as archive:
        archive.extractall(root / "code", filter="data")
    # by path, from a directory of its own, so this checkout's enclave_queue shadows nothing
    subprocess.run([sys.executable, str(FIXTURES / "make_config_mode_home.py"), str(root / "home")],
                   cwd=root, env={**os.environ, "PYTHONPATH": str(root / "code")}, check=True, timeout=120)
    conf = json.loads((root / "home" / "broker" / "nats.conf").read_text())
    assert "operator" not in conf and len(conf["accounts"]) > 3  # the old mode wrote it: each queue an account
    return root / "home"


@pytest.fixture
def old_home(config_mode_home: Path, tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(config_mode_home, home, symlinks=True)
    home.chmod(0o700)
    return home


async def test_a_config_mode_data_dir_upgrades_in_place(old_home, enclave_stack_factory):
    expected = json.loads((old_home / "expected.json").read_text())
    stack = enclave_stack_factory(home=old_home)
    with stack.admin() as admin:
        names = {q["name"] for q in admin.list_queues("default")}
        assert names == {"emails", "orders", "orders-dlq"}
        for name in names:
            assert admin.wait_ready("default", name, timeout=20)["name"] == name
            creds = admin.credentials("default", name)
            assert creds["password"] == expected["passwords"][name]  # the same password, still
            assert creds["username"] == expected["usernames"][name]
        letters = admin.list_dead_letters("default", "orders-dlq")["dead_letters"]
    assert sorted(letter["body"] for letter in letters) == expected["dead_letters"]
    assert all(letter["source_queue"] == "orders" for letter in letters)  # provenance still vouched for

    # apps log in with the passwords they had (through the auth callout now)
    creds = {name: {**admin_creds, "password": expected["passwords"][name]}
             for name, admin_creds in _credentials(stack, ("emails", "orders")).items()}
    async with await connect(creds["emails"]) as emails:
        assert await emails.len() == 2
        assert await emails.metrics() == expected["metrics"]["emails"]
        got = await emails.receive(2, wait=2)
        assert [m.body for m in got] == expected["emails_waiting"]
        for message in got:
            await message.delete()
        assert await emails.put({"to": "a@example.com"}, dedupe_key="welcome-a") > expected["emails_last_id"]
    async with await connect(creds["orders"]) as orders:
        assert await orders.metrics() == expected["metrics"]["orders"]
    with stack.admin() as admin:  # a retry sends a letter back to its source, as before the upgrade
        retried = admin.retry_dead_letter("default", "orders-dlq", letters[0]["sequence"])
        assert retried["queue"] == "orders"
    async with await connect(creds["orders"]) as orders:
        [message] = await orders.receive(1, wait=3)
        assert message.body == letters[0]["body"]
        await message.delete()

    # and the upgraded data dir starts again as it is
    stack.stop()
    again = enclave_stack_factory(home=old_home)
    with again.admin() as admin:
        assert admin.wait_ready("default", "emails", timeout=20)
        assert len(admin.list_dead_letters("default", "orders-dlq")["dead_letters"]) == 1


def _credentials(stack, names):
    with stack.admin() as admin:
        return {name: admin.credentials("default", name) for name in names}


def test_a_wrong_master_key_is_refused_before_the_store_is_touched(old_home, enclave_stack_factory):
    import base64

    before = sorted(p.name for p in (old_home / "broker" / "jetstream").iterdir())
    other_key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    with pytest.raises(RuntimeError, match="The master key does not open this data directory's secrets"):
        enclave_stack_factory(home=old_home, env={"ENCLAVE_MASTER_KEY": other_key})
    assert sorted(p.name for p in (old_home / "broker" / "jetstream").iterdir()) == before  # nothing renamed
    stack = enclave_stack_factory(home=old_home)  # its own key still opens it
    with stack.admin() as admin:
        assert {q["name"] for q in admin.list_queues("default")} == {"emails", "orders", "orders-dlq"}
