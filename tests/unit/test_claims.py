"""Operator mode's claims: each queue account's JWT is the same size whatever the number of queues,
imports only its own id's subjects, and the platform accounts are what the broker needs."""

import json
import os

import pytest

from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.auth.users import app_permissions
from enclave_queue.broker.claims import (
    app_user,
    auth_account,
    control_account,
    queue_account,
    sentinel_user,
)
from enclave_queue.broker.config import BrokerConfig, build, render
from enclave_queue.broker.upgrade import upgrade_store

ACCOUNT, CONTROL = "A" + "Q" * 55, "A" + "C" * 55


def test_a_queue_account_imports_its_own_subjects_and_maps_its_advisories():
    claims = queue_account("qabc", ACCOUNT, CONTROL, max_bytes=1 << 20, signing_keys=("AS1",))
    nats = claims["nats"]
    assert claims["sub"] == ACCOUNT and nats["type"] == "account" and nats["signing_keys"] == ["AS1"]
    imports = {(i["subject"], i["local_subject"]) for i in nats["imports"]}
    assert imports == {
        ("errors.qabc.*", "enclave.errors.*"), ("deadletter.qabc", "enclave.reject"),
        ("desk.qabc.*", "enclave.desk.*"), ("notes.qabc", "enclave.notes"),
        ("refused.qabc.>", "refused.>"), ("adv.qabc.>", "$JS.EVENT.ADVISORY.CONSUMER.>"),
    }
    assert all(i["account"] == CONTROL and i["type"] == "service" for i in nats["imports"])
    assert nats["limits"]["disk_storage"] == 1 << 20 and nats["limits"]["mem_storage"] == 0
    assert (nats["limits"]["streams"], nats["limits"]["consumer"]) == (1, 10)
    assert "exports" not in nats and "mappings" not in nats


def test_a_frozen_queue_account_maps_its_puts_to_the_refusal():
    nats = queue_account("qabc", ACCOUNT, CONTROL, max_bytes=1 << 20, frozen=True)["nats"]
    assert nats["mappings"] == {"queue.>": [{"subject": "refused.>", "weight": 100}]}


def covers(export: str, subject: str) -> bool:
    """Whether the export's subject pattern covers every subject of ``subject``'s pattern."""
    tokens, wanted = export.split("."), subject.split(".")
    for n, token in enumerate(tokens):
        if token == ">":
            return len(wanted) > n
        if n >= len(wanted) or (token != "*" and token != wanted[n]) or (token == "*" and wanted[n] == ">"):
            return False
    return len(tokens) == len(wanted)


def test_every_queue_imports_from_exports_the_control_account_has():
    exports = {e["subject"] for e in control_account(CONTROL)["nats"]["exports"]}
    assert exports == {"errors.*.*", "deadletter.*", "desk.*.*", "notes.*", "refused.*.>", "adv.*.>"}
    assert not covers("desk.*.*", "desk.qabc.>") and covers("adv.*.>", "adv.qabc.>")
    for imp in queue_account("qabc", ACCOUNT, CONTROL, max_bytes=1)["nats"]["imports"]:
        assert any(covers(export, imp["subject"]) for export in exports), imp


@pytest.mark.parametrize("queues", [1, 1000])
def test_the_size_of_one_queues_claims_does_not_grow_with_the_number_of_queues(queues):
    size = len(json.dumps(queue_account(f"q{queues:016d}", ACCOUNT, CONTROL, max_bytes=1)))
    assert size == len(json.dumps(queue_account(f"q{0:016d}", ACCOUNT, CONTROL, max_bytes=1)))


def test_the_sentinel_may_do_nothing_and_the_auth_account_only_calls_out():
    nats = sentinel_user("U" + "S" * 55)["nats"]
    assert nats["bearer_token"] is True and nats["pub"] == {"deny": [">"]} and nats["sub"] == {"deny": [">"]}
    auth = auth_account("A" + "U" * 55, "UCALLOUT")["nats"]
    assert auth["authorization"] == {"auth_users": ["UCALLOUT"], "allowed_accounts": ["*"]}
    assert auth["limits"]["disk_storage"] == 0


def test_the_rendered_config_holds_no_seed(tmp_path):
    keys = OperatorKeys(MasterKey(os.urandom(32)))
    config = BrokerConfig(host="127.0.0.1", port=4222, store_dir=tmp_path / "js",
                            log_file=tmp_path / "log", sync="always", max_file_store=1 << 30)
    text = render(config, keys)
    assert '"S' not in text.replace('"SYS"', "")  # nkey seeds start with S
    built = build(config, keys)
    assert built["resolver"]["type"] == "full" and built["resolver"]["allow_delete"] is True
    assert set(built["resolver_preload"]) == {keys.public(keys.platform_account(r)) for r in ("system", "control", "auth")}
    assert built["jetstream"]["sync_interval"] == "always" and "accounts" not in built


def test_upgrade_renames_config_mode_account_directories_once(tmp_path):
    keys = OperatorKeys(MasterKey(os.urandom(32)))
    root = tmp_path / "jetstream"
    for name in ("CONTROL", "qaaaaaaaaaaaaaaaa", "notanaccount"):
        (root / name / "streams").mkdir(parents=True)
    assert upgrade_store(tmp_path, keys) == 2
    names = {p.name for p in root.iterdir()}
    assert names == {keys.public(keys.platform_account("control")), keys.public(keys.queue_account("qaaaaaaaaaaaaaaaa")),
                     "notanaccount"}
    assert upgrade_store(tmp_path, keys) == 0
    (root / "CONTROL").mkdir()
    with pytest.raises(FileExistsError):
        upgrade_store(tmp_path, keys)


def test_the_user_the_callout_mints_has_exactly_the_app_permissions_and_the_refusal():
    """Written out by hand: the queue's own stream (its id upper-cased), its own inbox, the
    account-local enclave.* services and the refusal; nothing with a wildcard wider than that."""
    claims = app_user("qone", "U" + "A" * 55, "A" + "B" * 55)["nats"]
    assert claims["pub"] == {"allow": [
        "queue.>", "$JS.API.CONSUMER.MSG.NEXT.QONE.*", "$JS.ACK.QONE.*.>", "$JS.API.STREAM.INFO.QONE",
        "$JS.API.CONSUMER.INFO.QONE.*", "$JS.API.STREAM.MSG.GET.QONE",
        "enclave.errors.*", "enclave.reject", "enclave.desk.*", "enclave.notes", "refused.>"]}
    assert claims["sub"] == {"allow": ["_INBOX_qone.>"]}
    assert claims["issuer_account"] == "A" + "B" * 55
    assert set(claims["pub"]["allow"]) - {"refused.>"} == set(app_permissions("qone")["publish"]["allow"])


def test_two_queues_users_share_no_stream_or_inbox_subject():
    """Each queue's user names its own stream and inbox only: made side by side, neither names the
    other's (a stream or inbox name built from anything but the id would show here)."""
    one, two = (app_user(queue, "U" + "A" * 55, "A" + "B" * 55)["nats"] for queue in ("qone", "qtwo"))
    for own, other, claims in (("qone", "qtwo", one), ("qtwo", "qone", two)):
        text = json.dumps({"pub": claims["pub"], "sub": claims["sub"]})
        assert own.upper() in text and f"_INBOX_{own}." in text
        assert other not in text.lower()
    shared = set(one["pub"]["allow"]) & set(two["pub"]["allow"])
    assert shared == {"queue.>", "enclave.errors.*", "enclave.reject", "enclave.desk.*", "enclave.notes",
                      "refused.>"}  # account-local subjects: each account has its own of them