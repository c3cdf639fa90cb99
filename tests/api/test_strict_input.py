"""Every bad input is a clear 4xx, never a 5xx (issue 12): JSON types are strict everywhere the
API takes JSON (no `true` for 1, no "30" or 30.0 for 30, no "yes" for true), each refusal names
its field and the rule of the route that was asked, and inputs that used to crash a route (a
redrive's `to`, non-ASCII base64, lone surrogates, NaN) are 422 problems naming the field."""

from __future__ import annotations

import httpx
import pytest

from enclave_queue.spec import BACKOFF_RULE, LIMITS, NAME_RULE, PRIORITIES_RULE
from tests.helpers import make_queue, problem

QUEUES = "/v1/projects/default/queues"


def refused(response: httpx.Response, field: str, message: str) -> None:
    """A 422 whose one error names ``field`` with ``message``, and whose detail says the same."""
    body = problem(response, 422, "Invalid specification")
    assert body["errors"] == [{"field": field, "message": message}]
    assert body["detail"] == f"{field} {message}."


def names(http: httpx.Client) -> set[str]:
    return {q["name"] for q in http.get(QUEUES).json()}


@pytest.mark.parametrize(("field", "value", "got"), [
    ("max_receives", True, "true"),  # was taken as 1: every message dead-lettered after one receive
    ("retention_hours", "30", "'30'"),
    ("retention_hours", 30.0, "30.0"),
    ("visibility_timeout_seconds", False, "false"),
    ("max_messages", [5], "[5]"),
], ids=["true", "string", "float", "false", "list"])
def test_a_number_setting_takes_a_json_integer_only_on_create_and_patch(stack, http, unique_name, field, value, got):
    low, _, high = LIMITS[field]
    rule = f"must be an integer from {low} to {high} (got {got})"
    refused(http.post(QUEUES, json={"name": unique_name, field: value}), field, rule)
    assert unique_name not in names(http)
    make_queue(stack, unique_name)
    refused(http.patch(f"{QUEUES}/{unique_name}", json={field: value}), field, rule)
    assert http.get(f"{QUEUES}/{unique_name}").json()[field] == LIMITS[field][1]


@pytest.mark.parametrize(("value", "got"), [("yes", "'yes'"), (1, "1"), ("true", "'true'")])
def test_priorities_take_true_or_false_only(http, unique_name, value, got):
    refused(http.post(QUEUES, json={"name": unique_name, "priorities": value}), "priorities",
            f"must be {PRIORITIES_RULE} (got {got})")
    assert unique_name not in names(http)


@pytest.mark.parametrize("backoff", [[5, "30"], [5, True], [5, 30.0], "5,30"])
def test_a_retry_backoff_is_a_json_array_of_integers(http, unique_name, backoff):
    body = problem(http.post(QUEUES, json={"name": unique_name, "retry_backoff_seconds": backoff}), 422,
                   "Invalid specification")
    assert [e["field"] for e in body["errors"]] == ["retry_backoff_seconds"]
    assert body["errors"][0]["message"].startswith(f"must be {BACKOFF_RULE} (got ")
    assert unique_name not in names(http)


def test_the_names_of_a_spec_are_strings(http, unique_name):
    refused(http.post(QUEUES, json={"name": 123}), "name", f"must be {NAME_RULE} (got 123)")
    refused(http.post(QUEUES, json={"name": unique_name, "dead_letter_queue": True}), "dead_letter_queue",
            f"must be {NAME_RULE} (got true)")


@pytest.fixture
def queue(stack, unique_name) -> str:
    make_queue(stack, unique_name)
    return f"{QUEUES}/{unique_name}"


@pytest.mark.parametrize(("path", "body", "field", "message"), [
    ("/messages/receive", {"max": "5"}, "max", "must be an integer from 1 to 100 (got '5')"),
    ("/messages/receive", {"max": True}, "max", "must be an integer from 1 to 100 (got true)"),
    ("/messages/receive", {"max": 5.0}, "max", "must be an integer from 1 to 100 (got 5.0)"),
    ("/messages/receive", {"wait": "1"}, "wait", "must be a number of seconds from 0 to 20 (got '1')"),
    ("/messages/receive", {"wait": False}, "wait", "must be a number of seconds from 0 to 20 (got false)"),
    ("/messages", {"body": "x", "delay_seconds": "5"}, "delay_seconds",
     "must be a number of seconds from 0 to 604800 (7 days) (got '5')"),
    ("/messages", {"body": "x", "dedupe_key": 42}, "dedupe_key",
     "must be a text of 1 to 128 printable characters, not beginning or ending with a space (got 42)"),
    ("/messages", {"body_base64": 42}, "body_base64",
     "must be standard base64 text (A–Z, a–z, 0–9, '+', '/', '=' padding) (got 42)"),
    ("/redrives", {"dry_run": "yes"}, "dry_run", "must be true or false (got 'yes')"),
    ("/redrives", {"max": "10"}, "max", "must be an integer of 1 or more (got '10')"),
    ("/redrives", {"max": 0}, "max", "must be an integer of 1 or more (got 0)"),
    ("/redrives", {"rate": True}, "rate",
     "must be a number of letters per second, more than 0 and at most 100000 (got true)"),
    ("/redrives", {"filter_error": 5}, "filter_error", "must be a text of 1 to 1024 characters (got 5)"),
], ids=lambda value: str(value) if not isinstance(value, dict) else "-".join(f"{k}={v!r}" for k, v in value.items()))
def test_every_message_and_redrive_field_is_strict_and_named_with_its_own_rule(http, queue, path, body, field, message):
    refused(http.post(queue + path, json=body), field, message)


def test_a_nack_delay_is_a_number(http, queue):
    http.post(f"{queue}/messages", json={"body": "x"})
    (message,) = http.post(f"{queue}/messages/receive", json={"wait": 2}).json()["messages"]
    refused(http.post(f"{queue}/messages/{message['receipt']}/nack", json={"delay": "5"}), "delay",
            "must be a number of seconds from 0 to 43200 (got '5')")
    assert http.post(f"{queue}/messages/{message['receipt']}/nack", json={"delay": 0}).status_code == 204


@pytest.mark.parametrize("to", ["", "a b", "*", "ü", "Upper", "q\n"])
def test_a_redrive_to_that_breaks_the_queue_name_rule_is_a_422_naming_to(http, queue, to):
    refused(http.post(f"{queue}/redrives", json={"to": to}), "to", f"must be {NAME_RULE} (got {to!r})")


@pytest.mark.parametrize("text", ["ü", "AAEC/w==ü", "\u00e9t\u00e9"])
def test_base64_with_a_character_outside_ascii_is_a_422_naming_body_base64(http, queue, text):
    refused(http.post(f"{queue}/messages", json={"body_base64": text}), "body_base64",
            "must be standard base64 text (A–Z, a–z, 0–9, '+', '/', '=' padding)")


@pytest.mark.parametrize("body", [None, "x", 0])
def test_a_body_with_body_base64_is_a_422_even_a_null_one(http, queue, body):
    # a null body is the JSON value null (sent alone, it is stored): with body_base64 there are two
    answer = problem(http.post(f"{queue}/messages", json={"body": body, "body_base64": "AA=="}), 422,
                     "Invalid specification")
    assert answer["errors"] == [{"field": "body_base64", "message": "cannot be given with body"}]


def test_json_that_cannot_be_stored_or_repeated_is_a_422_naming_its_field(http, queue):
    json_body = {"Content-Type": "application/json"}
    refused(http.post(f"{queue}/messages", content=b'{"body": "\\ud800"}', headers=json_body), "body",
            "must be text that UTF-8 can encode (it holds a lone surrogate); send bytes as body_base64")
    refused(http.post(f"{queue}/messages", content=b'{"body": NaN}', headers=json_body), "body",
            "must be a JSON value that can be stored as JSON (not nested too deeply, no lone surrogates)")
    refused(http.post(f"{queue}/messages/receive", content=b'{"wait": Infinity}', headers=json_body), "wait",
            "must be a number of seconds from 0 to 20 (got inf)")
    refused(http.post(f"{queue}/redrives", content=b'{"to": "abc", "filter_error": "\\ud800"}', headers=json_body),
            "filter_error", "must be a text of 1 to 1024 characters (got '\\ud800')")
    assert http.get(f"{queue}/stats").json()["waiting"] == 0


def test_peek_and_list_limits_say_their_own_ranges(http, queue):
    refused(http.get(f"{queue}/messages", params={"limit": 500}), "limit", "must be an integer from 1 to 100 (got '500')")
    refused(http.get(f"{queue}/messages", params={"limit": "abc"}), "limit",
            "must be an integer from 1 to 100 (got 'abc')")
    refused(http.get(f"{queue}/dead-letters", params={"limit": "abc"}), "limit",
            "must be an integer from 1 to 500 (got 'abc')")
    assert http.get(f"{queue}/dead-letters", params={"limit": 500}).status_code == 200
    assert http.get(f"{queue}/messages", params={"limit": 100}).status_code == 200


def test_a_redrive_max_has_no_upper_bound(http, stack, queue, unique_name):
    make_queue(stack, f"{unique_name}-to")
    task = http.post(f"{queue}/redrives", json={"to": f"{unique_name}-to", "max": 1000, "dry_run": True})
    assert task.status_code == 202, task.text
    assert task.json()["max"] == 1000


def test_a_key_named_twice_is_refused_not_the_last_one_taken(stack, http, unique_name):
    """``json.loads`` keeps the last of a repeated key: what was sent was not what was read."""
    make_queue(stack, unique_name)
    json_type = {"Content-Type": "application/json"}
    for path, body in (("/v1/projects/default/queues", f'{{"name": "{unique_name}-a", "name": "{unique_name}-b"}}'),
                       (f"/v1/projects/default/queues/{unique_name}/messages", '{"body": "a", "body": "b"}'),
                       (f"/v1/projects/default/queues/{unique_name}/messages",
                        '{"body": "a", "headers": {"X-A": "1", "X-A": "2"}}'),
                       ("/v1/access-keys", '{"project": "default", "project": "other"}')):
        answer = http.post(path, content=body, headers=json_type)
        assert answer.status_code == 422, (path, answer.text)
        assert "names the key" in answer.json()["detail"] and "twice" in answer.json()["detail"]
    assert http.get(f"/v1/projects/default/queues/{unique_name}-b").status_code == 404
    assert http.get(f"/v1/projects/default/queues/{unique_name}/stats").json()["sent"] == 0


@pytest.mark.parametrize("written", ["1_0", "%2B5", "%205", "5%20", "\u0665", "0x5", "5.0"])
def test_a_query_number_is_written_in_digits(stack, http, unique_name, written):
    """Python and pydantic read ``1_0`` as 10 (and ``+5``, `` 5``, other scripts' digits): a path's
    numbers never were, and a query's are not now."""
    make_queue(stack, unique_name)
    answer = http.get(f"/v1/projects/default/queues/{unique_name}/messages?limit={written}")
    body = problem(answer, 422, "Invalid specification")
    assert body["errors"][0]["field"] == "limit"
    assert http.get(f"/v1/projects/default/queues/{unique_name}/status?wait_seconds=1e1").status_code == 422


@pytest.mark.parametrize(("query", "field", "message"), [
    ("limit=1&limit=500", "limit", "is given more than once in the query string"),
    ("limt=5", "limt", "is not a query parameter of this route (it takes limit)"),
    ("limit=5&source=x", "source", "is not a query parameter of this route (it takes limit)"),
], ids=["repeated", "typo", "another-routes"])
def test_a_query_string_names_the_routes_own_parameters_each_once(http, unique_name, stack, query, field, message):
    """``?limit=1&limit=500`` was read as its last value and an unknown key was ignored: what a
    proxy's rule or a log line showed of the request was not what ran."""
    make_queue(stack, unique_name)
    http.post(f"{QUEUES}/{unique_name}/messages", json={"body": "kept"})
    body = problem(http.get(f"{QUEUES}/{unique_name}/messages?{query}"), 422, "Invalid specification")
    assert body["errors"] == [{"field": field, "message": message}]
    assert field in body["detail"]
    assert [m["body"] for m in http.get(f"{QUEUES}/{unique_name}/messages?limit=5").json()["messages"]] == ["kept"]
    problem(http.get(f"{QUEUES}?project=default"), 422, "Invalid specification")  # the list takes none
