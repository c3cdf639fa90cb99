"""Rotating a queue's password from its Credentials tab, in a real headless Chromium against the
shared stack: the page shows the new password and until when the old one logs in, the old one
keeps logging in for the grace (the SDK's connect), a grace of 0 ends it at once, and a bad grace
is refused beside its field with nothing rotated."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright.sync_api import Page, expect

from enclave_queue.client.sync import connect_sync
from enclave_queue.errors import Unauthorized
from tests.console.conftest import shot
from tests.console.test_console import queue_url
from tests.helpers import make_queue

CONNECT_TIMEOUT = 2.0  #: seconds for one SDK connect


def credentials(stack, name: str) -> dict:
    with stack.admin() as admin:
        return admin.credentials("default", name)


def test_rotate_shows_the_new_password_and_the_old_one_logs_in_during_the_grace(console: Page, stack, unique_name):
    old = make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "credentials"))
    expect(console.get_by_label("Grace period")).to_have_value("3600")  # the default, as typed
    console.get_by_role("button", name="Rotate password").click()

    expect(console).to_have_url(queue_url(stack, unique_name, "credentials"))  # redirected: a GET
    notice = console.locator("[data-rotated]")
    expect(notice).to_contain_text("Password rotated: version 2")
    new = credentials(stack, unique_name)
    assert new["password"] != old["password"] and new["username"] == old["username"]
    expect(console.locator("#cred-password")).to_have_text(new["password"])  # revealed by itself
    until = datetime.fromisoformat(notice.locator("[data-previous-until]").get_attribute("datetime"))
    assert 3590 <= (until - datetime.now(UTC)).total_seconds() <= 3601
    shot(console, "queue-credentials-rotated")

    with connect_sync(old, connect_timeout=CONNECT_TIMEOUT) as queue:  # the old password, in its grace
        queue.send({"sent with": "the old password"})
    with connect_sync(new, connect_timeout=CONNECT_TIMEOUT) as queue:
        [message] = queue.receive(1, wait=2)
        assert message.body == {"sent with": "the old password"}
        message.delete()

    console.reload()  # shown once; a reload is a GET and rotates nothing
    expect(console.locator("[data-rotated]")).to_have_count(0)
    expect(console.locator("#cred-password")).not_to_have_text(new["password"])  # hidden until asked for again
    assert credentials(stack, unique_name)["password"] == new["password"]


def test_a_grace_of_zero_refuses_the_old_password_at_once(console: Page, stack, unique_name):
    old = make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "credentials"))
    console.get_by_label("Grace period").fill("0")
    console.get_by_role("button", name="Rotate password").click()
    expect(console.locator("[data-rotated]")).to_contain_text("The previous password no longer logs in")
    new = credentials(stack, unique_name)
    expect(console.locator("#cred-password")).to_have_text(new["password"])
    with pytest.raises(Unauthorized):
        connect_sync(old, connect_timeout=CONNECT_TIMEOUT)
    with connect_sync(new, connect_timeout=CONNECT_TIMEOUT) as queue:
        queue.send("fine")


@pytest.mark.parametrize(("typed", "shown"), [("604801", "'604801'"), ("-1", "'-1'"), ("an hour", "'an hour'")])
def test_a_bad_grace_is_refused_beside_its_field_and_nothing_is_rotated(console: Page, stack, unique_name,
                                                                         typed, shown):
    old = make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "credentials"))
    console.get_by_label("Grace period").fill(typed)
    with console.expect_response(lambda r: r.url.endswith("/rotate-password")) as answer:
        console.get_by_role("button", name="Rotate password").click()
    assert answer.value.status == 422
    grace = console.get_by_label("Grace period")
    expect(grace).to_have_attribute("aria-invalid", "true")
    expect(grace).to_be_focused()
    expect(grace).to_have_value(typed)  # what was typed is kept
    expect(console.locator("#f-grace_seconds-error")).to_have_text(
        f"Grace period must be an integer from 0 to 604800 (7 days) (got {shown})")  # the form's words
    expect(console.locator(".tabs .current")).to_have_text("Credentials")
    expect(console.locator("[data-rotated]")).to_have_count(0)
    assert credentials(stack, unique_name)["password"] == old["password"]
