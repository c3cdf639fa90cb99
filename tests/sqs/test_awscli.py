"""The AWS CLI (PyPI ``awscli``) against the endpoint, as a user runs it: ``aws sqs … --endpoint-url``
with the access key in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, JSON on stdout, and its refusals
as ``An error occurred (<code>)`` on stderr with exit code 254 (or 255)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

AWS = shutil.which("aws", path=str(Path(sys.executable).parent)) or shutil.which("aws")
CLI_TIMEOUT = 60  #: seconds, one command

pytestmark = pytest.mark.skipif(AWS is None, reason="the AWS CLI is not installed (pip install awscli)")


@pytest.fixture
def aws(endpoint, access_key, tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "AWS_ACCESS_KEY_ID": access_key["access_key_id"], "AWS_SECRET_ACCESS_KEY": access_key["secret_access_key"],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_MAX_ATTEMPTS": "1"}

    def run(*args: str, ok: bool = True) -> Any:
        done = subprocess.run([AWS, "sqs", *args, "--endpoint-url", endpoint, "--output", "json"], env=env,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)
        if ok:
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout) if done.stdout.strip() else None
        return done

    return run


def test_the_aws_cli_creates_sends_receives_and_deletes(aws, stack, unique_name):
    url = aws("create-queue", "--queue-name", unique_name, "--attributes", "VisibilityTimeout=5")["QueueUrl"]
    assert url == f"{stack.api_url}/sqs/default/{unique_name}"
    sent = aws("send-message", "--queue-url", url, "--message-body", "from the cli",
               "--message-attributes", '{"k": {"DataType": "String", "StringValue": "v"}}')
    assert sent["MessageId"]
    got = aws("receive-message", "--queue-url", url, "--wait-time-seconds", "2", "--message-attribute-names", "All",
              "--attribute-names", "ApproximateReceiveCount")["Messages"]
    assert [(m["Body"], m["MessageAttributes"]["k"]["StringValue"], m["Attributes"]["ApproximateReceiveCount"])
            for m in got] == [("from the cli", "v", "1")]
    aws("delete-message", "--queue-url", url, "--receipt-handle", got[0]["ReceiptHandle"])
    attributes = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert (attributes["VisibilityTimeout"], attributes["ApproximateNumberOfMessagesNotVisible"]) == ("5", "0")
    with stack.admin() as admin:  # an ordinary Enclave queue
        assert admin.get_queue("default", unique_name)["visibility_timeout_seconds"] == 5


def test_the_aws_cli_shows_the_refusals(aws, unique_name):
    missing = aws("get-queue-url", "--queue-name", unique_name, ok=False)
    assert missing.returncode in (254, 255)
    assert "(AWS.SimpleQueueService.NonExistentQueue)" in missing.stderr
    out_of_range = aws("create-queue", "--queue-name", unique_name, "--attributes", "DelaySeconds=1000", ok=False)
    assert "(InvalidAttributeValue)" in out_of_range.stderr and "DelaySeconds" in out_of_range.stderr
