"""The spec refuses every bad setting at the door, naming the field and its rule."""

import pytest

from enclave_queue.errors import SpecError
from enclave_queue.spec import (
    BACKOFF_RULE,
    LIMITS,
    MUTABLE,
    PRIORITIES_RULE,
    Queue,
    QueuePatch,
    QueueSpec,
    check_dedupe_key,
    parse_patch,
    parse_spec,
)


def test_defaults_match_the_settings_reference():
    spec = parse_spec({"name": "emails"})
    assert spec.project == "default"
    assert spec.dead_letter_queue is None
    assert (spec.max_message_bytes, spec.max_receives, spec.retention_hours, spec.visibility_timeout_seconds) == (
        262144, 0, 96, 30)
    assert (spec.max_messages, spec.dedupe_window_seconds) == (0, 3600)  # no limit; the window before it was a setting
    assert spec.priorities is False


def test_the_dedupe_window_may_not_exceed_the_retention_naming_both_fields():
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "emails", "retention_hours": 1, "dedupe_window_seconds": 3601})
    assert str(caught.value) == ("dedupe_window_seconds (3601) must not exceed retention_hours (1 h = 3600 s): "
                                 "a key cannot outlive the messages it guards.")
    assert caught.value.errors[0]["field"] == "dedupe_window_seconds"
    at_most = parse_spec({"name": "emails", "retention_hours": 1, "dedupe_window_seconds": 3600})
    assert at_most.dedupe_window_seconds == 3600
    assert parse_spec({"name": "emails", "retention_hours": 24, "dedupe_window_seconds": 86400}).retention_hours == 24


def test_lowering_the_retention_below_the_dedupe_window_is_refused():
    spec = QueueSpec(name="emails", retention_hours=24, dedupe_window_seconds=86400)
    with pytest.raises(SpecError, match=r"^dedupe_window_seconds \(86400\) must not exceed retention_hours \(23 h"):
        parse_patch({"retention_hours": 23}).apply(spec)
    both = parse_patch({"retention_hours": 2, "dedupe_window_seconds": 60}).apply(spec)
    assert (both.retention_hours, both.dedupe_window_seconds) == (2, 60)


def test_capacity_and_dedupe_window_change_in_place():
    changed = parse_patch({"max_messages": 10, "dedupe_window_seconds": 2}).apply(
        QueueSpec(name="emails", max_messages=3))
    assert (changed.max_messages, changed.dedupe_window_seconds) == (10, 2)
    assert {"max_messages", "dedupe_window_seconds"} <= set(changed.settings())
    with pytest.raises(SpecError, match=r"^max_messages cannot be null; it must be an integer from 0 to 10000000\.$"):
        parse_patch({"max_messages": None}).apply(changed)


@pytest.mark.parametrize("key", ["k", "order-42", "x" * 128, "ünïcödé 🙂", "a b"])
def test_good_dedupe_keys_are_accepted(key):
    assert check_dedupe_key(key) == key


@pytest.mark.parametrize(("key", "got"), [
    ("x" * 129, "129 characters"), ("", "''"), ("a\r\nNats-Expected-Stream: X", "'a\\r\\nNats-Expected-Stream: X'"),
    ("tab\there", "'tab\\there'"), (42, "42"),
    # the broker's clients trim header values: " k" would be the key "k", " " no key at all
    (" order-1", "' order-1'"), ("order-1 ", "'order-1 '"), (" ", "' '"),
])
def test_bad_dedupe_keys_are_refused_with_the_rule(key, got):
    with pytest.raises(SpecError) as caught:
        check_dedupe_key(key)
    rule = "a text of 1 to 128 printable characters, not beginning or ending with a space"
    assert str(caught.value) == f"dedupe_key must be {rule} (got {got})."
    assert caught.value.errors == [{"field": "dedupe_key", "message": f"must be {rule} (got {got})"}]


@pytest.mark.parametrize("field", sorted(LIMITS))
def test_each_setting_accepts_its_bounds(field):
    low, _, high = LIMITS[field]
    assert getattr(parse_spec({"name": "emails", field: low}), field) == low
    assert getattr(parse_spec({"name": "emails", field: high}), field) == high


@pytest.mark.parametrize("field", sorted(LIMITS))
@pytest.mark.parametrize("side", ["below", "above"])
def test_each_setting_just_outside_its_range_is_refused_with_field_and_range(field, side):
    low, _, high = LIMITS[field]
    value = low - 1 if side == "below" else high + 1
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "emails", field: value})
    assert str(caught.value) == f"{field} must be an integer from {low} to {high} (got {value})."
    assert caught.value.errors == [{"field": field, "message": f"must be an integer from {low} to {high} (got {value})"}]


@pytest.mark.parametrize("name", ["ab", "Emails", "1emails", "emails_x", "e" * 41, "-emails", "emails.x", ""])
def test_bad_names_are_refused(name):
    with pytest.raises(SpecError, match=r"^name must be 3–40 lowercase letters, digits or hyphens, starting with a letter"):
        parse_spec({"name": name})


@pytest.mark.parametrize("name", ["abc", "emails", "e" * 40, "a-1-b"])
def test_good_names_are_accepted(name):
    assert parse_spec({"name": name}).name == name


def test_a_queue_cannot_be_its_own_dead_letter_queue():
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "emails", "dead_letter_queue": "emails"})
    assert caught.value.errors[0]["field"] == "dead_letter_queue"
    assert "not the queue itself" in str(caught.value)


def test_unknown_settings_and_missing_name_are_named():
    with pytest.raises(SpecError, match=r"^colour is not a queue setting\.$"):
        parse_spec({"name": "emails", "colour": "blue"})
    with pytest.raises(SpecError, match=r"^name is required\.$"):
        parse_spec({})


def test_several_errors_are_reported_together():
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "x", "retention_hours": 999})
    assert [e["field"] for e in caught.value.errors] == ["name", "retention_hours"]


def test_different_project_is_a_different_queue():
    assert parse_spec({"name": "emails"}).key != parse_spec({"name": "emails", "project": "billing"}).key


def test_patch_changes_only_the_given_fields_and_can_remove_the_dlq():
    spec = QueueSpec(name="emails", dead_letter_queue="emails-dlq", max_receives=3)
    changed = parse_patch({"visibility_timeout_seconds": 60}).apply(spec)
    assert changed.visibility_timeout_seconds == 60
    assert changed.dead_letter_queue == "emails-dlq" and changed.max_receives == 3
    assert parse_patch({"dead_letter_queue": None}).apply(spec).dead_letter_queue is None


def test_patch_refuses_out_of_range_and_null_settings():
    with pytest.raises(SpecError, match="retention_hours must be an integer from 1 to 336"):
        parse_patch({"retention_hours": 0})
    with pytest.raises(SpecError, match="max_receives cannot be null"):
        QueuePatch.model_validate({"max_receives": None}).apply(QueueSpec(name="emails"))
    with pytest.raises(SpecError, match="name is not a queue setting"):
        parse_patch({"name": "other"})


def test_retry_delays_follow_the_schedule_and_repeat_the_last_entry():
    spec = parse_spec({"name": "emails", "retry_backoff_seconds": [5, 30, 120]})
    assert [spec.retry_delay(n) for n in (1, 2, 3, 4, 9)] == [5, 30, 120, 120, 120]
    assert parse_spec({"name": "emails"}).retry_delay(3) == 0


def test_backoff_must_be_shorter_than_max_receives():
    parse_spec({"name": "emails", "max_receives": 4, "retry_backoff_seconds": [1, 2, 3]})
    with pytest.raises(SpecError, match="fewer entries than max_receives"):
        parse_spec({"name": "emails", "max_receives": 3, "retry_backoff_seconds": [1, 2, 3]})


def test_a_limit_cannot_be_set_in_place_on_a_queue_without_one_but_can_change_or_go():
    unlimited = QueueSpec(name="emails")
    with pytest.raises(SpecError) as refused:
        QueuePatch(max_messages=5).apply(unlimited)
    assert refused.value.errors[0]["field"] == "max_messages"
    assert "takes delayed messages" in refused.value.message
    assert QueuePatch(max_messages=0).apply(unlimited).max_messages == 0  # no change: fine
    limited = QueueSpec(name="emails", max_messages=10)
    assert QueuePatch(max_messages=3).apply(limited).max_messages == 3
    assert QueuePatch(max_messages=0).apply(limited).max_messages == 0


def test_priorities_can_be_turned_on_in_place_but_never_off():
    plain = QueueSpec(name="emails")
    assert plain.settings()["priorities"] is False
    on = parse_patch({"priorities": True}).apply(plain)
    assert on.priorities is True
    assert parse_patch({"priorities": True}).apply(on).priorities is True  # on again: no change
    assert parse_patch({"priorities": False}).apply(plain).priorities is False  # off stays off: fine
    with pytest.raises(SpecError) as refused:
        parse_patch({"priorities": False}).apply(on)
    assert str(refused.value) == f"priorities cannot be turned off on queue 'emails': it must be {PRIORITIES_RULE}."
    assert refused.value.errors == [{"field": "priorities", "message": f"must be {PRIORITIES_RULE}"}]
    with pytest.raises(SpecError, match=r"^priorities cannot be null; it must be true or false"):
        parse_patch({"priorities": None}).apply(on)


def test_every_mutable_setting_is_on_the_api_view():
    assert set(MUTABLE) <= set(Queue.model_fields)
    assert Queue.model_fields["priorities"].annotation is bool


@pytest.mark.parametrize(("message_bytes", "default"), [
    (1024, 16 << 20),            # at least 16 MiB
    (262144, 64 << 20),          # the default message size: 256 of them
    (1048576, 256 << 20),        # the largest
])
def test_max_bytes_defaults_to_room_for_256_of_the_largest_messages(message_bytes, default):
    assert parse_spec({"name": "emails", "max_message_bytes": message_bytes}).max_bytes == default


def test_max_bytes_must_hold_one_message_and_stays_when_the_message_size_changes():
    with pytest.raises(SpecError) as refused:
        parse_spec({"name": "emails", "max_message_bytes": 1048576, "max_bytes": 1048576})
    assert refused.value.errors[0]["field"] == "max_bytes" and "1052672" in refused.value.errors[0]["message"]
    spec = parse_spec({"name": "emails", "max_bytes": 8 << 20})
    assert parse_patch({"max_message_bytes": 4096}).apply(spec).max_bytes == 8 << 20


@pytest.mark.parametrize(("field", "value", "got"), [
    ("max_receives", True, "true"),  # a bool is no integer: true would dead-letter after one receive
    ("retention_hours", "30", "'30'"),
    ("retention_hours", 30.0, "30.0"),
    ("visibility_timeout_seconds", None, "null"),
    ("max_bytes", [1], "[1]"),
])
def test_an_integer_setting_takes_a_json_integer_only(field, value, got):
    low, _, high = LIMITS[field]
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "emails", field: value})
    assert caught.value.errors == [{"field": field, "message": f"must be an integer from {low} to {high} (got {got})"}]


@pytest.mark.parametrize(("value", "got"), [("yes", "'yes'"), (1, "1"), ("true", "'true'")])
def test_priorities_take_true_or_false_only(value, got):
    for parse in (lambda: parse_spec({"name": "emails", "priorities": value}),
                  lambda: parse_patch({"priorities": value})):
        with pytest.raises(SpecError) as caught:
            parse()
        assert caught.value.errors == [{"field": "priorities", "message": f"must be {PRIORITIES_RULE} (got {got})"}]


@pytest.mark.parametrize("backoff", [[5, "30"], [5, True], [5.0], "5,30", {"5": 30}])
def test_a_retry_backoff_is_a_json_array_of_integers(backoff):
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "emails", "retry_backoff_seconds": backoff})
    assert [e["field"] for e in caught.value.errors] == ["retry_backoff_seconds"]
    assert caught.value.errors[0]["message"].startswith(f"must be {BACKOFF_RULE} (got ")


def test_a_backoff_as_a_json_array_becomes_the_tuple_and_a_patch_keeps_types_strict():
    assert parse_spec({"name": "emails", "retry_backoff_seconds": [5, 30]}).retry_backoff_seconds == (5, 30)
    with pytest.raises(SpecError, match=r"^retention_hours must be an integer from 1 to 336 \(got '48'\)\.$"):
        parse_patch({"retention_hours": "48"})
    with pytest.raises(SpecError, match=r"^dead_letter_queue must be 3–40 .* \(got 42\)\.$"):
        parse_patch({"dead_letter_queue": 42})
    with pytest.raises(SpecError, match=r"^name must be 3–40 .* \(got true\)\.$"):
        parse_spec({"name": True})
