"""The web console in a real headless Chromium against a real running stack: sign-in, CSRF,
the queues table, the New queue form, each tab of a queue's page, and keyboard-only use."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from playwright.sync_api import Page, expect

from enclave_queue.client.sync import connect_sync
from enclave_queue.errors import NotFound
from tests.console.conftest import shot, sign_in
from tests.helpers import make_queue


def queue_url(stack, name: str, tab: str = "settings", project: str = "default") -> str:
    return f"{stack.api_url}/projects/{project}/queues/{name}/{tab}"


def wait_until(check, timeout: float = 10.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


# -- sign-in, sessions, CSRF ------------------------------------------------------------------------


def test_pages_without_a_session_redirect_to_sign_in(page: Page, stack):
    page.goto(f"{stack.api_url}/projects/default/queues")
    expect(page).to_have_url(re.compile(r"/sign-in\?next=/projects/default/queues$"))
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    shot(page, "sign-in")


def test_a_wrong_token_is_refused_and_the_right_one_signs_in(page: Page, stack):
    page.goto(f"{stack.api_url}/projects/default/queues")
    page.get_by_label("API token").fill("enq_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("token is not a valid API token.")
    expect(page).to_have_url(re.compile(r"/sign-in$"))
    assert not [c for c in page.context.cookies() if c["name"] == "enclave_session"]

    page.get_by_label("API token").fill(stack.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{stack.api_url}/projects/default/queues")  # back where it was going
    cookie = next(c for c in page.context.cookies() if c["name"] == "enclave_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert stack.token not in cookie["value"]


def test_sign_out_ends_the_session(console: Page, stack):
    cookie = next(c for c in console.context.cookies() if c["name"] == "enclave_session")
    console.get_by_role("button", name="Sign out").click()
    expect(console).to_have_url(re.compile(r"/sign-in$"))
    # the old cookie is dead on the server, not just forgotten by the browser
    old = httpx.get(f"{stack.api_url}/projects/default/queues", cookies={"enclave_session": cookie["value"]})
    assert old.status_code == 303 and old.headers["location"].startswith("/sign-in")
    api = httpx.get(f"{stack.api_url}/v1/projects/default/queues", cookies={"enclave_session": cookie["value"]})
    assert api.status_code == 401


def test_a_form_post_without_the_csrf_token_is_refused(console: Page, stack, unique_name):
    form_url = f"{stack.api_url}/projects/default/queues/new"
    response = console.request.post(form_url, form={"name": unique_name})
    assert response.status == 403
    response = console.request.post(form_url, form={"name": unique_name, "csrf": "forged"})
    assert response.status == 403
    # the API with the session cookie but without the X-CSRF-Token header: refused too
    response = console.request.post(f"{stack.api_url}/v1/projects/default/queues", data={"name": unique_name})
    assert response.status == 403 and "CSRF" in response.json()["detail"]
    with stack.admin() as admin, pytest.raises(NotFound):
        admin.get_queue("default", unique_name)


# -- queues ---------------------------------------------------------------------------------------------


def test_create_a_queue_through_the_form_and_watch_it_become_ready(console: Page, stack, unique_name):
    make_queue(stack, f"{unique_name}-dlq")
    console.goto(f"{stack.api_url}/projects/default/queues")
    console.get_by_role("link", name="New queue").click()
    console.get_by_label("Name").fill(unique_name)
    console.get_by_label("Visibility timeout").fill("45")
    console.get_by_label("Tries (max receives)").fill("5")
    console.get_by_label("Retention").fill("24")
    console.get_by_label("Max message size").fill("2048")
    console.get_by_label("Dead-letter queue").select_option(f"{unique_name}-dlq")
    console.get_by_label("Retry backoff").fill("5, 30")
    shot(console, "new-queue")
    console.get_by_role("button", name="Create queue").click()
    expect(console).to_have_url(queue_url(stack, unique_name))
    expect(console.locator("[data-state]")).to_have_text("Ready")
    shot(console, "queue-settings")
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
    assert (queue["visibility_timeout_seconds"], queue["max_receives"], queue["retention_hours"],
            queue["max_message_bytes"], queue["dead_letter_queue"], queue["retry_backoff_seconds"]) == \
        (45, 5, 24, 2048, f"{unique_name}-dlq", [5, 30])


def test_retention_999_shows_the_field_error_and_creates_nothing(console: Page, stack, unique_name):
    console.goto(f"{stack.api_url}/projects/default/queues/new")
    console.get_by_label("Name").fill(unique_name)
    console.get_by_label("Retention").fill("999")
    console.get_by_role("button", name="Create queue").click()
    retention = console.get_by_label("Retention")
    expect(retention).to_have_attribute("aria-invalid", "true")
    error = console.locator("#f-retention_hours-error")
    expect(error).to_have_text("Retention must be an integer from 1 to 336 (got '999')")  # the form's words
    expect(retention).to_have_value("999")  # what was typed is kept
    expect(console.get_by_label("Name")).to_have_value(unique_name)
    shot(console, "new-queue-error")
    with stack.admin() as admin, pytest.raises(NotFound):
        admin.get_queue("default", unique_name)


def test_the_queues_table_shows_live_counts(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    console.goto(f"{stack.api_url}/projects/default/queues")
    row = console.locator(f'tr[data-queue="{unique_name}"]')
    expect(row.locator('[data-col="waiting"]')).to_have_text("0")
    with stack.admin() as admin:
        for i in range(3):
            admin.send("default", unique_name, {"n": i})
        admin.receive("default", unique_name, 1, wait=2)
    # no reload: the page refreshes its counts by itself
    expect(row.locator('[data-col="waiting"]')).to_have_text("2")
    expect(row.locator('[data-col="in_flight"]')).to_have_text("1")
    expect(row.locator('[data-col="state"]')).to_have_text("Ready")
    shot(console, "queues")


def test_switching_project_lists_that_projects_queues(console: Page, stack, unique_name):
    project = "console-" + unique_name[:20].strip("-")
    make_queue(stack, unique_name, project=project)
    console.goto(f"{stack.api_url}/projects/default/queues")
    console.get_by_label("Project").fill(project)
    console.get_by_role("button", name="Switch").click()
    expect(console).to_have_url(f"{stack.api_url}/projects/{project}/queues")
    expect(console.locator(f'tr[data-queue="{unique_name}"]')).to_be_visible()


def test_edit_settings_in_place_then_delete_with_typed_confirmation(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name))
    console.get_by_label("Visibility timeout").fill("0")
    console.get_by_role("button", name="Save changes").click()
    expect(console.locator("#f-visibility_timeout_seconds-error")).to_contain_text("from 1 to 43200")
    console.get_by_label("Visibility timeout").fill("90")
    console.get_by_role("button", name="Save changes").click()
    expect(console.locator("[data-state]")).to_have_text("Ready")
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["visibility_timeout_seconds"] == 90

    confirm = console.get_by_label(re.compile("to confirm"))
    confirm.fill("not-the-name")
    console.get_by_role("button", name="Delete queue").click()
    expect(console.locator("#f-confirm-error")).to_contain_text(f"must be the queue's name, '{unique_name}'")
    with stack.admin() as admin:
        admin.get_queue("default", unique_name)  # still there
    console.get_by_label(re.compile("to confirm")).fill(unique_name)
    console.get_by_role("button", name="Delete queue").click()
    expect(console).to_have_url(f"{stack.api_url}/projects/default/queues")
    expect(console.locator(".notice")).to_contain_text(f"Queue “{unique_name}” is being deleted.")
    console.reload()  # shown once
    expect(console.locator(".notice")).to_have_count(0)
    # no link can make the page say so (it was a query parameter: any text went in)
    console.goto(f"{stack.api_url}/projects/default/queues?deleted=Everything+was+deleted.+Call+555-0100")
    expect(console.locator(".notice")).to_have_count(0)
    with stack.admin() as admin:
        admin.wait_deleted("default", unique_name, timeout=20)


# -- Messages tab ------------------------------------------------------------------------------


def test_send_receive_see_the_countdown_and_the_message_come_back(console: Page, stack, unique_name):
    make_queue(stack, unique_name, visibility_timeout_seconds=2)
    console.goto(queue_url(stack, unique_name, "messages"))
    console.get_by_label("Body", exact=True).fill('{"to": "ada@example.com"}')
    console.get_by_role("button", name="Send").click()
    expect(console.locator('[data-result="send"]')).to_have_text(re.compile(r"^Sent: sequence \d+\.$"))

    console.get_by_role("button", name="Receive").click()
    first = console.locator("[data-received] li").first
    expect(first.locator("[data-body]")).to_have_text('{"to": "ada@example.com"}')  # as typed
    expect(first.locator("[data-count]")).to_have_text("1")
    expect(first.locator("[data-countdown]")).to_have_text(re.compile(r"^Hidden for [12] s more$"))
    shot(console, "queue-messages")
    # the visibility timeout (2 s) passes: the countdown says so, and the message can be received again
    expect(first.locator("[data-countdown]")).to_have_text("Visible again: its visibility timeout ran out")
    console.get_by_role("button", name="Receive").click()
    second = console.locator("[data-received] li").first
    expect(second.locator("[data-count]")).to_have_text("2")
    second.get_by_role("button", name="Delete").click()
    expect(second.locator("[data-outcome]")).to_have_text("Deleted.")
    with stack.admin() as admin:
        stats = admin.stats("default", unique_name)
    assert (stats["waiting"], stats["in_flight"], stats["sent"], stats["received"]) == (0, 0, 1, 2)


def test_hand_back_peek_and_text_bodies(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "messages"))
    console.get_by_label("Text").check()
    console.get_by_label("Body", exact=True).fill("plain words")
    console.get_by_role("button", name="Send").click()
    expect(console.locator('[data-result="send"]')).to_contain_text("Sent")
    console.get_by_role("button", name="Receive").click()
    item = console.locator("[data-received] li").first
    expect(item.locator("[data-body]")).to_have_text("plain words")
    item.get_by_role("button", name="Hand back").click()
    expect(item.locator("[data-outcome]")).to_have_text("Handed back: visible again now.")
    with stack.admin() as admin:
        before = admin.stats("default", unique_name)
    console.get_by_role("button", name="Peek").click()
    expect(console.locator("[data-peek] tbody tr")).to_have_count(1)
    expect(console.locator("[data-peek] tbody")).to_contain_text("plain words")
    with stack.admin() as admin:  # peeking took nothing
        assert admin.stats("default", unique_name)["received"] == before["received"] == 1
    # handed back: the next receive gets it at once (its visibility timeout is 30 s)
    console.get_by_role("button", name="Receive").click()
    expect(console.locator("[data-received] li").first.locator("[data-count]")).to_have_text("2")


def test_invalid_json_and_bad_receive_numbers_are_shown_beside_their_fields(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "messages"))
    console.get_by_label("Body", exact=True).fill("{not json")
    console.get_by_role("button", name="Send").click()
    expect(console.locator("#send-body-error")).to_contain_text("Body is not valid JSON")
    console.get_by_label("How many").fill("500")
    console.get_by_role("button", name="Receive").click()
    expect(console.locator("#receive-max-error")).to_have_text("How many must be an integer from 1 to 100 (got 500)")
    # what JavaScript's Number() reads and the rule does not: refused, quoting what was typed
    for typed in ("0x2", "1e1", "Infinity"):
        console.get_by_label("How many").fill(typed)
        console.get_by_role("button", name="Receive").click()
        expect(console.locator("#receive-max-error")).to_contain_text(typed)
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["sent"] == 0
    # JSON is sent as typed: a number past 2^53 and its digits are kept (parsed and written again, they were not)
    console.get_by_label("Body", exact=True).fill('{"id": 9007199254740993}')
    console.get_by_role("button", name="Send").click()
    expect(console.locator('[data-result="send"]')).to_contain_text("Sent")
    with stack.admin() as admin:
        (stored,) = admin.peek("default", unique_name)
    assert (stored["body"], stored["content_type"]) == ('{"id": 9007199254740993}', "application/json")


def test_a_repeated_header_and_a_body_over_the_queue_s_size_are_refused_beside_their_fields(console: Page, stack,
                                                                                              unique_name):
    make_queue(stack, unique_name, max_message_bytes=1024)
    console.goto(queue_url(stack, unique_name, "messages"))
    console.get_by_label("Headers").fill("X-A: 1\nx-a: 2")
    console.get_by_role("button", name="Send").click()
    expect(console.locator("#send-headers-error")).to_contain_text('line 2 repeats the header "x-a"')
    console.get_by_label("Headers").fill("")
    console.get_by_label("Text").check()
    console.get_by_label("Body", exact=True).fill("x" * 2000)
    console.get_by_role("button", name="Send").click()
    expect(console.locator("#send-body-error")).to_contain_text("Body is too large")
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["sent"] == 0


# -- Dead letters tab ---------------------------------------------------------------------------------


def test_a_message_that_dies_shows_its_error_and_retry_sends_it_back(console: Page, stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, dead_letter_queue=dlq)
    with connect_sync(creds) as queue:  # a worker fails it on both of its receives
        queue.send({"order": 7})
        for attempt in (1, 2):
            [message] = queue.receive(1, wait=5)
            assert message.receive_count == attempt
            message.nack(error=f"card declined: insufficient funds (attempt {attempt})")
    console.goto(queue_url(stack, dlq, "dead-letters"))
    row = console.locator("[data-letters] tbody tr").first
    expect(row).to_be_visible(timeout=15_000)  # the mover (or its sweep) moves it once it has died
    expect(row.locator("[data-last-error]")).to_have_text("card declined: insufficient funds (attempt 2)")
    expect(row).to_contain_text(unique_name)
    expect(row).to_contain_text('{"order":7}')
    shot(console, "queue-dead-letters")
    row.get_by_role("button", name="Retry").click()
    expect(row).to_contain_text("Sent back.")
    expect(console.get_by_text("No dead letters.")).to_be_visible()
    with stack.admin() as admin:
        [back] = admin.peek("default", unique_name)
        assert back["body"] == '{"order":7}'
        assert admin.stats("default", dlq)["waiting"] == 0


def test_redrive_filtered_dead_letters_with_progress(console: Page, stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, dead_letter_queue=dlq)
    with connect_sync(creds) as queue:
        for i in range(5):
            queue.send({"i": i})
        for message in queue.receive(5, wait=5):
            body = message.body
            message.reject(error="timeout talking to smtp" if body["i"] % 2 == 0 else "bad address")
    console.goto(queue_url(stack, dlq, "dead-letters"))
    expect(console.locator("[data-letters] tbody tr")).to_have_count(5)
    console.get_by_label("Only those whose last error contains").fill("smtp")
    console.get_by_role("button", name="Redrive").click()
    expect(console.locator("[data-redrive-text]")).to_have_text("Done: 3 moved, 0 failed, 0 remaining.")
    expect(console.locator("[data-redrive-text]")).to_have_attribute("data-state", "done")
    expect(console.locator("progress")).to_have_attribute("value", "3")
    expect(console.locator("[data-letters] tbody tr")).to_have_count(2)
    with stack.admin() as admin:
        assert sorted(m["body"] for m in admin.peek("default", unique_name)) == ['{"i":0}', '{"i":2}', '{"i":4}']


def test_discard_asks_for_a_second_press(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    with stack.admin() as admin:
        admin.send("default", unique_name, "drop me")
    console.goto(queue_url(stack, unique_name, "dead-letters"))
    row = console.locator("[data-letters] tbody tr").first
    row.get_by_role("button", name="Discard").click()
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["waiting"] == 1  # not yet
    row.get_by_role("button", name="Confirm discard").click()
    expect(row).to_contain_text("Discarded.")
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["waiting"] == 0


# -- Credentials and Metrics tabs ---------------------------------------------------------------------------


def test_credentials_tab_reveals_the_password_on_click(console: Page, stack, unique_name):
    creds = make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "credentials"))
    expect(console.locator("#cred-username")).to_have_text(creds["username"])
    expect(console.locator("#cred-subject")).to_have_text(creds["subject"])
    expect(console.locator("#cred-broker_url")).to_have_text(creds["broker_url"])
    assert creds["password"] not in console.content()  # not in the page until asked for
    shot(console, "queue-credentials")
    console.get_by_role("button", name="Reveal password").click()
    expect(console.locator("#cred-password")).to_have_text(creds["password"])
    snippet = console.locator("#snippet").text_content()
    assert creds["username"] in snippet and creds["subject"] in snippet and creds["password"] not in snippet
    console.context.grant_permissions(["clipboard-read", "clipboard-write"])
    copy = console.get_by_role("button", name="Copy password", exact=True)
    copy.click()
    expect(copy).to_have_text("Copied")
    assert console.evaluate("navigator.clipboard.readText()") == creds["password"]


def test_metrics_tab_draws_a_chart_from_real_samples(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    depth = f"/v1/projects/default/queues/{unique_name}/depth"
    with stack.admin() as admin:
        def sampled(**want):
            points = admin.request("GET", depth)["points"]
            return any(all(p[k] == v for k, v in want.items()) for p in points)

        for i in range(4):
            admin.send("default", unique_name, {"n": i})
        assert wait_until(lambda: sampled(waiting=4, in_flight=0), 15)
        admin.receive("default", unique_name, 2, wait=2)
        assert wait_until(lambda: sampled(waiting=2, in_flight=2), 15)
        points = admin.request("GET", depth, params={"hours": 24})["points"]
    console.goto(queue_url(stack, unique_name, "metrics"))
    chart = console.locator('[data-chart="depth"]')
    expect(chart.locator("canvas")).to_be_visible()  # drawn by uPlot (test_console_work.py reads its data)
    expect(chart).to_have_attribute("data-points", re.compile(r"\d+"))
    drawn = int(chart.get_attribute("data-points"))
    assert drawn >= len(points) >= 2
    waiting = console.evaluate("""() => document.querySelector('[data-chart="depth"]').uplot.data[1]""")
    assert len(waiting) == drawn
    assert 4 in waiting and 2 in waiting  # the line falls from 4 waiting to 2
    expect(console.locator("[data-chart-note]")).to_contain_text("samples, one every")
    shot(console, "queue-metrics")


# -- keyboard and labels ------------------------------------------------------------------------------------


UNLABELLED = """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
    .filter((el) => !el.labels || el.labels.length === 0).map((el) => el.outerHTML)"""


def test_every_input_has_a_label(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    pages = [f"{stack.api_url}/projects/default/queues", f"{stack.api_url}/projects/default/queues/new",
             *(queue_url(stack, unique_name, tab) for tab in ("settings", "messages", "dead-letters", "credentials",
                                                             "metrics"))]
    for url in pages:
        console.goto(url)
        assert console.evaluate(UNLABELLED) == [], url
    console.context.clear_cookies()
    console.goto(f"{stack.api_url}/sign-in")
    assert console.evaluate(UNLABELLED) == []


def tab_to(page: Page, label: str, limit: int = 60) -> None:
    """Press Tab until the focused element is the one labelled ``label``."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate("""() => { const el = document.activeElement;
            return (el.labels && el.labels[0] ? el.labels[0].textContent : el.textContent || '').trim(); }""")
        if focused == label:
            return
    raise AssertionError(f"Tab never reached {label!r}")


def test_keyboard_only_sign_in_create_and_send(page: Page, stack, unique_name):
    page.goto(f"{stack.api_url}/sign-in")
    tab_to(page, "API token")
    page.keyboard.type(stack.token)
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{stack.api_url}/projects/default/queues")

    tab_to(page, "New queue")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{stack.api_url}/projects/default/queues/new")
    tab_to(page, "Name")
    page.keyboard.type(unique_name)
    tab_to(page, "Visibility timeout")
    page.keyboard.press("Control+A")
    page.keyboard.type("12")
    tab_to(page, "Create queue")
    page.keyboard.press("Enter")
    expect(page.locator("[data-state]")).to_have_text("Ready")

    tab_to(page, "Messages")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/messages$"))
    tab_to(page, "Body")
    page.keyboard.press("Control+A")
    page.keyboard.type('{"typed": true}')
    tab_to(page, "Send")
    page.keyboard.press("Enter")
    expect(page.locator('[data-result="send"]')).to_contain_text("Sent")
    tab_to(page, "Receive")
    page.keyboard.press("Space")
    expect(page.locator("[data-received] li [data-body]").first).to_have_text('{"typed": true}')
    tab_to(page, "Delete")
    page.keyboard.press("Enter")
    expect(page.locator("[data-received] li [data-outcome]").first).to_have_text("Deleted.")
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
        assert queue["visibility_timeout_seconds"] == 12
        assert admin.stats("default", unique_name)["waiting"] == 0
    assert page.script_errors == []  # type: ignore[attr-defined]


def test_the_session_cookie_works_only_with_its_csrf_header(console: Page, stack, unique_name):
    csrf = console.locator('meta[name="csrf-token"]').get_attribute("content")
    make_queue(stack, unique_name)
    url = f"{stack.api_url}/v1/projects/default/queues/{unique_name}/messages"
    refused = console.request.post(url, data={"body": "x"})
    assert refused.status == 403
    accepted = console.request.post(url, data={"body": "x"}, headers={"X-CSRF-Token": csrf})
    assert accepted.status == 201
    # a read of message bodies needs it too (test_console_session.py has every such read)
    assert console.request.get(f"{url}?limit=5").status == 403
    assert console.request.get(f"{url}?limit=5", headers={"X-CSRF-Token": csrf}).status == 200
    assert console.request.get(f"{url[:-len('/messages')]}/stats").status == 200  # counts need none


def test_sign_in_only_goes_to_pages_of_this_site(page: Page, stack):
    sign_in(page, stack, next_path="//evil.example/")
    assert page.url.startswith(stack.api_url + "/")


def test_a_peek_the_api_refuses_says_why(console: Page, stack, unique_name):
    """The queue deleted since its page was drawn: Peek shows the API's reason (it showed nothing,
    the error left to the browser's console)."""
    make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "messages"))
    with stack.admin() as admin:
        admin.delete_queue("default", unique_name)
        admin.wait_deleted("default", unique_name, timeout=20)
    console.get_by_role("button", name="Peek").click()
    expect(console.locator("[data-peek-problem]")).to_contain_text(f"Queue '{unique_name}' does not exist")
    expect(console.locator("[data-peek]")).to_be_hidden()
    expect(console.get_by_role("button", name="Peek")).to_be_enabled()
