"""The Dead letters tab in a real headless Chromium against the shared stack: a redrive says why
letters failed to move (the task's own reasons, shown as text), a refused redrive leaves no stale
result behind, and the tab's refresh does not download the letters' bodies again while nothing
changes."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from playwright.sync_api import Page, Response, Route, expect

from tests.helpers import make_queue, publish_as_an_app

#: an error that quotes HTML, as one quoting a letter's data might
HOSTILE = 'message 9: <img src=x onerror="window.__xss=1"> is not a queue'


def test_a_redrive_says_why_letters_failed_and_a_refused_one_clears_the_last(console: Page, stack, unique_name):
    dlq = f"{unique_name}-dlq"
    creds = make_queue(stack, dlq)  # a dead-letter queue, with letters published by hand: no source queue
    make_queue(stack, unique_name, dead_letter_queue=dlq)
    with ThreadPoolExecutor(1) as thread:  # this one runs Playwright's event loop
        thread.submit(asyncio.run, publish_as_an_app(creds, ["one", "two"], lambda body: {})).result()
    console.goto(f"{stack.api_url}/projects/default/queues/{dlq}/dead-letters")
    expect(console.locator("[data-letters] tbody tr")).to_have_count(2)
    console.get_by_role("button", name="Redrive").click()  # to each letter's own source: neither names one
    done = console.locator("[data-redrive-text]")
    expect(done).to_have_text("Done: 0 moved, 2 failed, 0 remaining.")
    why = console.locator("[data-redrive-errors] li")
    expect(why).to_have_text([
        f"message {n}: Message {n} of queue '{dlq}' was not dead-lettered by Enclave, so it names no source "
        "queue; give a destination." for n in (1, 2)])

    def quoting(route: Route) -> None:  # the task's answers, with an error that quotes HTML
        answer = route.fetch()
        task = answer.json()
        task["errors"] = [*task["errors"], HOSTILE]
        route.fulfill(response=answer, json=task)

    console.route("**/redrives**", quoting)
    console.get_by_role("button", name="Redrive").click()
    expect(why.last).to_have_text(HOSTILE)  # as text: no element made of it
    expect(console.locator("[data-redrive-errors] img")).to_have_count(0)
    assert console.evaluate("window.__xss") is None
    console.unroute("**/redrives**")

    console.get_by_label("At most").fill("abc")
    console.get_by_role("button", name="Redrive").click()
    expect(console.locator("#redrive-max-error")).to_contain_text("At most must be")
    expect(done).to_be_hidden()  # the last run's result is not this one's
    expect(console.locator("[data-redrive-errors]")).to_be_hidden()
    with stack.admin() as admin:
        assert admin.stats("default", dlq)["waiting"] == 2


LARGE = 200_000  #: bytes of each letter's body (a queue takes 256 KiB by default)


def test_the_tab_s_refresh_does_not_download_the_bodies_again_while_nothing_changes(console: Page, stack,
                                                                                 unique_name):
    """It downloaded every letter's body every 3 s (50 MB in 15 s with 40 letters of 250 KB)."""
    make_queue(stack, unique_name)
    with stack.admin() as admin:
        for i in range(3):
            admin.send("default", unique_name, f"{i}" * LARGE)
    fetched: list[Response] = []
    console.on("response", lambda response: fetched.append(response) if "/v1/" in response.url else None)
    console.goto(f"{stack.api_url}/projects/default/queues/{unique_name}/dead-letters")
    rows = console.locator("[data-letters] tbody tr")
    expect(rows).to_have_count(3)
    first = len(fetched)

    def refreshed(times: int) -> bool:  # the tab asked the API again at least this often since
        deadline = time.monotonic() + 20
        while len(fetched) - first < times and time.monotonic() < deadline:
            console.wait_for_timeout(200)
        return len(fetched) - first >= times

    assert refreshed(3)
    since = fetched[first:]
    assert sum(len(response.body()) for response in since) < LARGE, [response.url for response in since]

    with stack.admin() as admin:  # a change: the list is fetched again, and shows it
        admin.send("default", unique_name, "new")
    expect(rows).to_have_count(4, timeout=15_000)
