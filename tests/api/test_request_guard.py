"""The request guard (api/guard.py): the token is checked before any body is read, and bodies
are limited while they stream in, declared or chunked, with a 413 JSON problem."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from enclave_queue.api.guard import BODY_LIMIT, SEND_BODY_LIMIT
from enclave_queue.testing import EnclaveStack
from tests.helpers import make_queue

MiB = 1024 * 1024
BIG = 60 * MiB


def problem(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


def head_only(stack: EnclaveStack, path: str, length: int, token: str | None = None) -> bytes:
    """Send a POST's head declaring ``length`` bytes of body, none of them, and return what the
    server answers before any body arrives (up to its first 64 KiB)."""
    url = urlsplit(stack.api_url)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n{auth}"
                     f"Content-Length: {length}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def chunks(total: int, size: int = MiB) -> Iterator[bytes]:
    """A body without a length: httpx sends it chunked."""
    sent = 0
    while sent < total:
        yield b"a" * min(size, total - sent)
        sent += size


@pytest.fixture
def http(stack):
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=60) as client:
        yield client


def test_an_unauthenticated_60_mb_post_is_refused_before_its_body_is_read(stack):
    control = psutil.Process(stack.pid)
    before = control.memory_info().rss
    # answered from the head alone: not one byte of the body was sent
    answer = head_only(stack, "/v1/projects/default/queues", BIG)
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert b"content-type: application/problem+json" in answer.lower()
    assert b"www-authenticate: bearer" in answer.lower()
    # and with the whole body sent: still 401, and the control process did not take it in
    body = b"[" + b"1," * (BIG // 2) + b"1]"
    response = httpx.post(stack.api_url + "/v1/projects/default/queues", content=body,
                          headers={"Content-Type": "application/json"}, timeout=60)
    problem(response, 401)
    response = httpx.post(stack.api_url + "/v1/projects/default/queues", content=chunks(BIG),
                          headers={"Content-Type": "application/json", "Authorization": "Bearer enq_wrong"},
                          timeout=60)
    problem(response, 401)
    assert control.memory_info().rss - before < 50 * MiB


@pytest.mark.parametrize(("path", "limit"), [
    ("/v1/projects/default/queues", BODY_LIMIT),
    ("/v1/projects/default/queues/no-such-queue/messages", SEND_BODY_LIMIT),
], ids=["create", "send"])
def test_a_declared_length_over_the_limit_is_a_413_before_the_body_is_sent(stack, path, limit):
    answer = head_only(stack, path, limit + 1, stack.token)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"content-type: application/problem+json" in answer.lower()
    assert f"({limit} bytes)".encode() in answer


@pytest.mark.parametrize(("path", "limit"), [
    ("/v1/projects/default/queues", BODY_LIMIT),
    ("/v1/projects/default/queues/no-such-queue/messages", SEND_BODY_LIMIT),
], ids=["create", "send"])
def test_an_oversize_body_is_a_413_problem_declared_or_chunked(http, path, limit):
    declared = http.post(path, content=b" " * (limit + 1), headers={"Content-Type": "application/json"})
    body = problem(declared, 413)
    assert body["title"] == "Request too large"
    assert body["detail"] == f"The request body is larger than this route accepts ({limit} bytes)."
    chunked = http.post(path, content=chunks(limit + 1), headers={"Content-Type": "application/json"})
    assert chunked.request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in chunked.request.headers
    assert problem(chunked, 413) == body


def test_a_body_at_the_limit_is_parsed(http):
    assert problem(http.post("/v1/projects/default/queues", content=b" " * (BODY_LIMIT - 2) + b"{}",
                             headers={"Content-Type": "application/json"}), 422)["errors"][0]["field"] == "name"
    chunked = http.post("/v1/projects/default/queues", content=chunks(BODY_LIMIT - 2), headers={"Content-Type": "application/json"})
    assert chunked.status_code == 422  # read to the end (and not JSON), not refused for its size


def test_the_largest_message_fits_the_send_limit_however_it_is_encoded(stack, http, unique_name):
    make_queue(stack, unique_name, max_message_bytes=MiB)
    path = f"/v1/projects/default/queues/{unique_name}/messages"
    raw = bytes(range(256)) * (MiB // 256)
    as_base64 = http.post(path, json={"body_base64": base64.b64encode(raw).decode()})
    assert as_base64.status_code == 201, as_base64.text
    # a text of control characters: 6 bytes of JSON (\u0001) for each byte of the message
    text = "\x01" * MiB
    request = http.build_request("POST", path, json={"body": text})
    assert len(request.content) > 6 * MiB
    assert http.send(request).status_code == 201
    assert problem(http.post(path, json={"body": text + "x"}), 413)["title"] == "Message too large"


def test_api_answers_are_not_cached_and_no_answer_is_sniffed(stack, http, unique_name):
    """Message bodies (peek, dead letters, export) are one caller's data, as credentials are:
    every /v1/ answer says no-store unless its route says otherwise, and every answer, console
    pages and problems included, says nosniff."""
    make_queue(stack, unique_name)
    base = f"/v1/projects/default/queues/{unique_name}"
    http.post(f"{base}/messages", json={"body": "<html><script>alert(1)</script>"})
    for path in (f"{base}/messages", f"{base}/dead-letters", f"{base}/export", f"{base}/stats",
                 "/v1/projects/default/queues/no-such-queue"):
        answer = http.get(path)
        assert answer.headers["cache-control"] == "no-store", path
        assert answer.headers["x-content-type-options"] == "nosniff", path
    for path in ("/healthz", "/sign-in", "/static/console.css"):
        assert httpx.get(stack.api_url + path).headers["x-content-type-options"] == "nosniff", path


def test_an_encoded_slash_in_a_path_is_refused_not_routed_as_a_separator(stack, http, unique_name):
    # the router decodes %2F first: a queue's path ran its credentials route and a delete by sequence
    make_queue(stack, unique_name)
    http.post(f"/v1/projects/default/queues/{unique_name}/messages", json={"body": "kept"})
    for method, path in (("GET", f"/v1/projects/default/queues/{unique_name}%2Fcredentials"),
                         ("GET", f"/v1/projects/default%2Fqueues%2F{unique_name}%2Fstats"),
                         ("DELETE", f"/v1/projects/default/queues/{unique_name}%2fmessages%2Fsequence%2F1"),
                         ("GET", "/console%2Fqueues")):
        body = problem(http.request(method, httpx.URL(stack.api_url + path)), 400)
        assert "%2F" in body["detail"] and "password" not in body["detail"]
    assert http.get(f"/v1/projects/default/queues/{unique_name}/stats").json()["waiting"] == 1


def test_head_is_answered_as_get_without_a_body(stack, http, unique_name):
    make_queue(stack, unique_name)
    for path in (f"/v1/projects/default/queues/{unique_name}", f"/v1/projects/default/queues/{unique_name}/stats",
                 "/v1/projects/default/queues", "/healthz"):
        got, head = http.get(path), http.head(path)
        assert (head.status_code, head.content) == (200, b""), path
        assert head.headers["content-type"] == got.headers["content-type"], path
    assert http.head("/v1/projects/default/queues/no-such-queue").status_code == 404
    assert httpx.head(f"{stack.api_url}/v1/projects/default/queues").status_code == 401  # a token all the same
