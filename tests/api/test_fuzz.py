"""Every operation of the OpenAPI document, fuzzed by schemathesis against a real stack: no
answer is a 5xx, and every answer matches the document (a problem for each 4xx/5xx, the declared
schema for each 2xx). Valid and invalid inputs both (schemathesis' positive and negative modes),
a bounded number of each (no shrinking phase), so the whole run takes well under two minutes.

The cases go to a project of this module's own, where queues are made Ready first so that the
routes that need one have one; what the fuzzer creates there is deleted at the end. Schemathesis
is driven through its strategies (``operation.as_strategy``) under plain pytest parametrizing:
its lazy pytest plugin does not run under pytest 9.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from enclave_queue.api.openapi import document
from enclave_queue.server.app import create_app
from enclave_queue.testing import EnclaveStack
from tests.helpers import make_queue

EXAMPLES = 20  #: generated cases per operation and mode
MAX_WAIT = 0.2  #: seconds a generated receive may wait (a long poll proves nothing here)
#: bytes a generated queue may reserve of the shared stack's store: the other tests need room
#: too, and a max_bytes past the store is a 507 by design (tests/integration/test_storage_limits.py)
MAX_BYTES = 32 << 20
#: every operation of the document, read from the app itself (a new route is fuzzed at once),
#: and whether it takes anything but path parameters (a body, a query) that a case may negate
DOCUMENT = document(create_app(None))
OPERATIONS = [(method.upper(), path) for path, item in DOCUMENT["paths"].items() for method in item]
NEGATABLE = {(method.upper(), path) for path, item in DOCUMENT["paths"].items() for method, operation in item.items()
             if "requestBody" in operation or any(p["in"] != "path" for p in operation.get("parameters", []))}
_runs = itertools.count(1)


@pytest.fixture(scope="module")
def fuzz_project(stack: EnclaveStack) -> Iterator[str]:
    """A project only this module uses, with a Ready queue for the cases and another for the
    deletes; every queue in it is deleted afterwards, the users of a dead-letter queue first."""
    project = f"fuzz-{os.getpid()}-{int(time.time()) % 100_000}-{next(_runs)}"
    make_queue(stack, "fuzzed", project=project)
    make_queue(stack, "doomed", project=project)
    yield project
    with stack.admin() as admin:
        for _ in range(20):
            left = [q["name"] for q in admin.list_queues(project)]
            if not left:
                return
            for name in left:
                with contextlib.suppress(Exception):  # still another queue's DLQ: the next round
                    admin.delete_queue(project, name)
            time.sleep(0.2)


@pytest.fixture(scope="module")
def api_schema(stack: EnclaveStack, fuzz_project: str) -> Any:
    """The document as the running server serves it (behind its token)."""
    auth = {"Authorization": f"Bearer {stack.token}"}
    return schemathesis.openapi.from_url(stack.api_url + "/openapi.json", headers=auth,
                                         config=schemathesis.Config.from_dict({"headers": auth}))


def fixed_parts(method: str, path: str, project: str) -> dict[str, str]:
    """The path parameters every case of an operation gets: this module's project, and its queue
    (``doomed`` for the deletes of a queue, so that the others keep theirs)."""
    parts = {"project": project, "name": "doomed" if (method, path.rsplit("/", 1)[-1]) == ("DELETE", "{name}") else "fuzzed",
             "secret": "fuzzed-password"}
    return {key: value for key, value in parts.items() if "{" + key + "}" in path}


def bounded(case: Any) -> None:
    """Keep long polls short and reservations small (only where the value is of the right type:
    a wrong type is what a negative case is for)."""
    body = case.body
    big = body.get("max_bytes") if isinstance(body, dict) else None
    if isinstance(big, int) and not isinstance(big, bool) and big > MAX_BYTES:
        body["max_bytes"] = MAX_BYTES
    if isinstance(body, dict) and case.path.endswith("/messages/receive"):
        wait = body.get("wait")
        if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait > MAX_WAIT:
            body["wait"] = MAX_WAIT
    if isinstance(case.query, dict) and "wait_seconds" in case.query:
        case.query["wait_seconds"] = 0


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_no_operation_answers_a_5xx_or_off_its_schema(stack, api_schema, fuzz_project, method, path, mode):
    operation = api_schema[path][method]
    auth = {"Authorization": f"Bearer {stack.token}"}
    # an invalid case of an operation that takes only path parameters has invalid path parameters
    # (404s that touch nothing); any other case is aimed at this module's queues
    fixed = fixed_parts(method, path, fuzz_project) if mode is GenerationMode.POSITIVE or (method, path) in NEGATABLE \
        else None

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=fixed))
    @settings(max_examples=EXAMPLES, deadline=None, phases=[Phase.explicit, Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    def fuzz(case: Any) -> None:
        bounded(case)
        response = case.call(headers=auth, timeout=30)
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    fuzz()


def test_the_document_is_served_behind_the_token_with_problems_and_queue_specs(stack: EnclaveStack) -> None:
    assert httpx.get(stack.api_url + "/openapi.json").status_code == 401
    document = httpx.get(stack.api_url + "/openapi.json", headers={"Authorization": f"Bearer {stack.token}"}).json()
    create = document["paths"]["/v1/projects/{project}/queues"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/QueueSpec"}
    spec = document["components"]["schemas"]["QueueSpec"]
    assert spec["additionalProperties"] is False and spec["required"] == ["name"]
    assert spec["properties"]["max_receives"]["type"] == "integer"
    patch = document["paths"]["/v1/projects/{project}/queues/{name}"]["patch"]
    assert patch["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/QueuePatch"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            for status in ("4XX", "5XX"):
                assert operation["responses"][status]["content"] == {
                    "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}, (method, path)
            assert "422" not in operation["responses"]
    assert "HTTPValidationError" not in document["components"]["schemas"]
    peek = document["paths"]["/v1/projects/{project}/queues/{name}/messages"]["get"]
    (limit,) = [p for p in peek["parameters"] if p["name"] == "limit"]
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 100)
    assert limit["schema"]["description"] == "an integer from 1 to 100"
