"""The enclave_queue resource's password rotation driven as OpenTofu drives it (the real plugin
protocol, tests/provider/harness.py), against the shared running stack: a raised
password_version plans the password unknown and the apply rotates it, the old password logging
in for password_grace_seconds (the SDK's connect); a lowered version and a bad grace are plan
errors naming their attribute; refresh and import keep the state's version."""

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import Unauthorized
from tests.provider.harness import UNKNOWN, errors_of

Q = "enclave_queue"
CONNECT_TIMEOUT = 2.0  #: seconds for one SDK connect


def credentials(stack, name: str) -> dict:
    with stack.admin() as admin:
        return admin.credentials("default", name)


async def test_raising_password_version_rotates_and_the_old_password_logs_in_during_the_grace(stack, new_tofu,
                                                                                            unique_name):
    state = new_tofu().create(Q, name=unique_name)
    old = credentials(stack, unique_name)
    assert (state["password"], state["password_version"], state["password_grace_seconds"]) == (old["password"], 1,
                                                                                               3600)

    planner = new_tofu()
    config = planner.config(Q, name=unique_name, password_version=2)
    plan = planner.plan(Q, state, config)
    assert errors_of(plan.diagnostics) == [] and plan.requires_replace == []
    assert plan.planned["password"] is UNKNOWN and plan.planned["password_version"] == 2
    assert (plan.planned["id"], plan.planned["username"]) == (state["id"], state["username"])
    planner.process.stop()

    rotated, diags = new_tofu().apply(Q, plan)  # a saved plan, applied by a new provider process
    assert diags == []
    new = credentials(stack, unique_name)
    assert rotated["password"] == new["password"] != old["password"]
    assert {**rotated, "password": None, "password_version": 1} == {**state, "password": None}  # nothing else

    async with connect(old, connect_timeout=CONNECT_TIMEOUT) as queue:  # the old password, in its grace
        await queue.send({"sent with": "the old password"})
    async with connect(new, connect_timeout=CONNECT_TIMEOUT) as queue:
        [message] = await queue.receive(1, wait=2)
        assert message.body == {"sent with": "the old password"}
        await message.delete()

    tofu = new_tofu()  # the next command: nothing more to do
    refreshed, diags = tofu.read(Q, rotated)
    assert diags == [] and refreshed == rotated
    again = tofu.plan(Q, refreshed, config)
    assert again.planned == refreshed and errors_of(again.diagnostics) == []
    assert credentials(stack, unique_name)["password"] == new["password"]


async def test_a_rotation_with_a_settings_change_and_no_grace_cuts_the_old_password_off(stack, tofu, unique_name):
    state = tofu.create(Q, name=unique_name)
    old = credentials(stack, unique_name)
    plan = tofu.plan(Q, state, tofu.config(Q, name=unique_name, max_receives=3, password_version=2,
                                           password_grace_seconds=0))
    assert plan.planned["password"] is UNKNOWN and plan.planned["broker_url"] is UNKNOWN
    rotated, diags = tofu.apply(Q, plan)
    assert diags == [] and (rotated["max_receives"], rotated["password_grace_seconds"]) == (3, 0)
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["max_receives"] == 3
    new = credentials(stack, unique_name)
    assert rotated["password"] == new["password"] != old["password"]
    with pytest.raises(Unauthorized):
        async with connect(old, connect_timeout=CONNECT_TIMEOUT):
            pass
    async with connect(new, connect_timeout=CONNECT_TIMEOUT) as queue:
        await queue.send("fine")


def test_a_lowered_version_or_a_bad_grace_is_a_plan_error_naming_the_attribute(stack, tofu, unique_name):
    state = tofu.create(Q, name=unique_name, password_version=3)  # a new queue: nothing to rotate
    assert state["password_version"] == 3 and state["password"] == credentials(stack, unique_name)["password"]

    for config in (tofu.config(Q, name=unique_name, password_version=2), tofu.config(Q, name=unique_name)):
        plan = tofu.plan(Q, state, config)
        (error,) = errors_of(plan.diagnostics)
        assert (error.path, error.summary) == (("password_version",), "Invalid password_version")
        assert error.detail.startswith(f"password_version cannot be lowered on queue '{unique_name}' (from 3 to ")
        assert plan.planned is None

    config = tofu.config(Q, name=unique_name, password_version=4, password_grace_seconds=604801)
    for diags in (tofu.validate(Q, config), tofu.plan(Q, state, config).diagnostics):
        (error,) = errors_of(diags)
        assert (error.path, error.summary) == (("password_grace_seconds",), "Invalid password_grace_seconds")
        assert error.detail == "password_grace_seconds must be an integer from 0 to 604800 (7 days) (got 604801)."
    assert credentials(stack, unique_name)["password"] == state["password"]  # nothing was rotated

    # a new grace alone changes the state and nothing on the server
    plan = tofu.plan(Q, state, tofu.config(Q, name=unique_name, password_version=3, password_grace_seconds=60))
    assert plan.planned == {**state, "password_grace_seconds": 60}
    kept, diags = tofu.apply(Q, plan)
    assert diags == [] and kept == {**state, "password_grace_seconds": 60}
    assert credentials(stack, unique_name)["password"] == state["password"]


def test_refresh_and_import_keep_the_states_version_and_read_the_current_password(stack, new_tofu, unique_name):
    tofu = new_tofu()
    state = tofu.create(Q, name=unique_name, password_version=5)
    with stack.admin() as admin:  # rotated outside OpenTofu (the CLI, the console)
        outside = admin.rotate_password("default", unique_name, grace_seconds=0)
    assert outside["password"] != state["password"]

    refreshed, diags = tofu.read(Q, state)
    assert diags == [] and refreshed == {**state, "password": outside["password"]}  # version 5, as it was

    (imported,), diags = new_tofu().import_state(Q, unique_name)
    assert diags == [] and imported == {**refreshed, "password_version": 1}  # a new state starts at 1
    plan = tofu.plan(Q, imported, tofu.config(Q, name=unique_name))
    assert plan.planned == imported and errors_of(plan.diagnostics) == []  # no change, no rotation


def test_a_rotation_done_is_kept_in_state_when_the_api_goes_before_it_settles(stack, new_tofu, api_proxy, unique_name):
    """The rotation answered its new password, then the API is gone (the status and every later
    call fail): the state has the new password and the raised version, so the next plan rotates
    nothing more."""
    state = new_tofu().create(Q, name=unique_name)
    proxy = api_proxy(lambda method, path: path if path.endswith("/rotate-password") else None)
    tofu = new_tofu(endpoint=proxy.url)
    config = tofu.config(Q, name=unique_name, password_version=2)
    rotated, diags = tofu.apply(Q, tofu.plan(Q, state, config))
    assert errors_of(diags) and all(d.summary.startswith(f"Unable to update queue '{unique_name}': Cannot reach the "
                                                         f"Enclave API at {proxy.url}") for d in diags), diags
    new = credentials(stack, unique_name)
    assert new["password"] != state["password"]
    assert rotated == {**state, "password": new["password"], "password_version": 2}

    planner = new_tofu()
    refreshed, diags = planner.read(Q, rotated)
    assert diags == [] and refreshed == rotated
    assert planner.plan(Q, refreshed, config).planned == refreshed  # no second rotation
