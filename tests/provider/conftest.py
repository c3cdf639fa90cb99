"""Fixtures of the provider tests: provider processes started as OpenTofu starts them (each
stopped by the test that started it), a ``Tofu`` bound to the session's shared stack, and
proxies in front of its API that fail on purpose."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from enclave_queue.testing import EnclaveStack
from tests.provider.harness import ApiProxy, ProviderProcess, Tofu, errors_of


def plain_env(tmp: Path) -> dict[str, str]:
    """The environment without any ENCLAVE_*, TF_* or PLUGIN_* setting of the machine's own (and
    an empty ENCLAVE_HOME, so a developer's running server is never found by accident)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENCLAVE_", "TF_", "PLUGIN_"))}
    env["ENCLAVE_HOME"] = str(tmp / "no-enclave-home")
    return env


@pytest.fixture
def start_provider(tmp_path: Path) -> Iterator[Callable[..., ProviderProcess]]:
    """Start ``terraform-provider-enclave`` processes (``start(env={...})``); all are stopped at
    the end of the test."""
    started: list[ProviderProcess] = []

    def start(env: dict[str, str] | None = None) -> ProviderProcess:
        process = ProviderProcess.start({**plain_env(tmp_path), **(env or {})},
                                        tmp_path / f"provider-{len(started)}.log")
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()


@pytest.fixture
def new_tofu(start_provider: Callable[..., ProviderProcess], stack: EnclaveStack) -> Callable[..., Tofu]:
    """A fresh provider process, configured for the shared stack, as one OpenTofu command uses
    it (``new_tofu(project=...)``)."""

    def make(**provider_config: Any) -> Tofu:
        tofu = Tofu(start_provider())
        config = {"endpoint": stack.api_url, "token": stack.token, **provider_config}
        diags = tofu.configure(**config)
        assert not errors_of(diags), diags
        return tofu

    return make


@pytest.fixture
def tofu(new_tofu: Callable[..., Tofu]) -> Tofu:
    return new_tofu()


@pytest.fixture
def api_proxy(stack: EnclaveStack) -> Iterator[Callable[[Callable[[str, str], str | None]], ApiProxy]]:
    """Start proxies in front of the shared stack's API (``api_proxy(route)``, see ApiProxy); all
    are stopped at the end of the test."""
    started: list[ApiProxy] = []

    def start(route: Callable[[str, str], str | None]) -> ApiProxy:
        started.append(ApiProxy(stack.api_url, route))
        return started[-1]

    try:
        yield start
    finally:
        for proxy in started:
            proxy.stop()
