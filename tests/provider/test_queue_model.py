"""The enclave_queue resource's pure layer, alone: validation, defaults and plan, the password's
rotation, state ↔ API."""

import pytest
from tf.types import Unknown

from enclave_provider import queue_model as model

VALID = {"name": "emails", "project": None, "dead_letter_queue": None, "max_message_bytes": None,
         "max_receives": None, "retention_hours": None, "visibility_timeout_seconds": None,
         "max_messages": None, "max_bytes": None, "dedupe_window_seconds": None, "retry_backoff_seconds": None,
         "priorities": None, "password_version": None, "password_grace_seconds": None}
PRIOR = {**VALID, "project": "default", "max_message_bytes": 262144, "max_receives": 0, "retention_hours": 96,
         "visibility_timeout_seconds": 30, "max_messages": 0, "max_bytes": 64 << 20, "dedupe_window_seconds": 3600,
         "priorities": False, "replicas": 1, "broker_url": "nats://127.0.0.1:4222", "id": "qabc",
         "internal_broker_url": "nats://es-system-broker:4222", "password_secret": "emails-password",
         "subject": "queue.default.emails", "username": "qabc", "password": "old-password", "password_version": 1,
         "password_grace_seconds": 3600}


@pytest.mark.parametrize(("field", "value", "path", "fragment"), [
    ("name", "Emails", ("name",), "3–40 lowercase letters"),
    ("replicas", 2, ("replicas",), "replicas must be 1 or 3"),
    ("replicas", 1.5, ("replicas",), "(got 1.5)"),
    ("name", "ab", ("name",), "(got 'ab')"),
    ("name", "abc\n", ("name",), "(got 'abc\\n')"),
    ("project", "shop\n", ("project",), "(got 'shop\\n')"),
    ("dead_letter_queue", "abc\n", ("dead_letter_queue",), "(got 'abc\\n')"),
    ("max_bytes", 1048575, ("max_bytes",), "from 1048576 to 1099511627776"),
    ("project", "Shop", ("project",), "1–40 lowercase letters"),
    ("dead_letter_queue", "emails", ("dead_letter_queue",), "not the queue itself"),
    ("dead_letter_queue", "x", ("dead_letter_queue",), "3–40"),
    ("max_message_bytes", 1023, ("max_message_bytes",), "from 1024 to 1048576 (got 1023)"),
    ("max_message_bytes", 1048577, ("max_message_bytes",), "(got 1048577)"),
    ("max_receives", -1, ("max_receives",), "from 0 to 1000"),
    ("max_receives", 1001, ("max_receives",), "(got 1001)"),
    ("retention_hours", 0, ("retention_hours",), "from 1 to 336"),
    ("retention_hours", 337, ("retention_hours",), "(got 337)"),
    ("visibility_timeout_seconds", 0, ("visibility_timeout_seconds",), "from 1 to 43200"),
    ("visibility_timeout_seconds", 43201, ("visibility_timeout_seconds",), "(got 43201)"),
    ("visibility_timeout_seconds", 1.5, ("visibility_timeout_seconds",), "(got 1.5)"),
    ("max_messages", -1, ("max_messages",), "from 0 to 10000000"),
    ("max_messages", 10_000_001, ("max_messages",), "(got 10000001)"),
    ("dedupe_window_seconds", 0, ("dedupe_window_seconds",), "from 1 to 86400"),
    ("dedupe_window_seconds", 86401, ("dedupe_window_seconds",), "(got 86401)"),
    ("retry_backoff_seconds", [], ("retry_backoff_seconds",), "(got 0 entries)"),
    ("retry_backoff_seconds", [5] * 21, ("retry_backoff_seconds",), "(got 21 entries)"),
    ("retry_backoff_seconds", [5, 0, 30], ("retry_backoff_seconds", 1), "retry_backoff_seconds[1]"),
    ("retry_backoff_seconds", [43201], ("retry_backoff_seconds", 0), "from 1 to 43200"),
    ("password_version", 0, ("password_version",), "must be a whole number from 1 to 9007199254740991 (got 0)"),
    ("password_version", 2.5, ("password_version",), "(got 2.5)"),
    ("password_version", 2**53, ("password_version",), "(got 9007199254740992)"),
    ("password_grace_seconds", -1, ("password_grace_seconds",), "must be an integer from 0 to 604800 (7 days) (got -1)"),
    ("password_grace_seconds", 604801, ("password_grace_seconds",), "(got 604801)"),
    ("password_grace_seconds", 0.5, ("password_grace_seconds",), "(got 0.5)"),
])
def test_each_rule_names_its_attribute(field, value, path, fragment):
    (problem,) = model.validate({**VALID, field: value})
    assert problem.path == path
    assert problem.summary == f"Invalid {field}"
    assert fragment in problem.detail


def test_backoff_needs_fewer_entries_than_max_receives():
    (problem,) = model.validate({**VALID, "max_receives": 2, "retry_backoff_seconds": [5, 30]})
    assert problem.path == ("retry_backoff_seconds",) and "fewer entries than max_receives (2)" in problem.detail
    assert model.validate({**VALID, "max_receives": 3, "retry_backoff_seconds": [5, 30]}) == []
    assert model.validate({**VALID, "max_receives": 0, "retry_backoff_seconds": [5, 30]}) == []


def test_dedupe_window_may_not_exceed_the_retention():
    (problem,) = model.validate({**VALID, "retention_hours": 1, "dedupe_window_seconds": 3601})
    assert problem.path == ("dedupe_window_seconds",)
    assert "dedupe_window_seconds (3601) must not exceed retention_hours (1 h = 3600 s)" in problem.detail
    assert model.validate({**VALID, "retention_hours": 1, "dedupe_window_seconds": 3600}) == []
    assert model.validate({**VALID, "retention_hours": 1}) == []  # the default window (3600) fits
    assert model.validate({**VALID, "retention_hours": Unknown, "dedupe_window_seconds": 86400}) == []


def test_max_bytes_must_hold_one_message_with_its_headers():
    (problem,) = model.validate({**VALID, "max_message_bytes": 1048576, "max_bytes": 1048576})
    assert problem.path == ("max_bytes",) and problem.summary == "Invalid max_bytes"
    assert problem.detail == ("max_bytes (1048576) must hold at least one message of max_message_bytes (1048576) "
                              "with its headers: 1052672 bytes or more.")
    assert model.validate({**VALID, "max_message_bytes": 1048576, "max_bytes": 1048576 + 4096}) == []
    assert model.validate({**VALID, "max_bytes": 1048576}) == []  # the default message size (262144) fits
    assert model.validate({**VALID, "max_message_bytes": Unknown, "max_bytes": 1048576}) == []


def test_unknown_values_are_not_validated_yet():
    config = {**VALID, "name": Unknown, "max_receives": Unknown, "dead_letter_queue": Unknown,
              "retry_backoff_seconds": [5, Unknown]}
    assert model.validate(config) == []
    assert model.validate({**VALID, "retry_backoff_seconds": Unknown, "max_receives": 1}) == []


def test_numbers_arrive_as_ints_floats_or_strings():
    assert [model.whole(v) for v in (30, 30.0, "30", "3e1", 1.5, "1.5", "x", True, None)] == [
        30, 30, 30, 30, None, None, None, None, None]
    assert model.validate({**VALID, "retention_hours": "24"}) == []


def test_create_plans_defaults_the_providers_project_and_unknown_outputs():
    planned, replace = model.plan(None, VALID, VALID, "shop")
    assert replace == []
    assert planned["project"] == "shop"
    assert {f: planned[f] for f in model.LIMITS} == {
        "dedupe_window_seconds": 3600, "max_message_bytes": 262144, "max_messages": 0, "max_receives": 0,
        "retention_hours": 96, "visibility_timeout_seconds": 30, "max_bytes": 64 << 20}
    assert all(planned[o] is Unknown for o in model.OUTPUTS)
    assert planned["dead_letter_queue"] is None and planned["retry_backoff_seconds"] is None
    assert planned["priorities"] is False


def test_max_bytes_is_planned_from_the_message_size_unless_given():
    planned, _ = model.plan(None, {**VALID, "max_message_bytes": 1048576}, {**VALID, "max_message_bytes": 1048576},
                            "shop")
    assert planned["max_bytes"] == 256 << 20
    planned, _ = model.plan(None, {**VALID, "max_bytes": 5 << 20}, {**VALID, "max_bytes": 5 << 20}, "shop")
    assert planned["max_bytes"] == 5 << 20


def test_a_setting_removed_from_the_configuration_goes_back_to_its_default():
    prior = {**PRIOR, "max_receives": 5}
    proposed = {**prior}  # what OpenTofu proposes: the prior value of an optional+computed attribute
    planned, replace = model.plan(prior, VALID, proposed, "default")
    assert planned["max_receives"] == 0 and replace == []


def test_an_update_keeps_the_stable_outputs_and_plans_the_servers_unknown():
    config = {**VALID, "visibility_timeout_seconds": 60}
    planned, replace = model.plan(PRIOR, config, {**PRIOR, "visibility_timeout_seconds": 60}, "default")
    assert replace == []
    assert {o: planned[o] for o in model.STABLE_OUTPUTS} == {o: PRIOR[o] for o in model.STABLE_OUTPUTS}
    assert all(planned[o] is Unknown for o in model.SERVER_OUTPUTS)


def test_no_change_plans_the_prior_state_exactly():
    planned, replace = model.plan(PRIOR, VALID, dict(PRIOR), "default")
    assert planned == PRIOR and replace == []


@pytest.mark.parametrize(("change", "replaced"), [
    ({"name": "emails-2"}, ["name"]),
    ({"project": "shop"}, ["project"]),
    ({"name": Unknown}, ["name"]),
])
def test_name_or_project_replaces(change, replaced):
    config = {**VALID, **change}
    planned, replace = model.plan(PRIOR, config, {**PRIOR, **change}, "default")
    assert replace == replaced
    assert all(planned[o] is Unknown for o in model.OUTPUTS)


def test_a_changed_provider_project_replaces_a_queue_that_names_none():
    _, replace = model.plan(PRIOR, VALID, dict(PRIOR), "other")
    assert replace == ["project"]


def test_an_unknown_provider_project_plans_the_project_unknown():
    planned, _ = model.plan(None, VALID, dict(VALID), Unknown)
    assert planned["project"] is Unknown  # not the default: known at apply
    planned, _ = model.plan(None, {**VALID, "project": "shop"}, {**VALID, "project": "shop"}, Unknown)
    assert planned["project"] == "shop"
    planned, replace = model.plan(PRIOR, VALID, dict(PRIOR), Unknown)
    assert planned["project"] is Unknown and replace == ["project"]  # it may differ from the queue's


def test_bodies_for_the_api():
    planned = {**PRIOR, "dead_letter_queue": "dlq", "retry_backoff_seconds": [5.0, 30], "max_receives": 3.0}
    assert model.create_body(planned) == {
        "name": "emails", "max_message_bytes": 262144, "max_receives": 3, "retention_hours": 96,
        "visibility_timeout_seconds": 30, "max_messages": 0, "max_bytes": 64 << 20, "dedupe_window_seconds": 3600,
        "priorities": False, "dead_letter_queue": "dlq", "retry_backoff_seconds": [5, 30], "replicas": 1}
    assert "replicas" not in model.create_body({**planned, "replicas": Unknown})  # the server's default
    assert model.patch_body(planned, {**planned, "priorities": True}) == {"priorities": True}
    assert model.patch_body(planned, {**planned, "replicas": 3.0}) == {"replicas": 3}
    assert model.patch_body(planned, {**planned, "dead_letter_queue": None, "retry_backoff_seconds": None,
                                      "max_receives": 0}) == {
        "dead_letter_queue": None, "max_receives": 0, "retry_backoff_seconds": None}
    assert model.patch_body(planned, dict(planned)) == {}


@pytest.mark.parametrize(("config", "refused"), [
    ({"priorities": False}, True),
    ({}, True),  # removed from the configuration: planned at its default, false
    ({"priorities": True}, False),
    ({"priorities": Unknown}, False),  # checked again once known
    ({"name": "emails-2"}, False),  # a new queue may start without them
])
def test_priorities_cannot_be_planned_off_in_place(config, refused):
    prior = {**PRIOR, "priorities": True}
    planned, _ = model.plan(prior, {**VALID, **config}, {**prior, **config}, "default")
    problems = model.refused_changes(prior, planned)
    if not refused:
        assert problems == []
        return
    (problem,) = problems
    assert (problem.path, problem.summary) == (("priorities",), "Invalid priorities")
    assert "priorities cannot be turned off on queue 'emails'" in problem.detail


def test_priorities_can_be_planned_on_in_place():
    planned, replace = model.plan(PRIOR, {**VALID, "priorities": True}, {**PRIOR, "priorities": True}, "default")
    assert planned["priorities"] is True and replace == []
    assert model.refused_changes(PRIOR, planned) == [] and model.refused_changes(None, planned) == []


@pytest.mark.parametrize(("prior_limit", "config", "refused"), [
    (0, {"max_messages": 50}, True),  # a queue without a limit takes delayed messages: no limit later
    (0, {"max_messages": 0}, False),
    (0, {"max_messages": Unknown}, False),  # checked again once known
    (0, {"max_messages": 50, "name": "emails-2"}, False),  # a new queue may start with one
    (10, {"max_messages": 50}, False),  # a limit can change …
    (10, {"max_messages": 0}, False),  # … or go
])
def test_a_limit_cannot_be_planned_in_place_on_a_queue_without_one(prior_limit, config, refused):
    prior = {**PRIOR, "max_messages": prior_limit}
    planned, _ = model.plan(prior, {**VALID, **config}, {**prior, **config}, "default")
    problems = model.refused_changes(prior, planned)
    assert [(p.path, p.summary) for p in problems] == ([(("max_messages",), "Invalid max_messages")] if refused else [])
    if refused:
        assert "takes delayed messages" in problems[0].detail


def test_state_from_the_api_has_every_attribute():
    queue = {**PRIOR, "retry_backoff_seconds": (5, 30), "extra": "ignored"}
    state = model.state_from_api(queue)
    assert set(state) == set(model.ATTRIBUTES) and state["retry_backoff_seconds"] == [5, 30]
    assert model.conform({"name": "x", "gone": 1}) == {**dict.fromkeys(model.RESOURCE_ATTRIBUTES), "name": "x",
                                                       "password_version": 1, "password_grace_seconds": 3600}


@pytest.mark.parametrize(("import_id", "expected"), [
    ("shop/emails", ("shop", "emails")),
    ("emails", ("default", "emails")),
])
def test_import_ids(import_id, expected):
    assert model.parse_import_id(import_id, "default") == expected


@pytest.mark.parametrize("import_id", ["", "Shop/emails", "shop/", "a/b/c", "shop/x", "/emails", "emails\n",
                                       "shop/emails\n", "shop\n/emails"])
def test_bad_import_ids(import_id):
    with pytest.raises(ValueError, match="must be '<project>/<name>' or '<name>'"):
        model.parse_import_id(import_id, "default")


# -- the password's rotation ------------------------------------------------------------------------


def test_create_plans_the_rotation_defaults_and_an_unknown_password():
    planned, _ = model.plan(None, VALID, dict(VALID), "default")
    assert (planned["password_version"], planned["password_grace_seconds"]) == (1, 3600)
    assert planned["password"] is Unknown


@pytest.mark.parametrize("version", [2, 7, 2.0, Unknown])
def test_a_raised_or_unknown_version_rotates_keeping_the_stable_outputs(version):
    config = {**VALID, "password_version": version}
    planned, replace = model.plan(PRIOR, config, {**PRIOR, "password_version": version}, "default")
    assert replace == [] and model.rotates(PRIOR, planned)
    assert planned["password"] is Unknown and planned["password_version"] is version
    assert {o: planned[o] for o in model.STABLE_OUTPUTS} == {o: PRIOR[o] for o in model.STABLE_OUTPUTS}
    assert model.refused_changes(PRIOR, planned) == []


def test_an_unchanged_version_rotates_nothing():
    config = {**VALID, "password_version": 1}
    planned, _ = model.plan(PRIOR, config, {**PRIOR, "password_version": 1}, "default")
    assert planned == PRIOR and not model.rotates(PRIOR, planned)


def test_a_new_grace_alone_keeps_every_output_and_the_password():
    config = {**VALID, "password_grace_seconds": 60}
    planned, replace = model.plan(PRIOR, config, {**PRIOR, "password_grace_seconds": 60}, "default")
    assert replace == [] and planned == {**PRIOR, "password_grace_seconds": 60} and not model.rotates(PRIOR, planned)


def test_a_settings_change_without_a_rotation_keeps_the_password():
    config = {**VALID, "max_receives": 3}
    planned, _ = model.plan(PRIOR, config, {**PRIOR, "max_receives": 3}, "default")
    assert planned["password"] == "old-password" and planned["broker_url"] is Unknown


def test_a_lowered_version_is_refused_naming_the_attribute():
    prior = {**PRIOR, "password_version": 3}
    planned, _ = model.plan(prior, VALID, dict(prior), "default")  # the line removed: back to 1
    [problem] = model.refused_changes(prior, planned)
    assert (problem.path, problem.summary) == (("password_version",), "Invalid password_version")
    assert problem.detail.startswith("password_version cannot be lowered on queue 'emails' (from 3 to 1)")
    # a replaced queue starts again with a new password: any version will do
    planned, replace = model.plan(prior, {**VALID, "name": "emails-2"}, {**prior, "name": "emails-2"}, "default")
    assert replace == ["name"] and model.refused_changes(prior, planned) == []


def test_a_state_keeps_its_rotation_arguments_and_an_old_one_gets_the_defaults():
    queue = {k: PRIOR[k] for k in model.ATTRIBUTES}
    state = model.resource_state(queue, "new-password", {"password_version": 4, "password_grace_seconds": 0})
    assert set(state) == set(model.RESOURCE_ATTRIBUTES)
    assert (state["password"], state["password_version"], state["password_grace_seconds"]) == ("new-password", 4, 0)
    assert model.resource_state(queue, "p", {})["password_version"] == 1  # an import
    old = model.conform(queue)  # a state stored before the rotation's arguments existed
    assert (old["password"], old["password_version"], old["password_grace_seconds"]) == (None, 1, 3600)
