"""The console's forms post text; ``settings_from_form`` makes the spec's JSON types of it
(the spec is strict), and text that is no number stays text, refused naming its field."""

import pytest

from enclave_queue.console.routes import as_typed, settings_from_form
from enclave_queue.errors import SpecError
from enclave_queue.spec import parse_patch, parse_spec


def test_numbers_become_integers_and_the_checkbox_a_flag():
    data = settings_from_form({"retention_hours": " 48 ", "max_receives": "", "retry_backoff_seconds": "5, 30 120",
                               "dead_letter_queue": " ", "priorities": "true"})
    assert data == {"retention_hours": 48, "retry_backoff_seconds": [5, 30, 120], "dead_letter_queue": None,
                    "priorities": True}
    spec = parse_spec({"name": "emails", **data})
    assert (spec.retention_hours, spec.retry_backoff_seconds, spec.priorities) == (48, (5, 30, 120), True)


@pytest.mark.parametrize(("field", "text"), [("retention_hours", "abc"), ("visibility_timeout_seconds", "1.5"),
                                             ("max_receives", "٣"), ("max_bytes", "9" * 20)])
def test_text_that_is_no_whole_number_is_refused_naming_the_form_field(field, text):
    with pytest.raises(SpecError) as caught:
        parse_patch(settings_from_form({field: text}))
    assert [e["field"] for e in caught.value.errors] == [field]
    assert caught.value.errors[0]["message"].endswith(f"(got {text!r})")


def test_a_backoff_step_that_is_no_number_is_refused_naming_the_backoff():
    with pytest.raises(SpecError) as caught:
        parse_patch(settings_from_form({"retry_backoff_seconds": "5, x"}))
    assert [e["field"] for e in caught.value.errors] == ["retry_backoff_seconds"]


def test_a_refused_number_is_shown_as_it_was_typed():
    form = {"retention_hours": "999"}
    with pytest.raises(SpecError) as caught:
        parse_patch(settings_from_form(form))
    assert as_typed(caught.value.errors[0]["message"], form) == "must be an integer from 1 to 336 (got '999')"
