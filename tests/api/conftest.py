"""Fixtures of the API tests: an HTTP client of the shared stack holding its admin token."""

import httpx
import pytest


@pytest.fixture
def http(stack):
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as client:
        yield client
