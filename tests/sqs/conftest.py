"""Fixtures of the SQS endpoint's tests: an access key on the shared stack (revoked afterwards) and
boto3 clients signed with it, with short timeouts and no retries (a refusal is seen as it is)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from enclave_queue.testing import EnclaveStack

REGION = "us-east-1"  #: the endpoint's default region (ENCLAVE_SQS_REGION)
CONFIG = Config(connect_timeout=5, read_timeout=30, retries={"total_max_attempts": 1})


def create_key(stack: EnclaveStack, project: str | None = None) -> dict[str, Any]:
    with stack.admin() as admin:
        return admin.request("POST", "/v1/access-keys", json={"project": project, "name": "tests"})


def revoke_key(stack: EnclaveStack, key_id: str) -> None:
    with stack.admin() as admin:
        admin.request("DELETE", "/v1/access-keys", params={"access_key_id": key_id})


@pytest.fixture(scope="module")
def access_key(stack: EnclaveStack) -> Iterator[dict[str, Any]]:
    """An access key of every project."""
    key = create_key(stack)
    yield key
    revoke_key(stack, key["access_key_id"])


@pytest.fixture(scope="module")
def endpoint(stack: EnclaveStack) -> str:
    return stack.api_url + "/sqs"


def boto_client(endpoint: str, key_id: str, secret: str, region: str = REGION) -> Any:
    return boto3.client("sqs", endpoint_url=endpoint, region_name=region, aws_access_key_id=key_id,
                        aws_secret_access_key=secret, config=CONFIG)


@pytest.fixture(scope="module")
def make_client(endpoint: str) -> Callable[..., Any]:
    return lambda key, **kw: boto_client(endpoint, key["access_key_id"], key["secret_access_key"], **kw)


@pytest.fixture(scope="module")
def sqs(make_client: Callable[..., Any], access_key: dict[str, Any]) -> Any:
    return make_client(access_key)


def until(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Call ``check`` until it returns a truthy value, and return it; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout:g} s (last value: {last!r})")
