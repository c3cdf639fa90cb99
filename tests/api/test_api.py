"""The HTTP API: tokens on every route but /healthz, JSON problems that name the field, and
nothing half-created after a refused request."""

import threading
import time

import httpx
import pytest

from enclave_queue.server.app import create_app
from enclave_queue.spec import LIMITS, PRIORITIES_RULE
from enclave_queue.web.paths import endpoints
from tests.helpers import ANY_METHOD, SIGNED_ROUTES, make_queue

#: a valid value for every path parameter (the path rules pass; the token check comes first)
PARTS = {"project": "default", "name": "emails", "secret": "emails-password", "receipt": "abc", "seq": "1",
         "task_id": "r00000000", "tab": "settings"}
#: what answers without any credential: health, and the sign-in form (how a token becomes a session;
#: its own form token: tests/console/test_csrf_routes.py)
OPEN = {"/healthz", "/sign-in"}


def is_api(path: str) -> bool:
    """Routes for programs, which take a bearer token (/metrics also its own metrics token)."""
    return path.startswith("/v1/") or path in ("/openapi.json", "/metrics")


def every_route() -> list[tuple[str, str]]:
    """(method, path template) of every route of the app's own route table, HEAD aside; a route
    that lists no methods takes any, and is tried with ANY_METHOD."""
    return [(method, route.path) for route in endpoints(create_app(None).routes)
            for method in sorted(set(route.methods or ANY_METHOD) - {"HEAD"})]


ALL = every_route()
#: every route but the open ones: a route added without the token (or session) check fails below
ROUTES = [(method, path.format(**PARTS)) for method, path in ALL
          if path not in OPEN | SIGNED_ROUTES and is_api(path)]
PAGES = [(method, path.format(**PARTS)) for method, path in ALL
         if path not in OPEN | SIGNED_ROUTES and not is_api(path)]
SIGNED = [(method, path) for method, path in ALL if path in SIGNED_ROUTES]


def test_the_route_table_is_read_whole():
    assert len(ROUTES) + len(PAGES) + len(SIGNED) + sum(path in OPEN for _, path in ALL) == len(ALL)
    paths = {path for _, path in ROUTES}
    assert {"/v1/projects/default/queues", "/v1/projects/default/queues/emails/dead-letters",
            "/v1/projects/default/queues/emails/dead-letters/1", "/v1/projects/default/queues/emails/redrives",
            "/openapi.json", "/metrics"} <= paths
    assert {"/", "/sign-out", "/projects/default/queues/emails/settings"} <= {path for _, path in PAGES}
    assert {path for _, path in ALL if path in OPEN} == OPEN  # no open path left the table unnoticed


def test_healthz_needs_no_token(stack):
    response = httpx.get(stack.api_url + "/healthz")
    assert response.status_code == 200 and response.json()["status"] == "ok"


@pytest.mark.parametrize(("method", "path"), ROUTES)
@pytest.mark.parametrize("token", [None, "enq_wrong", "Basic abc"], ids=["missing", "wrong", "not-bearer"])
def test_every_other_route_needs_a_valid_token(stack, method, path, token):
    headers = {} if token is None else {"Authorization": token if " " in token else f"Bearer {token}"}
    response = httpx.request(method, stack.api_url + path, headers=headers, json={})
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["status"] == 401


@pytest.mark.parametrize(("method", "path"), SIGNED)
@pytest.mark.parametrize("credential", ["none", "bearer"])
def test_a_route_with_its_own_signature_refuses_a_request_without_one(stack, method, path, credential):
    """The API token is no signature: unsigned, the SQS endpoint answers with its own refusal."""
    headers = {"Authorization": f"Bearer {stack.token}"} if credential == "bearer" else {}
    response = httpx.request(method, stack.api_url + path, headers=headers, data={"Action": "ListQueues"})
    assert response.status_code in (400, 403), (method, path, response.status_code)
    assert "<Error>" in response.text and "<QueueUrl>" not in response.text


@pytest.mark.parametrize(("method", "path"), PAGES)
@pytest.mark.parametrize("credential", ["none", "bearer", "forged-session"])
def test_every_console_route_needs_a_session_and_sends_to_sign_in(stack, method, path, credential):
    """The console's pages and forms take a session (made at sign-in), not the API token: without
    one, every page and form sends the browser to sign in and does nothing."""
    headers = {"Authorization": f"Bearer {stack.token}"} if credential == "bearer" else {}
    if credential == "forged-session":
        headers["Cookie"] = "enclave_session=forged"
    response = httpx.request(method, stack.api_url + path, headers=headers,
                             data=None if method == "GET" else {"name": "page-made"})
    assert response.status_code == 303, (method, path, response.status_code)
    assert response.headers["location"] == f"/sign-in?next={path}"
    if method != "GET":
        with stack.admin() as admin:
            assert "page-made" not in {q["name"] for q in admin.list_queues("default")}


def problem(response, status):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def names(http):
    return {q["name"] for q in http.get("/v1/projects/default/queues").json()}


@pytest.mark.parametrize("field", sorted(LIMITS))
def test_each_setting_just_outside_its_range_is_a_422_naming_it_and_creates_nothing(http, unique_name, field):
    low, _, high = LIMITS[field]
    for value in (low - 1, high + 1):
        body = problem(http.post("/v1/projects/default/queues", json={"name": unique_name, field: value}), 422)
        assert body["detail"] == f"{field} must be an integer from {low} to {high} (got {value})."
        assert body["errors"] == [{"field": field, "message": f"must be an integer from {low} to {high} (got {value})"}]
    assert unique_name not in names(http)


def test_bad_name_taken_name_and_dead_letter_queue_rules(stack, http, unique_name):
    body = problem(http.post("/v1/projects/default/queues", json={"name": "Bad_Name"}), 422)
    assert body["errors"][0]["field"] == "name"
    make_queue(stack, unique_name)
    body = problem(http.post("/v1/projects/default/queues", json={"name": unique_name}), 409)
    assert body["detail"] == f"Queue '{unique_name}' already exists in project 'default'."
    body = problem(http.post("/v1/projects/default/queues",
                             json={"name": f"{unique_name}-x", "dead_letter_queue": "no-such-queue"}), 422)
    assert body["errors"] == [{"field": "dead_letter_queue",
                               "message": "names queue 'no-such-queue', which does not exist in project 'default'"}]
    body = problem(http.post("/v1/projects/default/queues",
                             json={"name": f"{unique_name}-y", "dead_letter_queue": f"{unique_name}-y"}), 422)
    assert body["errors"][0]["field"] == "dead_letter_queue"
    # a DLQ in another project does not count
    body = problem(http.post("/v1/projects/other/queues",
                             json={"name": f"{unique_name}-z", "dead_letter_queue": unique_name}), 422)
    assert "does not exist in project 'other'" in body["detail"]
    assert {f"{unique_name}-x", f"{unique_name}-y"}.isdisjoint(names(http))


def test_a_queue_used_as_a_dead_letter_queue_cannot_be_deleted(stack, http, unique_name):
    make_queue(stack, f"{unique_name}-dlq")
    make_queue(stack, unique_name, dead_letter_queue=f"{unique_name}-dlq")
    body = problem(http.delete(f"/v1/projects/default/queues/{unique_name}-dlq"), 409)
    assert f"dead-letter queue of queue '{unique_name}'" in body["detail"]
    assert http.patch(f"/v1/projects/default/queues/{unique_name}", json={"dead_letter_queue": None}).status_code == 200
    assert http.delete(f"/v1/projects/default/queues/{unique_name}-dlq").status_code == 202


def test_unknown_queue_and_secret_are_404(http):
    body = problem(http.get("/v1/projects/default/queues/no-such-queue"), 404)
    assert body["detail"] == "Queue 'no-such-queue' does not exist in project 'default'."
    problem(http.get("/v1/projects/default/secrets/no-such-queue-password"), 404)
    problem(http.get("/v1/projects/default/secrets/anything"), 404)
    problem(http.get("/v1/nowhere"), 404)


def test_patch_refuses_renames_and_bad_values(stack, http, unique_name):
    make_queue(stack, unique_name)
    body = problem(http.patch(f"/v1/projects/default/queues/{unique_name}", json={"name": "other"}), 422)
    assert body["detail"] == "name cannot be changed; create a new queue instead."
    problem(http.patch(f"/v1/projects/default/queues/{unique_name}", json={"retention_hours": 337}), 422)
    assert http.get(f"/v1/projects/default/queues/{unique_name}").json()["retention_hours"] == 96


def test_priorities_turn_on_in_place_but_never_off(stack, http, unique_name):
    created = http.post("/v1/projects/default/queues", json={"name": unique_name, "priorities": True})
    assert created.status_code == 201 and created.json()["priorities"] is True
    body = problem(http.patch(f"/v1/projects/default/queues/{unique_name}", json={"priorities": False}), 422)
    assert body["errors"] == [{"field": "priorities", "message": f"must be {PRIORITIES_RULE}"}]
    assert http.get(f"/v1/projects/default/queues/{unique_name}").json()["priorities"] is True

    make_queue(stack, f"{unique_name}-b")
    later = http.patch(f"/v1/projects/default/queues/{unique_name}-b", json={"priorities": True})
    assert later.status_code == 200 and later.json()["priorities"] is True


def test_queue_object_keys_are_exactly_the_opentofu_attributes(stack, http, unique_name):
    make_queue(stack, unique_name)
    queue = http.get(f"/v1/projects/default/queues/{unique_name}").json()
    assert set(queue) == {"broker_url", "dead_letter_queue", "dedupe_window_seconds", "id", "internal_broker_url",
                          "max_bytes", "max_message_bytes", "max_messages", "max_receives", "name", "password_secret",
                          "priorities", "project", "replicas", "retention_hours", "retry_backoff_seconds", "subject",
                          "username", "visibility_timeout_seconds"}
    assert queue["broker_url"] == stack.broker_url
    assert queue["internal_broker_url"] == "nats://es-system-broker:4222"
    secret = http.get(f"/v1/projects/default/secrets/{queue['password_secret']}")
    assert secret.headers["cache-control"] == "no-store"
    creds = http.get(f"/v1/projects/default/queues/{unique_name}/credentials").json()
    assert set(creds) == {"broker_url", "broker_urls", "username", "password", "subject", "inbox_prefix", "stream",
                          "consumer", "password_version", "previous_password_valid_until"}
    assert (queue["replicas"], creds["broker_urls"]) == (1, [stack.broker_url])  # one node
    assert (creds["password_version"], creds["previous_password_valid_until"]) == (1, None)  # never rotated
    assert secret.json()["value"] == creds["password"] and len(creds["password"]) >= 32


def test_messages_by_hand_send_receive_delete(stack, http, unique_name):
    make_queue(stack, unique_name, visibility_timeout_seconds=1)
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    assert http.post(base, json={"body": {"to": "a@b.c"}}).status_code == 201
    (message,) = http.post(f"{base}/receive", json={"max": 5, "wait": 1}).json()["messages"]
    assert message["body"] == '{"to":"a@b.c"}' and message["content_type"] == "application/json"
    assert message["receive_count"] == 1
    (again,) = http.post(f"{base}/receive", json={"max": 1, "wait": 3}).json()["messages"]
    assert again["sequence"] == message["sequence"] and again["receive_count"] == 2
    assert http.delete(f"{base}/{again['receipt']}").status_code == 204
    assert http.post(f"{base}/receive", json={"max": 1, "wait": 1.5}).json()["messages"] == []


def test_bad_message_input_is_refused_and_loses_nothing(stack, http, unique_name):
    make_queue(stack, unique_name, max_message_bytes=1024)
    make_queue(stack, f"{unique_name}-b")
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    body = problem(http.post(base, json={"body": "x" * 1025}), 413)
    assert "1025 bytes" in body["detail"] and "at most 1024" in body["detail"]
    problem(http.post(base, json={}), 422)
    problem(http.post(base, json={"body_base64": "!!"}), 422)
    problem(http.post(f"{base}/receive", json={"max": 0}), 422)
    problem(http.post(f"{base}/receive", json={"max": 101}), 422)
    problem(http.post(f"{base}/receive", json={"wait": 21}), 422)
    assert http.post(base, json={"body": "keep me"}).status_code == 201
    (message,) = http.post(f"{base}/receive", json={"max": 1, "wait": 1}).json()["messages"]
    body = problem(http.delete(f"{base}/not-a-receipt"), 422)
    assert body["errors"][0]["field"] == "receipt"
    # a receipt of one queue is refused by another
    other = f"/v1/projects/default/queues/{unique_name}-b/messages"
    problem(http.delete(f"{other}/{message['receipt']}"), 422)
    assert http.delete(f"{base}/{message['receipt']}").status_code == 204


def test_a_receive_waiting_on_a_queue_that_is_deleted_ends_as_not_found(stack, unique_name):
    """Not a 503 "broker unavailable" (nobody answers for a deleted queue's consumer): the queue is gone."""
    make_queue(stack, unique_name)
    outcome: dict[str, httpx.Response] = {}

    def receive() -> None:
        with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"},
                          timeout=30) as client:
            outcome["answer"] = client.post(f"/v1/projects/default/queues/{unique_name}/messages/receive",
                                            json={"max": 1, "wait": 10})

    waiting = threading.Thread(target=receive)
    waiting.start()
    time.sleep(1)
    with stack.admin() as admin:
        admin.delete_queue("default", unique_name)
    waiting.join(30)
    answer = outcome["answer"]
    assert answer.status_code == 404 or (answer.status_code == 200 and answer.json()["messages"] == []), answer.text


def test_a_string_body_with_a_content_type_is_stored_as_typed(stack, http, unique_name):
    """JSON given as text is stored as it is (a JSON value is re-encoded, which cannot keep a
    number past 2^53 exact, nor a repeated key); a JSON content type needs JSON text."""
    make_queue(stack, unique_name)
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    typed = '{"id": 9007199254740993, "id": 2}'
    assert http.post(base, json={"body": typed, "content_type": "application/json"}).status_code == 201
    assert http.post(base, json={"body": "a,b\n1,2", "content_type": "text/csv; charset=utf-8"}).status_code == 201
    (first, second) = http.get(base, params={"limit": 10}).json()["messages"]
    assert (first["body"], first["content_type"]) == (typed, "application/json")
    assert (second["body"], second["content_type"]) == ("a,b\n1,2", "text/csv; charset=utf-8")
    for request, field in (({"body": "{not json", "content_type": "application/json"}, "body"),
                           ({"body": "NaN", "content_type": "application/problem+json"}, "body"),
                           ({"body": {"a": 1}, "content_type": "application/json"}, "content_type"),
                           ({"body_base64": "AAE=", "content_type": "text/plain"}, "content_type"),
                           ({"body": "x", "content_type": "text/plain\r\nX-Injected: 1"}, "content_type"),
                           ({"body": "x", "content_type": "not a type"}, "content_type"),
                           ({"body": "x", "content_type": "a/" + "b" * 300}, "content_type")):
        answer = http.post(base, json=request)
        assert answer.status_code == 422, (request, answer.text)
        assert field in answer.json()["detail"], (request, answer.text)
    assert len(http.get(base, params={"limit": 10}).json()["messages"]) == 2  # nothing stored


def test_malformed_json_and_an_empty_receive_body(stack, http, unique_name):
    make_queue(stack, unique_name)
    response = http.post("/v1/projects/default/queues", content=b'{"name": ', headers={"content-type": "application/json"})
    body = problem(response, 422)
    assert body["detail"].startswith("body is not valid JSON")
    response = http.post(f"/v1/projects/default/queues/{unique_name}/messages/receive")
    assert response.status_code == 200 and response.json() == {"messages": []}
    body = problem(http.post(f"/v1/projects/default/queues/{unique_name}/messages/receive", json={"max": 500}), 422)
    assert body["detail"] == "max must be an integer from 1 to 100 (got 500)."


def test_a_receipt_expires_with_its_visibility_timeout(stack, http, unique_name):
    import time
    from datetime import UTC, datetime

    make_queue(stack, unique_name, visibility_timeout_seconds=1)
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    http.post(base, json={"body": "late"})
    (message,) = http.post(f"{base}/receive", json={"wait": 1}).json()["messages"]
    # the point is the lease running out: wait until the end the receive answered has passed
    lease_end = datetime.fromisoformat(message["visible_again_at"])
    while (left := (lease_end - datetime.now(UTC)).total_seconds()) >= 0:
        time.sleep(left + 0.001)
    body = problem(http.delete(f"{base}/{message['receipt']}"), 409)
    assert body["detail"].startswith("The receipt expired at ")
    (again,) = http.post(f"{base}/receive", json={"wait": 10}).json()["messages"]
    assert again["receive_count"] == 2
    assert http.delete(f"{base}/{again['receipt']}").status_code == 204


def test_a_nacked_receipt_is_spent_and_cannot_touch_the_next_receive(stack, http, unique_name):
    # the broker settles by stream sequence: the old receipt's delete would delete the message the
    # next worker holds, its nack would hand that worker's message to a third
    make_queue(stack, unique_name, visibility_timeout_seconds=30)
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    http.post(base, json={"body": "one"})
    (first,) = http.post(f"{base}/receive", json={"wait": 1}).json()["messages"]
    assert http.post(f"{base}/{first['receipt']}/nack").status_code == 204
    (second,) = http.post(f"{base}/receive", json={"wait": 5}).json()["messages"]
    assert (second["sequence"], second["receive_count"]) == (first["sequence"], 2)
    for stale in (http.delete(f"{base}/{first['receipt']}"), http.post(f"{base}/{first['receipt']}/nack")):
        assert "handed back" in problem(stale, 409)["detail"]
    assert http.post(f"{base}/receive", json={"wait": 0.5}).json()["messages"] == []  # still the second's
    assert http.delete(f"{base}/{second['receipt']}").status_code == 204
    stats = http.get(f"/v1/projects/default/queues/{unique_name}/stats").json()
    assert (stats["waiting"], stats["in_flight"]) == (0, 0)


def test_keys_and_header_values_the_broker_would_trim_are_refused(stack, http, unique_name):
    make_queue(stack, unique_name)
    base = f"/v1/projects/default/queues/{unique_name}/messages"
    assert http.post(base, json={"body": "first", "dedupe_key": "order-1"}).status_code == 201
    for key in (" order-1", "order-1 ", " "):  # " order-1" had been taken as order-1's duplicate, " " as no key
        body = problem(http.post(base, json={"body": "other", "dedupe_key": key}), 422)
        assert body["errors"][0]["field"] == "dedupe_key" and "space" in body["errors"][0]["message"]
    for value in ("  abc  ", "abc ", " "):  # they came back as "abc" and ""
        body = problem(http.post(base, json={"body": "other", "headers": {"X-A": value}}), 422)
        assert body["errors"][0]["field"] == "headers" and "space" in body["errors"][0]["message"]
    assert http.post(base, json={"body": "kept", "headers": {"X-A": "a b"}}).status_code == 201
    messages = http.post(f"{base}/receive", json={"max": 10, "wait": 1}).json()["messages"]
    assert [(m["body"], m["headers"]) for m in messages] == [("first", {}), ("kept", {"X-A": "a b"})]


def test_a_body_project_of_another_json_type_is_shown_as_json(stack, http, unique_name):
    for given, shown in ((None, "(null)"), (True, "(true)"), (5, "(5)"), ({"a": 1}, "(an object)"), ("other", "('other')")):
        body = problem(http.post("/v1/projects/default/queues", json={"name": unique_name, "project": given}), 422)
        assert body["errors"][0]["field"] == "project" and shown in body["detail"] and "None" not in body["detail"]
    assert http.get(f"/v1/projects/default/queues/{unique_name}").status_code == 404
