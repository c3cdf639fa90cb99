"""The AWS SDK for JavaScript v3 (npm ``@aws-sdk/client-sqs``, AWS JSON 1.0) and a release of it that
still speaks SQS's query protocol (form-encoded ``Action=``, XML answers; ``tests/node/sqs-query``),
run by Node against the endpoint: ``tests/node/sqs.mjs`` runs one scenario per process and prints
what happened. Both are pinned by their lockfiles and installed with ``npm ci`` when missing."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
QUERY_DIR = NODE_DIR / "sqs-query"
NODE = shutil.which("node")
SCENARIO_TIMEOUT = 90  #: seconds, one node process (the redrive waits for the dead-letter mover)
NPM_CI_TIMEOUT = 120  #: seconds

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (needed for the AWS SDK for JavaScript)")


def _installed(directory: Path) -> bool:
    pinned = json.loads((directory / "package.json").read_text())["dependencies"]
    for name, version in pinned.items():
        installed = directory / "node_modules" / name / "package.json"
        if not installed.is_file() or json.loads(installed.read_text())["version"] != version:
            return False
    return True


@pytest.fixture(scope="module", autouse=True)
def node_modules() -> None:
    """``npm ci`` in tests/node and tests/node/sqs-query, where their pinned packages are missing."""
    for directory in (NODE_DIR, QUERY_DIR):
        if _installed(directory):
            continue
        npm = shutil.which("npm")
        assert npm is not None, "node is installed but npm is not: cannot install the test packages"
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=directory, capture_output=True, text=True,
                              timeout=NPM_CI_TIMEOUT, check=False)
        assert done.returncode == 0, f"npm ci failed in {directory}:\n{done.stdout}\n{done.stderr}"
        assert _installed(directory), f"npm ci did not install the pinned packages in {directory}"


def run(scenario: str, **payload: Any) -> dict[str, Any]:
    done = subprocess.run([NODE, str(NODE_DIR / "sqs.mjs"), scenario], input=json.dumps(payload),
                          capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, cwd=NODE_DIR, check=False)
    assert done.returncode == 0, f"node {scenario} exited {done.returncode}:\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.fixture(params=["json", "query"])
def client(request, endpoint, access_key) -> dict[str, Any]:
    return {"protocol": request.param, "endpoint": endpoint, "region": "us-east-1",
            "key": access_key["access_key_id"], "secret": access_key["secret_access_key"]}


def test_create_send_receive_change_delete_purge(client, stack, unique_name):
    out = run("lifecycle", **client, queue=unique_name)
    url = f"{stack.api_url}/sqs/default/{unique_name}"
    assert out["url"] == out["got_url"] == url
    assert out["sent"]["md5"] == hashlib.md5("héllo from node".encode()).hexdigest()  # the SDK checked it too
    assert out["batch"] == {"ok": ["a", "b"], "failed": [{"id": "bad", "code": "InvalidParameterValue", "sender": True}]}
    assert out["received"] == [
        {"body": "héllo from node", "attributes": ["blob", "kind"], "count": "1", "blob": [0, 1, 2, 255]},
        {"body": "one", "attributes": [], "count": "1", "blob": None},
        {"body": "two", "attributes": [], "count": "1", "blob": None},
    ]
    assert out["again"] == [{"body": "one", "count": "2"}]  # visible again at once after ChangeMessageVisibility 0
    assert out["deleted"] == {"ok": 2, "failed": ["ReceiptHandleIsInvalid"]}
    assert out["attributes"]["VisibilityTimeout"] == "2"
    assert [out["attributes"][f"ApproximateNumberOfMessages{k}"] for k in ("", "NotVisible", "Delayed")] == ["0"] * 3
    assert out["tags"] == {"team": "node"}
    assert out["listed"] == [url]


def test_refusals(client, unique_name):
    out = run("refusals", **client, queue=unique_name)
    assert out["bad_secret"]["status"] == 403 and "SignatureDoesNotMatch" in (out["bad_secret"]["name"],
                                                                             out["bad_secret"]["code"])
    assert out["unknown_key"]["status"] == 403 and "InvalidClientTokenId" in (out["unknown_key"]["name"],
                                                                             out["unknown_key"]["code"])
    assert out["expired"]["status"] == 403 and "SignatureDoesNotMatch" in (out["expired"]["name"],
                                                                          out["expired"]["code"])
    assert out["unknown_queue"]["status"] == 400
    assert {"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"} & {out["unknown_queue"]["name"],
                                                                               out["unknown_queue"]["code"]}
    assert "InvalidAttributeValue" in (out["out_of_range"]["name"], out["out_of_range"]["code"])
    assert "InvalidParameterValue" in (out["fifo"]["name"], out["fifo"]["code"])


def test_a_message_dies_into_the_dead_letter_queue_and_a_move_task_brings_it_back(client, stack, unique_name):
    out = run("redrive", **client, queue=unique_name, dlq=f"{unique_name}-dlq")
    assert out["redrive_policy"] == {"deadLetterTargetArn": f"arn:aws:sqs:us-east-1:default:{unique_name}-dlq",
                                     "maxReceiveCount": 1}
    assert out["taken"] == ["doomed"] and out["dead"] == ["doomed"]
    assert out["sources"] == [f"{stack.api_url}/sqs/default/{unique_name}"]
    assert out["task_handle"] and (out["status"], out["moved"]) == ("COMPLETED", 1)
    assert out["back"] == [{"body": "doomed", "count": "1"}]


def test_edges_an_sdk_reads(client, unique_name):
    """Both protocols: an empty attribute or tag answer, carriage returns kept (the query protocol's
    XML used to turn them into line feeds, and the SDK refused the body's MD5), a deleted message's
    visibility refused, 1 MiB of messages in one batch and no more."""
    out = run("edges", **client, queue=unique_name)
    assert out["no_policy"] in (None, {}) and out["no_tags"] in (None, {})
    assert out["body_kept"] and out["attribute_kept"]
    assert "InvalidParameterValue" in (out["gone"]["name"], out["gone"]["code"])
    assert out["big_batch"] == 4
    assert out["too_long"]["status"] == 400 and {"BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong"} & {
        out["too_long"]["name"], out["too_long"]["code"]}

