"""The enclave_queue resource and the data sources driven as OpenTofu drives them, against the
shared running stack: what each plan and apply does on the broker, and every API error as a
diagnostic. Each step that OpenTofu runs as a separate command gets a fresh provider process."""


import nats.js.api
import nats.js.errors
import pytest

from enclave_provider import queue_model as model
from enclave_queue.errors import NotFound
from enclave_queue.names import CONSUMER, stream_name
from enclave_queue.retry import retry_unavailable
from enclave_queue.spec import HEADER_ROOM
from tests.helpers import account_on_broker, account_refuses_logins, account_store, make_queue, queue_account_connection
from tests.provider.harness import UNKNOWN, Tofu, errors_of

Q = "enclave_queue"


async def broker_objects(stack, queue_id):
    """The queue's stream and consumer configs, read on the broker itself."""
    async with queue_account_connection(stack, queue_id) as nc:
        js = nc.jetstream()
        stream = await retry_unavailable(lambda: js.stream_info(stream_name(queue_id)))
        consumer = await retry_unavailable(lambda: js.consumer_info(stream_name(queue_id), CONSUMER))
        return stream.config, consumer.config


async def assert_gone_from_broker(stack, queue_id):
    assert not account_on_broker(stack, queue_id)
    assert await account_refuses_logins(stack, queue_id)  # the account is gone from the broker


async def test_plan_then_apply_in_a_fresh_process_creates_the_queue_on_the_broker(stack, new_tofu, unique_name):
    planner = new_tofu()
    config = planner.config(Q, name=unique_name, max_message_bytes=2048, max_receives=4, retention_hours=2,
                            visibility_timeout_seconds=7)
    assert planner.validate(Q, config) == []
    plan = planner.plan(Q, None, config)
    assert errors_of(plan.diagnostics) == [] and plan.requires_replace == []
    assert plan.planned["project"] == "default" and plan.planned["id"] is UNKNOWN
    planner.process.stop()

    applier = new_tofu()  # OpenTofu applies a saved plan with a new provider process
    state, diags = applier.apply(Q, plan)
    assert diags == []
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
        assert admin.queue_status("default", unique_name)["state"] == "Ready"
        password = admin.credentials("default", unique_name)["password"]
    assert state == {**queue, "retry_backoff_seconds": None, "password": password, "password_version": 1,
                     "password_grace_seconds": 3600}
    assert state["subject"] == f"queue.default.{unique_name}" and state["password_secret"] == f"{unique_name}-password"

    stream, consumer = await broker_objects(stack, state["id"])
    assert (stream.max_age, stream.max_msg_size) == (2 * 3600, 2048 + HEADER_ROOM)
    assert (consumer.ack_wait, consumer.max_deliver) == (7, 4)

    refreshed, diags = new_tofu().read(Q, state)
    assert refreshed == state and diags == []


async def test_an_in_place_update_changes_the_broker_objects(stack, tofu, unique_name):
    state = tofu.create(Q, name=unique_name, max_receives=4, max_messages=10)
    config = tofu.config(Q, name=unique_name, max_receives=6, visibility_timeout_seconds=12, retention_hours=5,
                         retry_backoff_seconds=[2, 9], max_messages=50, dedupe_window_seconds=120)
    plan = tofu.plan(Q, state, config)
    assert plan.requires_replace == [] and errors_of(plan.diagnostics) == []
    assert plan.planned["id"] == state["id"] and plan.planned["username"] == state["username"]
    assert plan.planned["broker_url"] is UNKNOWN  # the server's outputs may change with any apply
    updated, diags = tofu.apply(Q, plan)
    assert diags == [] and updated["id"] == state["id"]
    stream, consumer = await broker_objects(stack, state["id"])
    assert (stream.max_age, stream.max_msgs, stream.duplicate_window) == (5 * 3600, 50, 120)
    assert (consumer.max_deliver, consumer.backoff, consumer.ack_wait) == (6, [2, 9], 2)

    # lines removed from the configuration go back to their defaults (tf applies defaults on create only)
    plan = tofu.plan(Q, updated, tofu.config(Q, name=unique_name))
    assert (plan.planned["max_receives"], plan.planned["retry_backoff_seconds"]) == (0, None)
    reset, diags = tofu.apply(Q, plan)
    assert diags == [] and (reset["max_receives"], reset["visibility_timeout_seconds"]) == (0, 30)
    stream, consumer = await broker_objects(stack, state["id"])
    assert (consumer.max_deliver, consumer.ack_wait, consumer.backoff, stream.max_age) == (-1, 30, None, 96 * 3600)
    assert (stream.max_msgs, stream.duplicate_window) == (-1, 3600)

    # the same configuration again: nothing to do
    again = tofu.plan(Q, reset, tofu.config(Q, name=unique_name))
    assert again.planned == reset and again.requires_replace == []


async def test_a_new_name_replaces_the_queue(stack, tofu, unique_name):
    old = tofu.create(Q, name=unique_name)
    renamed = f"{unique_name}-b"
    plan = tofu.plan(Q, old, tofu.config(Q, name=renamed))
    assert plan.requires_replace == [("name",)] and plan.planned["id"] is UNKNOWN
    tofu.destroy(Q, old)  # OpenTofu's replace: delete, then create
    new = tofu.create(Q, name=renamed)
    assert new["id"] != old["id"]
    with stack.admin() as admin:
        with pytest.raises(NotFound):
            admin.get_queue("default", unique_name)
        assert admin.get_queue("default", renamed)["id"] == new["id"]
    await assert_gone_from_broker(stack, old["id"])
    await broker_objects(stack, new["id"])


def test_a_queue_deleted_outside_opentofu_leaves_the_state_on_refresh(stack, tofu, unique_name):
    state = tofu.create(Q, name=unique_name)
    with stack.admin() as admin:
        admin.delete_queue("default", unique_name)
        admin.wait_deleted("default", unique_name, timeout=20)
    refreshed, diags = tofu.read(Q, state)
    assert refreshed is None and diags == []
    plan = tofu.plan(Q, None, tofu.config(Q, name=unique_name))  # the next plan creates it again
    assert plan.planned["id"] is UNKNOWN and errors_of(plan.diagnostics) == []


def test_a_404_that_is_not_the_queues_keeps_the_state_on_refresh_and_destroy(stack, new_tofu, api_proxy,
                                                                           unique_name):
    """Only the API's "Queue '…' does not exist" means the queue is gone. A proxy with a wrong
    prefix (or an endpoint with a wrong path) gets "There is no route …" for every queue: the
    refresh and the destroy fail and keep the queue, on the server and in the state."""
    state = new_tofu().create(Q, name=unique_name)
    proxy = api_proxy(lambda method, path: f"/typo{path}")
    tofu = new_tofu(endpoint=proxy.url)
    refreshed, diags = tofu.read(Q, state)
    assert refreshed == state and [d.summary for d in errors_of(diags)] == [
        f"Unable to read queue '{unique_name}': There is no route /typo/v1/projects/default/queues/{unique_name}."]
    kept, diags = tofu.apply(Q, tofu.plan(Q, state, None))
    assert kept == state and [d.summary for d in errors_of(diags)] == [
        f"Unable to delete queue '{unique_name}': There is no route /typo/v1/projects/default/queues/{unique_name}."]
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["id"] == state["id"]
    new_tofu(endpoint=f"{stack.api_url}/").destroy(Q, state)  # the API's own address, a final '/' allowed


def test_a_created_queue_is_kept_in_state_when_the_api_goes_before_it_is_ready(stack, new_tofu, api_proxy,
                                                                              unique_name):
    """The create answered 201, then the API is gone (the status and every later call fail): the
    queue is in the state as the create answered it, with the errors, so nothing is orphaned
    (OpenTofu marks it tainted and replaces it at the next apply)."""
    proxy = api_proxy(lambda method, path: path if (method, path) == ("POST", "/v1/projects/default/queues") else None)
    tofu = new_tofu(endpoint=proxy.url)
    state, diags = tofu.apply(Q, tofu.plan(Q, None, tofu.config(Q, name=unique_name)))
    assert errors_of(diags) and all(d.summary.startswith(f"Unable to create queue '{unique_name}': Cannot reach the "
                                                         f"Enclave API at {proxy.url}") for d in diags), diags
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
    assert state is not None and {k: state[k] for k in ("id", "name", "project", "username")} == {
        k: queue[k] for k in ("id", "name", "project", "username")}
    assert (state["password"], state["password_version"]) == (None, 1)  # the credentials could not be read
    refreshed, diags = new_tofu().read(Q, state)
    assert diags == [] and refreshed["id"] == queue["id"] and refreshed["password"]
    new_tofu().destroy(Q, refreshed)


def test_an_unknown_provider_project_plans_the_queues_project_unknown(stack, start_provider, new_tofu, unique_name):
    """``provider "enclave" { project = terraform_data.p.output }``: the queues that name no
    project plan theirs unknown (not the default), so the final plan at apply is consistent."""
    planner = Tofu(start_provider())
    assert errors_of(planner.configure(endpoint=stack.api_url, token=stack.token, project=UNKNOWN)) == []
    config = planner.config(Q, name=unique_name)
    plan = planner.plan(Q, None, config)
    assert errors_of(plan.diagnostics) == [] and plan.planned["project"] is UNKNOWN
    named = planner.plan(Q, None, planner.config(Q, name=unique_name, project="tf-named"))
    assert errors_of(named.diagnostics) == [] and named.planned["project"] == "tf-named"

    applier = new_tofu(project="tf-unknown")  # at apply the project is known: OpenTofu plans again
    final = applier.plan(Q, None, config)
    assert final.planned["project"] == "tf-unknown"
    state, diags = applier.apply(Q, final)
    assert diags == [] and state["project"] == "tf-unknown"
    applier.destroy(Q, state)


def test_validate_and_plan_refuse_a_final_newline_and_a_max_bytes_without_room_for_a_message(tofu):
    """The API's rules, checked before anything is applied: names matched in full, and max_bytes
    at least max_message_bytes + 4096 (one message of the largest size with its headers)."""
    cases = [
        (tofu.config(Q, name="abc\n"), ("name",), "name must be 3–40 lowercase letters"),
        (tofu.config(Q, name="emails", project="shop\n"), ("project",), "project must be 1–40"),
        (tofu.config(Q, name="emails", dead_letter_queue="abc\n"), ("dead_letter_queue",), "(got 'abc\\n')"),
        (tofu.config(Q, name="emails", max_message_bytes=1048576, max_bytes=1048576), ("max_bytes",),
         "max_bytes (1048576) must hold at least one message of max_message_bytes (1048576) with its headers: "
         "1052672 bytes or more."),
    ]
    for config, path, fragment in cases:
        for diags in (tofu.validate(Q, config), tofu.plan(Q, None, config).diagnostics):
            (error,) = errors_of(diags)
            assert (error.path, error.summary) == (path, f"Invalid {path[0]}") and fragment in error.detail, error
    fits = tofu.config(Q, name="emails", max_message_bytes=1048576, max_bytes=1048576 + 4096)
    assert tofu.validate(Q, fits) == [] and errors_of(tofu.plan(Q, None, fits).diagnostics) == []
    states, diags = tofu.import_state(Q, "default/emails\n")
    assert states == [] and errors_of(diags)[0].summary == "Unable to import queue 'default/emails\\n'"


def test_a_max_bytes_the_store_cannot_hold_fails_the_apply_saying_so(tofu, unique_name):
    """The sentence docs/opentofu.md shows for a max_bytes that does not fit in the broker's store."""
    state, diags = tofu.apply(Q, tofu.plan(Q, None, tofu.config(Q, name=unique_name, max_bytes=1 << 40)))
    (error,) = diags
    assert state is None and error.summary.startswith(
        f"Unable to create queue '{unique_name}': Queue '{unique_name}' needs max_bytes 1099511627776, but only ")
    assert "bytes of the broker's store (ENCLAVE_MAX_FILE_STORE, " in error.summary


@pytest.mark.parametrize("form", ["project/name", "name"])
def test_import_by_either_id(stack, new_tofu, unique_name, form):
    make_queue(stack, unique_name, project="tf-import", max_receives=3, retry_backoff_seconds=[4])
    tofu = new_tofu(project="tf-import")
    import_id = f"tf-import/{unique_name}" if form == "project/name" else unique_name
    (state,), diags = tofu.import_state(Q, import_id)
    assert diags == [] and (state["project"], state["name"], state["max_receives"]) == ("tf-import", unique_name, 3)
    refreshed, _ = tofu.read(Q, state)
    assert refreshed == state
    plan = tofu.plan(Q, refreshed, tofu.config(Q, name=unique_name, max_receives=3, retry_backoff_seconds=[4]))
    assert plan.planned == refreshed and plan.requires_replace == []  # matches the configuration: no change

    states, diags = tofu.import_state(Q, f"tf-import/{unique_name}-missing")
    assert states == [] and [d.summary for d in errors_of(diags)] == [
        f"Unable to import queue '{unique_name}-missing': Queue '{unique_name}-missing' does not exist in project "
        "'tf-import'."]


async def test_destroy_leaves_nothing_behind(stack, tofu, unique_name):
    dlq = tofu.create(Q, name=f"{unique_name}-dlq")
    queue = tofu.create(Q, name=unique_name, dead_letter_queue=dlq["name"], max_receives=2)
    assert queue["dead_letter_queue"] == dlq["name"]
    tofu.destroy(Q, queue)  # dependents first, as OpenTofu orders them
    tofu.destroy(Q, dlq)
    with stack.admin() as admin:
        names = {q["name"] for q in admin.list_queues("default")}
        assert not {unique_name, f"{unique_name}-dlq"} & names
        with pytest.raises(NotFound):
            admin.read_secret("default", f"{unique_name}-password")
    for state in (queue, dlq):
        await assert_gone_from_broker(stack, state["id"])
        assert not account_store(stack, state["id"]).exists()


def test_api_errors_are_diagnostics_and_the_provider_keeps_serving(stack, tofu, unique_name):
    make_queue(stack, unique_name)
    taken = tofu.plan(Q, None, tofu.config(Q, name=unique_name))
    state, diags = tofu.apply(Q, taken)
    assert state is None
    assert [d.summary for d in diags] == [
        f"Unable to create queue '{unique_name}': Queue '{unique_name}' already exists in project 'default'."]

    missing_dlq = tofu.plan(Q, None, tofu.config(Q, name=f"{unique_name}-b", dead_letter_queue="no-such-queue"))
    state, diags = tofu.apply(Q, missing_dlq)
    (error,) = diags
    assert state is None and error.path == ("dead_letter_queue",)
    assert error.summary == (f"Unable to create queue '{unique_name}-b': dead_letter_queue names queue 'no-such-queue', "
                             "which does not exist in project 'default'.")

    # a queue in use as a dead-letter queue cannot be deleted: the state keeps it
    dlq = tofu.create(Q, name=f"{unique_name}-dlq")
    user = tofu.create(Q, name=f"{unique_name}-c", dead_letter_queue=dlq["name"])
    kept, diags = tofu.apply(Q, tofu.plan(Q, dlq, None))
    assert kept == dlq and diags[0].summary.startswith(f"Unable to delete queue '{unique_name}-dlq': ")

    assert tofu.process.alive() and tofu.read(Q, user)[0] == user
    tofu.destroy(Q, user)
    tofu.destroy(Q, dlq)


def test_priorities_turn_on_but_a_plan_to_turn_them_off_is_an_error(stack, tofu, unique_name):
    state = tofu.create(Q, name=unique_name, priorities=True)
    with stack.admin() as admin:
        assert state["priorities"] is True and admin.get_queue("default", unique_name)["priorities"] is True
    for config in (tofu.config(Q, name=unique_name, priorities=False), tofu.config(Q, name=unique_name)):
        plan = tofu.plan(Q, state, config)
        (error,) = errors_of(plan.diagnostics)
        assert error.path == ("priorities",) and error.summary == "Invalid priorities"
        assert f"priorities cannot be turned off on queue '{unique_name}'" in error.detail
        assert plan.planned is None
    assert tofu.plan(Q, state, tofu.config(Q, name=unique_name, priorities=True)).planned == state
    queue, diags = tofu.read_data(Q, tofu.data_config(Q, name=unique_name))
    assert diags == [] and queue["priorities"] is True
    tofu.destroy(Q, state)

    plain = tofu.create(Q, name=f"{unique_name}-b")
    assert plain["priorities"] is False
    plan = tofu.plan(Q, plain, tofu.config(Q, name=f"{unique_name}-b", priorities=True))
    assert errors_of(plan.diagnostics) == [] and plan.requires_replace == []
    turned_on, diags = tofu.apply(Q, plan)
    assert diags == [] and turned_on["priorities"] is True and turned_on["id"] == plain["id"]
    tofu.destroy(Q, turned_on)


def test_data_sources_wire_a_queues_password_into_an_app(stack, tofu, unique_name):
    state = tofu.create(Q, name=unique_name, visibility_timeout_seconds=9)
    queue, diags = tofu.read_data(Q, tofu.data_config(Q, name=unique_name))
    assert diags == [] and queue == {k: v for k, v in state.items() if k in model.ATTRIBUTES}
    secret, diags = tofu.read_data("enclave_secret", tofu.config("enclave_secret", name=queue["password_secret"]))
    with stack.admin() as admin:
        assert diags == [] and secret["value"] == admin.credentials("default", unique_name)["password"]
    assert secret["value"] == state["password"]  # the resource's own password output: the same value
    assert secret["project"] == "default"

    missing, diags = tofu.read_data("enclave_secret", tofu.config("enclave_secret", name="nope-password"))
    assert missing is None and [d.summary for d in diags] == [
        "Unable to read secret 'nope-password': Secret 'nope-password' does not exist in project 'default'."]


def test_the_environment_configures_the_provider(stack, start_provider, unique_name):
    from tests.provider.harness import Tofu

    tofu = Tofu(start_provider(env={"ENCLAVE_URL": stack.api_url, "ENCLAVE_TOKEN": stack.token,
                                    "ENCLAVE_PROJECT": "tf-env"}))
    assert tofu.configure() == []
    state = tofu.create(Q, name=unique_name)
    assert state["project"] == "tf-env" and state["subject"] == f"queue.tf-env.{unique_name}"
    tofu.destroy(Q, state)

    wrong = Tofu(start_provider(env={"ENCLAVE_URL": stack.api_url, "ENCLAVE_TOKEN": "enq_wrong"}))
    assert wrong.configure() == []
    _, diags = wrong.read(Q, state)
    assert diags[0].summary.startswith(f"Unable to read queue '{unique_name}': ")
    assert "token" in diags[0].summary.lower()


async def test_an_apply_that_ends_errored_fails_with_the_status_message(stack, tofu, unique_name):
    state = tofu.create(Q, name=unique_name)
    stream = stream_name(state["id"])
    async with queue_account_connection(stack, state['id']) as nc:  # a change the controller cannot repair in place
        js = nc.jetstream()
        await retry_unavailable(lambda: js.delete_stream(stream))
        await retry_unavailable(lambda: js.add_stream(name=stream, subjects=[state["subject"]],
                                                      retention=nats.js.api.RetentionPolicy.LIMITS))
        plan = tofu.plan(Q, state, tofu.config(Q, name=unique_name, retention_hours=5))
        updated, diags = tofu.apply(Q, plan)
        (error,) = diags
        assert error.summary.startswith(f"Unable to update queue '{unique_name}': Queue '{unique_name}' failed: ")
        assert "was changed outside Enclave (retention)" in error.summary
        assert updated is not None and updated["retention_hours"] == 5  # recorded: OpenTofu keeps what was applied
        await retry_unavailable(lambda: js.delete_stream(stream))  # the operator's fix; the next resync repairs it
    tofu.destroy(Q, updated)
