"""Every error the API sends is an application/problem+json problem, Starlette's and FastAPI's
own too (404, 405 with Allow, a body that cannot be parsed), and a broker that does not answer
is a 503 with Retry-After, never a 500. A request head past uvicorn's limit is the one answer
the app never sees (a documented limit)."""

from __future__ import annotations

import os
import signal
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.helpers import make_queue, problem

QUEUES = "/v1/projects/default/queues"


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("PUT", f"{QUEUES}/some-queue", "DELETE, GET, PATCH"),
    ("DELETE", QUEUES, "GET, POST"),
    ("PUT", f"{QUEUES}/some-queue/messages", "GET, POST"),
    ("GET", f"{QUEUES}/some-queue/messages/receive", "DELETE, POST"),  # DELETE: "receive" as a {receipt}
    ("POST", f"{QUEUES}/some-queue/redrives/r1", "DELETE, GET"),
])
def test_a_wrong_method_is_a_405_problem_with_every_method_of_the_path_in_allow(http, method, path, allow):
    response = http.request(method, path)
    body = problem(response, 405, "Method Not Allowed")
    assert response.headers["allow"] == allow
    assert body["detail"] == f"{path} does not take {method}; it takes {allow}."


def test_an_unknown_route_is_a_404_problem(http):
    assert problem(http.get("/v1/nowhere"), 404, "Not found")["detail"] == "There is no route /v1/nowhere."
    assert problem(http.post("/nowhere"), 404, "Not found")["detail"] == "There is no route /nowhere."


@pytest.mark.parametrize(("content", "message"), [
    (b'{"name": "\xff\xfe"}', "is not valid JSON (it is not UTF-8 text)"),
    (b"[" * 100_000 + b"]" * 100_000, "is not valid JSON here (it is nested too deeply)"),
    (b'{"name": ', None),  # malformed: FastAPI's own JSON error, a 422 naming body as before
    (b'{"name": ' + b"1" * 5000 + b"}", "is not taken here: a number in it has more than 4300 digits"),
], ids=["not-utf-8", "deeply-nested", "malformed", "long-number"])
def test_a_body_that_cannot_be_parsed_is_a_422_problem_naming_body(http, unique_name, content, message):
    for path in (QUEUES, f"{QUEUES}/{unique_name}/messages"):
        response = http.post(path, content=content, headers={"Content-Type": "application/json"})
        body = problem(response, 422, "Invalid specification")
        assert [e["field"] for e in body["errors"]] == ["body"]
        if message is not None:
            assert body["errors"][0]["message"] == message
            assert body["detail"] == f"body {message}."


@pytest.mark.parametrize(("headers", "detail"), [
    ({"Content-Type": "application/x-www-form-urlencoded"},  # what curl -d sends
     "The request body must be JSON, sent with Content-Type: application/json (got "
     "'application/x-www-form-urlencoded')."),
    ({}, "The request body must be JSON, sent with Content-Type: application/json (got no Content-Type)."),
    ({"Content-Type": "text/plain"}, "The request body must be JSON, sent with Content-Type: application/json "
                                     "(got 'text/plain')."),
    ({"Content-Type": "application/json", "Content-Encoding": "gzip"},
     "Content-Encoding 'gzip' is not accepted: send the JSON body as it is (Content-Encoding: identity, or none)."),
    ({"Content-Type": "application/json; charset=latin-1"},  # it had been read as UTF-8 all the same
     "The request body must be JSON in UTF-8 (got charset 'latin-1')."),
])
def test_a_body_that_is_not_json_as_sent_is_a_415_naming_the_header(http, unique_name, headers, detail):
    for method, path in (("POST", QUEUES), ("POST", f"{QUEUES}/{unique_name}/messages"),
                         ("PATCH", f"{QUEUES}/{unique_name}")):
        response = http.request(method, path, content=b'{"name": "%s"}' % unique_name.encode(), headers=headers)
        assert problem(response, 415, "Unsupported media type")["detail"] == detail
    assert http.get(f"{QUEUES}/{unique_name}").status_code == 404  # nothing was made
    made = http.post(QUEUES, content=b'{"name": "%s"}' % unique_name.encode(),
                     headers={"Content-Type": "application/json; charset=utf-8"})
    assert made.status_code == 201, made.text


def test_two_authorization_headers_are_a_400_whichever_is_right(stack, unique_name):
    right, wrong = f"Bearer {stack.token}", "Bearer not-a-token"
    for first, second in ((right, wrong), (wrong, right)):
        answer = httpx.get(f"{stack.api_url}{QUEUES}", headers=[("Authorization", first), ("Authorization", second)])
        assert "more than one Authorization header" in problem(answer, 400, "Bad request")["detail"]


def test_a_body_over_the_limit_and_a_missing_token_are_problems(stack, http):
    problem(http.post(QUEUES, content=b" " * (1024 * 1024 + 1), headers={"Content-Type": "application/json"}), 413,
            "Request too large")
    problem(httpx.get(stack.api_url + "/openapi.json"), 401, "Unauthorized")


def raw_request(stack, head: bytes, pieces: int = 1) -> bytes:
    """Send a request head in ``pieces`` (as a slow client would) and read what comes back."""
    url = urlsplit(stack.api_url)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        step = -(-len(head) // pieces)
        try:
            for start in range(0, len(head), step):
                sock.sendall(head[start:start + step])
                time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the head was all sent
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if b"\r\n\r\n" in answer and b"connection: close" not in answer.lower():
                break
        return answer


def test_request_heads_up_to_16_kib_reach_the_app_larger_ones_are_a_431_and_past_1_mib_plain_text(stack):
    def head(header_bytes: int) -> bytes:
        return (f"GET {QUEUES}/no-such-queue HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {stack.token}\r\n"
                f"X-Padding: {'a' * header_bytes}\r\n\r\n").encode()

    answer = raw_request(stack, head(12 * 1024), pieces=8)
    assert answer.startswith(b"HTTP/1.1 404 ") and b"application/problem+json" in answer
    answer = raw_request(stack, head(64 * 1024), pieces=64)  # in pieces too: a 431 problem
    assert answer.startswith(b"HTTP/1.1 431 ") and b"application/problem+json" in answer
    answer = raw_request(stack, head(2 * 1024 * 1024), pieces=64)
    # past the 1 MiB the HTTP server reads at all, uvicorn (h11) answers itself: plain text, and
    # the connection closed (docs/api.md, "Request size")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"text/plain" in answer
    assert answer.endswith(b"Invalid HTTP request received.")


SCRAPE_TIMEOUT = 10.0  #: seconds: Prometheus' default scrape timeout


def test_a_broker_that_does_not_answer_is_a_503_problem_with_retry_after(enclave_stack):
    make_queue(enclave_stack, "paused")
    with httpx.Client(base_url=enclave_stack.api_url, timeout=30,
                      headers={"Authorization": f"Bearer {enclave_stack.token}"}) as http:
        assert http.get(f"{QUEUES}/paused/stats").status_code == 200
        os.kill(enclave_stack.broker_pid, signal.SIGSTOP)
        try:
            response = http.get(f"{QUEUES}/paused/stats")
        finally:
            os.kill(enclave_stack.broker_pid, signal.SIGCONT)
        body = problem(response, 503, "Broker unavailable")
        assert response.headers["retry-after"] == "1"
        assert body["detail"] == "The broker did not answer in time; try again shortly."
        deadline = time.monotonic() + 10
        while http.get(f"{QUEUES}/paused/stats").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert http.get(f"{QUEUES}/paused/stats").status_code == 200


def test_a_stopped_broker_is_unavailable_in_healthz_and_metrics_do_not_wait_on_it(enclave_stack):
    """A stopped (or hung) broker keeps its connections open: /healthz used to say ok, and a scrape
    waited for each read's timeout (15 s: past Prometheus' 10 s scrape timeout, so broker_up 0 was
    never recorded). Both now go by whether it answered a PING lately."""
    make_queue(enclave_stack, "paused")
    with httpx.Client(base_url=enclave_stack.api_url, timeout=SCRAPE_TIMEOUT,
                      headers={"Authorization": f"Bearer {enclave_stack.token}"}) as http:
        assert http.get("/healthz").json()["status"] == "ok"
        os.kill(enclave_stack.broker_pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 15
            while http.get("/healthz").status_code == 200 and time.monotonic() < deadline:
                time.sleep(0.2)
            answer = http.get("/healthz")
            assert answer.status_code == 503 and answer.json()["status"] == "unavailable", answer.text
            assert "has not answered" in answer.json()["detail"]
            metrics = http.get("/metrics").text  # within the scrape timeout
            assert "enclave_broker_up 0.0" in metrics
        finally:
            os.kill(enclave_stack.broker_pid, signal.SIGCONT)
        deadline = time.monotonic() + 15
        while http.get("/healthz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert http.get("/healthz").json()["status"] == "ok"
        deadline = time.monotonic() + 10  # a scrape within a second of the last reuses its read
        while "enclave_broker_up 1.0" not in http.get("/metrics").text and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "enclave_broker_up 1.0" in http.get("/metrics").text


@pytest.mark.parametrize("size", [20 * 1024, 64 * 1024, 512 * 1024])
def test_a_request_head_over_16_kib_is_a_431_problem(stack, size):
    for path in ("/v1/projects/default/queues", "/healthz", "/"):  # before the token is looked at
        response = httpx.get(f"{stack.api_url}{path}", headers={"X-Padding": "a" * size})
        body = problem(response, 431, "Request header fields too large")
        assert "at most 16384" in body["detail"]


def test_a_trailing_slash_is_a_404_problem_not_a_redirect_to_any_host(stack):
    headers = {"Authorization": f"Bearer {stack.token}", "Host": "evil.example.com"}
    for method, path in (("GET", "/v1/projects/default/queues/"), ("POST", "/v1/projects/default/queues/")):
        answer = httpx.request(method, stack.api_url + path, headers=headers, json={}, follow_redirects=False)
        assert answer.status_code == 404 and "location" not in answer.headers, (path, answer.status_code)
        assert answer.headers["content-type"] == "application/problem+json"


def test_health_and_metrics_answer_head_as_load_balancers_ask(stack):
    assert httpx.head(stack.api_url + "/healthz").status_code == 200
    assert httpx.head(stack.api_url + "/metrics", headers={"Authorization": f"Bearer {stack.token}"}).status_code == 200
    assert httpx.head(stack.api_url + "/metrics").status_code == 401  # still behind its token
