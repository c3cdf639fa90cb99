"""The console's New queue and Settings forms for capacity (``max_messages``), the dedupe
window and priorities, in a real headless Chromium: the cross-field rule shown beside its field,
then an edit in place; priorities turned on, and locked on."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.console.test_console import queue_url
from tests.helpers import make_queue

PRIORITIES = "Priorities (0–9, higher first)"


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
        "Dedupe window (7200) must not exceed Retention (1 h = 3600 s): "
        "a key cannot outlive the messages it guards")
    window.fill("600")
    console.get_by_role("button", name="Create queue").click()
    expect(console).to_have_url(queue_url(stack, unique_name))
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


def test_priorities_are_turned_on_from_the_new_queue_form_and_stay_on(console: Page, stack, unique_name):
    console.goto(f"{stack.api_url}/projects/default/queues/new")
    box = console.get_by_label(PRIORITIES)
    expect(box).to_have_attribute("type", "checkbox")
    expect(box).not_to_be_checked()
    console.get_by_label("Name").fill(unique_name)
    console.get_by_label("Retention").fill("999")
    box.check()
    console.get_by_role("button", name="Create queue").click()
    expect(console.locator("#f-retention_hours-error")).to_be_visible()
    expect(console.get_by_label(PRIORITIES)).to_be_checked()  # kept after the refusal
    console.get_by_label("Retention").fill("24")
    console.get_by_role("button", name="Create queue").click()
    expect(console).to_have_url(queue_url(stack, unique_name))
    expect(console.locator("[data-state]")).to_have_text("Ready")
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["priorities"] is True

    box = console.get_by_label(PRIORITIES)  # the Settings tab: on, and cannot be turned off
    expect(box).to_be_checked()
    expect(box).to_be_disabled()
    expect(console.locator("#f-priorities-hint")).to_contain_text("On for good")
    console.get_by_label("Visibility timeout").fill("40")
    console.get_by_role("button", name="Save changes").click()
    expect(console.locator("[data-state]")).to_have_text("Ready")
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
    assert (queue["visibility_timeout_seconds"], queue["priorities"]) == (40, True)


def test_priorities_are_turned_on_in_place_from_the_settings_tab(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name))
    box = console.get_by_label(PRIORITIES)
    expect(box).to_be_enabled()
    console.get_by_role("button", name="Save changes").click()  # unticked: nothing changes
    expect(console.locator("[data-state]")).to_have_text("Ready")
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["priorities"] is False
    console.get_by_label(PRIORITIES).check()
    console.get_by_role("button", name="Save changes").click()
    expect(console.get_by_label(PRIORITIES)).to_be_disabled()
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["priorities"] is True
