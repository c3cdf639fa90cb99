"""Every route's path parameters are checked by the rules of create (web/paths.py): hostile
path parts never reach the state store, never answer 5xx, and always answer a JSON problem
(404 for a name that cannot exist, 422 for a malformed receipt or sequence).

The routes come from the app's own route table, so a new route is covered as soon as it exists.
Requests go through http.client, which sends a path exactly as given (httpx would resolve a
literal '..' before sending it)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest

from enclave_queue.server.app import create_app
from enclave_queue.testing import EnclaveStack
from enclave_queue.web.paths import MAX_SEQUENCE, PATH_RULES, endpoints
from tests.helpers import make_queue

HOSTILE = {
    "star": "*",
    "gt": ">",
    "space": "a b",
    "dotdot": "..",
    "encoded-dotdot": "%2e%2e",  # sent as it is: the server decodes it to '..'
    "newline": "q\n",
    "non-ascii": "ü",
    "very-long": "a" * 5000,
    "minus-one": "-1",
    "two-to-the-64": "18446744073709551616",
}
QUEUE = "tpaths-guarded"  #: the real queue the other path parts name (this module's own)


def routes() -> list[tuple[str, str, list[str]]]:
    """(method, path template, its parameters) for every route of the app that has parameters."""
    table = []
    for route in endpoints(create_app(None).routes):
        for method in sorted(route.methods or ()):
            if route.param_convertors and method != "HEAD":
                table.append((method, route.path, list(route.param_convertors)))
    return table


def valid_parts() -> dict[str, str]:
    return {"project": "default", "name": QUEUE, "secret": f"{QUEUE}-password", "receipt": "abc", "seq": "1",
            "task_id": "r00000000", "tab": "settings"}


def raw(value: str) -> str:
    return value if value.startswith("%") else quote(value, safe="")


def request(stack: EnclaveStack, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    url = urlsplit(stack.api_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        body = b"{}" if method in ("POST", "PATCH", "PUT") else None
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {stack.token}",
                                                      "Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.getheader("content-type", ""), response.read().decode()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def guarded_queue(stack: EnclaveStack) -> Iterator[str]:
    make_queue(stack, QUEUE)
    yield QUEUE
    with stack.admin() as admin:
        admin.delete_queue("default", QUEUE)


def test_the_route_table_is_read_from_the_app_and_every_parameter_has_a_rule():
    table = routes()
    paths = {path for _, path, _ in table}
    assert "/v1/projects/{project}/queues/{name}/dead-letters/{seq}" in paths
    assert "/projects/{project}/queues/{name}/{tab}" in paths  # the console's too
    assert {param for _, _, params in table for param in params} <= set(PATH_RULES)


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_path_part_is_a_404_or_422_problem_on_every_route(stack, guarded_queue, value):
    wrong = []
    for method, template, params in routes():
        for param in params:
            parts = {**valid_parts(), param: value}
            path = template.format(**{key: raw(part) for key, part in parts.items() if key in params})
            status, content_type, text = request(stack, method, path)
            problem = json.loads(text) if content_type == "application/problem+json" else {}
            if status not in (404, 422) or problem.get("status") != status or not problem.get("detail"):
                wrong.append(f"{method} {template} {{{param}}}: {status} {content_type} {text[:200]}")
    assert wrong == []


def test_a_console_page_with_a_hostile_part_is_a_404_page(stack):
    status, content_type, text = request(stack, "GET", "/projects/%2A/queues", {"Accept": "text/html"})
    assert status == 404 and content_type.startswith("text/html")
    assert "Project &#39;*&#39; does not exist" in text


@pytest.mark.parametrize("part", ["*", ">", "%2A", "%3E"])
def test_a_wildcard_project_lists_no_other_projects_queues(stack, unique_name, part):
    make_queue(stack, unique_name, project="iso-other")
    status, content_type, text = request(stack, "GET", f"/v1/projects/{part}/queues")
    assert (status, content_type) == (404, "application/problem+json")
    assert unique_name not in text
    assert json.loads(text)["detail"].startswith("Project '")
    status, _, text = request(stack, "GET", f"/v1/projects/{part}/queues/-/overview")
    assert status == 404 and unique_name not in text


def test_the_sentences_name_the_part_and_its_rule(stack):
    status, _, text = request(stack, "GET", "/v1/projects/default/queues/q%0A")
    assert status == 404
    assert json.loads(text)["detail"] == ("Queue 'q\\n' does not exist in project 'default': a queue name is 3–40 "
                                          "lowercase letters, digits or hyphens, starting with a letter.")
    status, _, text = request(stack, "DELETE", f"/v1/projects/default/queues/{QUEUE}/dead-letters/-1")
    assert status == 422
    assert json.loads(text)["errors"] == [{"field": "seq", "message": f"must be an integer from 1 to {MAX_SEQUENCE} "
                                                                      "(got '-1')"}]


def test_the_largest_sequence_is_checked_by_the_service(stack, guarded_queue):
    base = f"/v1/projects/default/queues/{QUEUE}/dead-letters"
    assert request(stack, "DELETE", f"{base}/{MAX_SEQUENCE}")[0] == 404
    assert request(stack, "POST", f"{base}/{MAX_SEQUENCE}/retry")[0] == 404
    assert request(stack, "DELETE", f"{base}/{MAX_SEQUENCE + 1}")[0] == 422
    status, _, text = request(stack, "GET", f"{base}?after={MAX_SEQUENCE}")
    assert status == 200 and json.loads(text)["dead_letters"] == []
    assert request(stack, "GET", f"{base}?after={MAX_SEQUENCE + 1}")[0] == 422
