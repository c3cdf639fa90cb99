"""The console's New queue and Settings forms for capacity (``max_messages``) and the dedupe
window, in a real headless Chromium: the cross-field rule shown beside its field, then an edit
in place."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.console.test_console import queue_url


def test_capacity_and_dedupe_window_from_the_forms(console: Page, stack, unique_name):
    console.goto(f"{stack.api_url}/projects/default/queues/new")
    console.get_by_label("Name").fill(unique_name)
    console.get_by_label("Retention").fill("1")
    console.get_by_label("Capacity (max messages)").fill("500")
    console.get_by_label("Dedupe window").fill("7200")
    console.get_by_role("button", name="Create queue").click()
    window = console.get_by_label("Dedupe window")
    expect(window).to_have_attribute("aria-invalid", "true")
    expect(console.locator("#f-dedupe_window_seconds-error")).to_have_text(
        "dedupe_window_seconds (7200) must not exceed retention_hours (1 h = 3600 s): "
        "a key cannot outlive the messages it guards")
    window.fill("600")
    console.get_by_role("button", name="Create queue").click()
    expect(console).to_have_url(queue_url(stack, unique_name) + "?created=1")
    expect(console.locator("[data-state]")).to_have_text("Ready")
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
    assert (queue["retention_hours"], queue["max_messages"], queue["dedupe_window_seconds"]) == (1, 500, 600)

    expect(console.get_by_label("Capacity (max messages)")).to_have_value("500")
    console.get_by_label("Capacity (max messages)").fill("0")
    console.get_by_label("Dedupe window").fill("60")
    console.get_by_role("button", name="Save changes").click()
    expect(console.locator("[data-state]")).to_have_text("Ready")
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
    assert (queue["max_messages"], queue["dedupe_window_seconds"]) == (0, 60)
