"""The export and clear routes and the send route's delay_seconds, over HTTP: JSON Lines, counts,
problems that name the field, and the API token like every route."""

import json

import httpx
import pytest

from tests.helpers import make_queue


def path(name, tail=""):
    return f"/v1/projects/default/queues/{name}{tail}"


def test_send_export_and_clear_end_to_end(http, stack, unique_name):
    make_queue(stack, unique_name)
    now = http.post(path(unique_name, "/messages"), json={"body": {"n": 1}})
    later = http.post(path(unique_name, "/messages"), json={"body": "later", "delay_seconds": 600.5})
    assert now.status_code == later.status_code == 201
    assert set(now.json()) == {"sequence", "duplicate"}
    assert set(later.json()) == {"sequence", "duplicate", "delayed_until"}

    exported = http.get(path(unique_name, "/export"))
    assert exported.status_code == 200, exported.text
    assert exported.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [(m["status"], m["body"], m["sequence"]) for m in lines] == [
        ("waiting", {"n": 1}, now.json()["sequence"]), ("delayed", "later", later.json()["sequence"])]
    assert lines[1]["due_at"] == later.json()["delayed_until"]

    cleared = http.post(path(unique_name, "/clear"))
    assert cleared.status_code == 200 and cleared.json() == {"waiting": 1, "delayed": 1, "dead": 0}
    assert http.get(path(unique_name, "/export")).text == ""


@pytest.mark.parametrize("delay", [-1, 604801, "soon"])
def test_a_bad_delay_seconds_is_a_422_naming_it(http, stack, unique_name, delay):
    make_queue(stack, unique_name)
    response = http.post(path(unique_name, "/messages"), json={"body": "x", "delay_seconds": delay})
    assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    assert [e["field"] for e in response.json()["errors"]] == ["delay_seconds"]


def test_a_delay_on_a_queue_with_max_messages_is_a_422_naming_it(http, stack, unique_name):
    make_queue(stack, unique_name, max_messages=10)
    response = http.post(path(unique_name, "/messages"), json={"body": "x", "delay_seconds": 5})
    assert response.status_code == 422 and "max_messages" in response.json()["detail"]
    assert response.json()["errors"][0]["field"] == "delay_seconds"


@pytest.mark.parametrize(("method", "tail"), [("GET", "/export"), ("POST", "/clear")])
def test_export_and_clear_need_the_token_and_an_existing_queue(http, stack, method, tail):
    anonymous = httpx.request(method, stack.api_url + path("emails", tail))
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    missing = http.request(method, path("no-such-queue", tail))
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    assert missing.json()["detail"] == "Queue 'no-such-queue' does not exist in project 'default'."
