"""The rendered nats-server configuration: accounts, permissions, exports and imports."""

import json
from pathlib import Path

from enclave_queue.auth import users
from enclave_queue.broker.config import AccountEntry, BrokerConfig, build, render
from enclave_queue.controller.accounts import accounts_in_config

BASE = BrokerConfig(host="127.0.0.1", port=4999, store_dir=Path("/data/js"), log_file=Path("/data/log"),
                    sync="always", system_nkey="USYS", control_nkey="UCTL")


def with_accounts(*ids: str, sync: str = "always") -> dict:
    accounts = tuple(AccountEntry(i, f"$2b$06$hash-of-{i}") for i in ids)
    return build(BrokerConfig(**{**BASE.__dict__, "accounts": accounts, "sync": sync}))


def test_base_config_has_system_and_control_accounts_with_nkeys():
    config = with_accounts()
    assert config["system_account"] == "SYS"
    assert config["accounts"]["SYS"]["users"] == [{"nkey": "USYS"}]
    assert config["accounts"]["CONTROL"]["users"] == [{"nkey": "UCTL"}]
    assert config["listen"] == "127.0.0.1:4999"
    assert config["jetstream"]["max_memory_store"] == 512 * 1024 * 1024


def test_sync_setting_maps_to_sync_interval():
    assert with_accounts(sync="always")["jetstream"]["sync_interval"] == "always"
    assert "sync_interval" not in with_accounts(sync="interval")["jetstream"]


def test_each_queue_account_has_one_user_with_allow_only_permissions():
    account = with_accounts("qone")["accounts"]["qone"]
    (user,) = account["users"]
    assert user["user"] == "qone"
    assert user["password"].startswith("$2b$")
    perms = user["permissions"]
    assert set(perms) == {"publish", "subscribe"}
    assert set(perms["publish"]) == {"allow"} and set(perms["subscribe"]) == {"allow"}
    assert perms["subscribe"]["allow"] == ["_INBOX_qone.>"]
    assert "$JS.API.CONSUMER.MSG.NEXT.QONE.*" in perms["publish"]["allow"]  # its consumer and priority lanes
    assert not any(s in ("$JS.API.>", ">", "_INBOX.>") for s in perms["publish"]["allow"])


def test_exports_are_only_for_the_control_account():
    account = with_accounts("qone")["accounts"]["qone"]
    assert account["exports"]
    assert all(export["accounts"] == ["CONTROL"] for export in account["exports"])


def test_control_imports_each_queue_under_its_own_prefix():
    imports = with_accounts("qone", "qtwo")["accounts"]["CONTROL"]["imports"]
    targets = {i.get("to") for i in imports}
    assert {"jsapi.qone.>", "jsapi.qtwo.>", "send.qone.>", "send.qtwo.>"} <= targets


def test_render_is_stable_json_and_round_trips_accounts():
    accounts = (AccountEntry("qb", "hb"), AccountEntry("qa", "ha"))
    text = render(BrokerConfig(**{**BASE.__dict__, "accounts": accounts}))
    assert text == render(BrokerConfig(**{**BASE.__dict__, "accounts": accounts}))
    json.loads(text)
    assert accounts_in_config(text) == {"qa": AccountEntry("qa", "ha"), "qb": AccountEntry("qb", "hb")}
    assert accounts_in_config("not json") == {}


def test_a_queue_accounts_users_imports_and_exports_never_name_another_queue():
    config = with_accounts("qone", "qtwo")
    for own, other in (("qone", "qtwo"), ("qtwo", "qone")):  # both directions, from one rendered config
        account = config["accounts"][own]
        text = json.dumps({k: account[k] for k in ("users", "imports", "exports")})
        assert own in text or own.upper() in text  # the check can see an id where there is one
        assert other not in text and other.upper() not in text
        (user,) = account["users"]
        assert user["permissions"] == users.app_permissions(own)


def test_all_consumer_advisories_of_a_queue_are_one_export_and_one_import():
    """MSG_NAKED (for the nak counter) rides the export the mover's MAX_DELIVERIES already used:
    no second entry per queue, which would grow every reload."""
    config = with_accounts("qone")
    (export,) = [e for e in config["accounts"]["qone"]["exports"] if "stream" in e]
    assert export == {"stream": "$JS.EVENT.ADVISORY.CONSUMER.*.QONE.*", "accounts": ["CONTROL"]}  # all its lanes
    (imported,) = [i for i in config["accounts"]["CONTROL"]["imports"] if "stream" in i]
    assert imported == {"stream": {"account": "qone", "subject": "$JS.EVENT.ADVISORY.CONSUMER.*.QONE.*"},
                        "to": "adv.qone.*.*"}


def test_each_queue_account_is_limited_to_its_queues_storage_and_objects():
    from enclave_queue.broker.config import DEFAULT_ACCOUNT_BYTES

    config = build(BrokerConfig(**{**BASE.__dict__, "max_file_store": 10 << 30, "accounts": (
        AccountEntry("qone", "$2b$06$h1"), AccountEntry("qtwo", "$2b$06$h2", max_bytes=5 << 20))}))
    assert config["jetstream"]["max_file_store"] == 10 << 30
    assert config["accounts"]["qone"]["jetstream"] == {"max_file": DEFAULT_ACCOUNT_BYTES, "max_mem": 0,
                                                       "max_streams": 1, "max_consumers": 10}
    assert config["accounts"]["qtwo"]["jetstream"]["max_file"] == 5 << 20
    assert config["accounts"]["CONTROL"]["jetstream"] == "enabled"  # its streams reserve their own room
    again = accounts_in_config(render(BrokerConfig(**{**BASE.__dict__, "accounts": (
        AccountEntry("qtwo", "$2b$06$h2", max_bytes=5 << 20),)})))
    assert again["qtwo"].max_bytes == 5 << 20
