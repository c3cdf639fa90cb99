"""A real headless Chromium (Debian's ``chromium``, driven by Playwright's Python API) against
the shared running stack. Each test gets a fresh browser context (no cookies); ``console`` is
one already signed in. Screenshots land in tests/artifacts/console/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from enclave_queue.testing import CHROMIUM_ARGS, EnclaveStack, chromium_path

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "console"
TIMEOUT_MS = 10_000
@pytest.fixture
def no_leaked_tasks() -> None:
    """These tests are synchronous: Playwright's sync API runs its own event loop in this thread,
    where the suite's asyncio task check cannot run."""


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    # module scope: the event loop Playwright keeps in this thread is gone before async tests run
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    fresh = browser.new_context(viewport={"width": 1280, "height": 800})
    fresh.set_default_timeout(TIMEOUT_MS)
    try:
        yield fresh
    finally:
        fresh.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.script_errors = errors  # type: ignore[attr-defined]
    return opened


def sign_in(page: Page, stack: EnclaveStack, next_path: str = "/") -> None:
    page.goto(f"{stack.api_url}/sign-in?next={next_path}")
    page.get_by_label("API token").fill(stack.token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/sign-in" not in url)


@pytest.fixture
def console(page: Page, stack: EnclaveStack) -> Iterator[Page]:
    """A page signed in to the shared stack; fails the test if the page's script threw."""
    sign_in(page, stack)
    yield page
    assert page.script_errors == []  # type: ignore[attr-defined]


def shot(page: Page, name: str) -> Path:
    """Save a full-page screenshot under tests/artifacts/console/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
