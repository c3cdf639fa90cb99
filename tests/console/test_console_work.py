"""The console as a queue's user works with it, in a real headless Chromium against the shared
stack: the Send form's delay, dedupe key and headers; what a hand-back did; clearing handled
cards; a source queue's dead letters where they are (on its dead-letter queue), counted per
source; Save saying so and the conditions following without a reload; errors in the form's words;
the lease a retry schedule sets; the Metrics charts read by their data; a 420 px window, which a
body, header or error of punctuation does not widen."""

from __future__ import annotations

import re
import time
from pathlib import Path

from playwright.sync_api import Page, expect

from enclave_queue.client.sync import connect_sync
from tests.console.conftest import shot
from tests.helpers import make_queue

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def queue_url(stack, name: str, tab: str = "settings", project: str = "default") -> str:
    return f"{stack.api_url}/projects/{project}/queues/{name}/{tab}"


def wait_until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def docs_shot(page: Page, name: str) -> None:
    """A screenshot the docs show as docs/images/<name>.png, saved under tests/artifacts/console/
    (copy it there when the page changes: the tests leave the repository's files alone)."""
    assert (DOCS_IMAGES / f"{name}.png").exists()
    shot(page, name)


def test_send_with_a_delay_a_dedupe_key_and_headers(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    console.goto(queue_url(stack, unique_name, "messages"))
    result = console.locator('[data-result="send"]')
    console.get_by_label("Body", exact=True).fill('{"to": "ada@example.com"}')
    console.get_by_label("Delay").fill("3600")
    console.get_by_label("Dedupe key").fill("welcome-42")
    console.get_by_label("Headers").fill("Trace-Id: 4bf92f35\nTenant: acme")
    console.get_by_role("button", name="Send").click()
    expect(result).to_have_text(re.compile(r"^Sent: sequence 1, delayed until .+\.$"))
    console.get_by_role("button", name="Send").click()  # the same dedupe key again: nothing added
    expect(result).to_have_text("Not added: a duplicate of sequence 1 (its dedupe key was sent already).")
    with stack.admin() as admin:
        stats = admin.stats("default", unique_name)
        assert (stats["delayed"], stats["waiting"], stats["sent"]) == (1, 0, 1)

    # a refused value: beside its field, in the form's words, and the last send's result is gone
    console.get_by_label("Delay").fill("a week")
    console.get_by_role("button", name="Send").click()
    expect(console.locator("#send-delay-error")).to_have_text(re.compile(r"^Delay must be a number of seconds from 0 "
                                                                         r"to 604800"))
    expect(result).to_have_text("")
    console.get_by_label("Delay").fill("")
    console.get_by_label("Dedupe key").fill("")
    console.get_by_label("Headers").fill("Nats-Msg-Id: forged")
    console.get_by_role("button", name="Send").click()
    expect(console.locator("#send-headers-error")).to_contain_text("Headers has a name that is not a header's own")
    expect(console.locator("#send-delay-error")).to_be_hidden()
    console.get_by_label("Headers").fill("no colon here")
    console.get_by_role("button", name="Send").click()
    expect(console.locator("#send-headers-error")).to_have_text('Headers line 1 is not “Name: value” (got "no colon here")')

    console.get_by_label("Headers").fill("Trace-Id: 4bf92f35")
    console.get_by_role("button", name="Send").click()
    expect(result).to_have_text("Sent: sequence 2.")
    console.get_by_role("button", name="Receive").click()
    card = console.locator("[data-received] li").first
    expect(card.locator("[data-headers]")).to_have_text("Trace-Id4bf92f35")
    with stack.admin() as admin:
        assert admin.peek("default", unique_name)[0]["headers"] == {"Trace-Id": "4bf92f35"}


def test_a_hand_back_on_the_last_allowed_receive_says_it_goes_to_the_dead_letter_queue(console: Page, stack,
                                                                                       unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    make_queue(stack, unique_name, max_receives=2, dead_letter_queue=dlq)
    with stack.admin() as admin:
        admin.send("default", unique_name, "poison")
    console.goto(queue_url(stack, unique_name, "messages"))
    console.get_by_role("button", name="Receive").click()
    first = console.locator("[data-received] li").first
    first.get_by_role("button", name="Hand back").click()
    expect(first.locator("[data-outcome]")).to_have_text("Handed back: visible again now.")
    console.get_by_role("button", name="Receive").click()
    last = console.locator("[data-received] li").first
    expect(last.locator("[data-count]")).to_have_text("2")
    last.get_by_role("button", name="Hand back").click()
    expect(last.locator("[data-outcome]")).to_have_text(
        f"Handed back on its last allowed receive (2 of 2): it goes to the dead-letter queue {dlq}, not back to "
        "this queue.")
    # and so it does: the Dead letters tab shows it there
    console.goto(queue_url(stack, unique_name, "dead-letters"))
    expect(console.locator("[data-letters] tbody tr")).to_have_count(1, timeout=15_000)
    expect(console.locator("[data-letters] tbody tr")).to_contain_text("poison")


def test_handled_cards_can_be_cleared(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    with stack.admin() as admin:
        for body in ("one", "two"):
            admin.send("default", unique_name, body)
    console.goto(queue_url(stack, unique_name, "messages"))
    clear = console.get_by_role("button", name="Clear handled")
    expect(clear).to_be_hidden()
    console.get_by_label("How many").fill("2")
    console.get_by_role("button", name="Receive").click()
    cards = console.locator("[data-received] li")
    expect(cards).to_have_count(2)
    cards.filter(has_text="one").get_by_role("button", name="Delete").click()
    expect(clear).to_be_visible()
    clear.click()
    expect(cards).to_have_count(1)
    expect(cards.first.locator("[data-body]")).to_have_text("two")  # the one still leased stays
    expect(clear).to_be_hidden()


def test_a_source_queue_shows_its_own_dead_letters_where_they_are_and_counts_them(console: Page, stack, unique_name):
    dlq, a, b = f"{unique_name}-dlq", f"{unique_name}-a", f"{unique_name}-b"
    make_queue(stack, dlq)
    creds_a = make_queue(stack, a, dead_letter_queue=dlq, max_receives=3)
    creds_b = make_queue(stack, b, dead_letter_queue=dlq, max_receives=3)
    with connect_sync(creds_a) as queue:
        queue.put_many([{"order": 1}, {"order": 2}])
        for message in queue.receive(2, wait=5):
            message.reject(error="card declined")
    with connect_sync(creds_b) as queue:
        queue.put({"order": 3})
        queue.get(timeout_s=5).reject(error="no stock")

    # the queues table counts each source's own letters, not the whole shared dead-letter queue
    console.goto(f"{stack.api_url}/projects/default/queues")
    expect(console.locator(f'tr[data-queue="{a}"] [data-col="dead"]')).to_have_text("2")
    expect(console.locator(f'tr[data-queue="{b}"] [data-col="dead"]')).to_have_text("1")
    expect(console.locator(f'tr[data-queue="{dlq}"] [data-col="dead"]')).to_have_text("–")

    console.goto(queue_url(stack, a, "dead-letters"))
    rows = console.locator("[data-letters] tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("card declined")
    expect(console.locator("[data-letter-counts]")).to_have_text(f"2 dead letters of {a} on {dlq} (which holds 3 in all).")
    docs_shot(console, "console-dead-letters")
    rows.first.get_by_role("button", name="Retry").click()
    notice = console.locator("[data-dl-notice]")
    expect(notice).to_have_text(re.compile(rf"^Dead letter \d+ is back on {a} as message 3; its tries start again\.$"))
    expect(rows).to_have_count(1)
    console.get_by_role("button", name="Redrive").click()  # from where the letters are, this queue's only
    expect(console.locator("[data-redrive-text]")).to_have_text("Done: 1 moved, 0 failed, 0 remaining.")
    expect(console.get_by_text(f"No dead letters of {a} on {dlq}.")).to_be_visible()
    with stack.admin() as admin:
        assert sorted(m["body"] for m in admin.peek("default", a)) == ['{"order":1}', '{"order":2}']
        assert [letter["source_queue"] for letter in admin.list_dead_letters("default", dlq)["dead_letters"]] == [b]

    console.goto(queue_url(stack, dlq, "dead-letters"))  # the dead-letter queue itself: every source's
    expect(console.locator("[data-letter-counts]")).to_have_text(f"1 message: 1 from {b}.")
    expect(console.locator("[data-letters] tbody tr")).to_have_count(1)


def test_save_says_saved_and_the_conditions_follow_without_a_reload(console: Page, stack, unique_name):
    console.goto(f"{stack.api_url}/projects/default/queues/new")
    console.get_by_label("Name").fill(unique_name)
    console.get_by_role("button", name="Create queue").click()
    console.evaluate("window.notReloaded = true")
    expect(console.locator("[data-state]")).to_have_text("Ready")
    ready = console.locator("[data-conditions] tr").filter(has_text="Ready")
    expect(ready.locator("td").first).to_have_text("True")  # the table, not only the line at the top
    expect(console.locator("[data-generation]")).to_contain_text("Generation 1, applied 1;")
    assert console.evaluate("window.notReloaded") is True

    console.get_by_label("Retention").fill("999")
    console.get_by_role("button", name="Save changes").click()
    expect(console.locator("#f-retention_hours-error")).to_have_text("Retention must be an integer from 1 to 336 (got '999')")
    expect(console.locator(".problem")).to_have_text("Retention must be an integer from 1 to 336 (got '999').")
    expect(console.locator("[data-saved]")).to_have_count(0)
    console.get_by_label("Retention").fill("48")
    console.get_by_role("button", name="Save changes").click()
    expect(console).to_have_url(queue_url(stack, unique_name))
    expect(console.locator("[data-saved]")).to_contain_text("Saved.")
    expect(console.locator("[data-generation]")).to_contain_text("Generation 2, applied 2;")
    with stack.admin() as admin:
        assert admin.get_queue("default", unique_name)["retention_hours"] == 48


def test_a_retry_backoff_is_the_lease_the_console_shows(console: Page, stack, unique_name):
    make_queue(stack, unique_name, visibility_timeout_seconds=600, max_receives=3, retry_backoff_seconds=[4, 8])
    console.goto(queue_url(stack, unique_name))
    expect(console.locator("[data-lease-note]")).to_contain_text("the visibility timeout (600 s) is not used")
    console.goto(queue_url(stack, unique_name, "messages"))
    expect(console.locator("[data-lease-hint]")).to_contain_text("its retry backoff's entry (4 s, 8 s by receive")
    with stack.admin() as admin:
        admin.send("default", unique_name, "x")
    console.get_by_role("button", name="Receive").click()
    card = console.locator("[data-received] li").first
    expect(card.locator("[data-countdown]")).to_have_text(re.compile(r"^Hidden for [1-4] s more$"))  # not 600 s
    expect(card.locator("[data-countdown]")).to_have_text("Visible again: its visibility timeout ran out")
    console.get_by_role("button", name="Receive").click()  # and the broker agrees: it is back, for 8 s now
    again = console.locator("[data-received] li").first
    expect(again.locator("[data-count]")).to_have_text("2")
    expect(again.locator("[data-countdown]")).to_have_text(re.compile(r"^Hidden for [5-8] s more$"))


CHART = """(chart) => { const box = document.querySelector(`[data-chart="${chart}"]`);
    return {data: box.uplot.data, ...box.dataset}; }"""


def test_the_metrics_charts_draw_the_samples_and_their_rates_for_the_period_asked(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    depth = f"/v1/projects/default/queues/{unique_name}/depth"
    with stack.admin() as admin:
        assert wait_until(lambda: admin.request("GET", depth, params={"hours": 1})["points"], 20)  # sampled empty
        for i in range(5):
            admin.send("default", unique_name, {"n": i})
        admin.receive("default", unique_name, 2, wait=2)

        def sampled() -> bool:
            points = admin.request("GET", depth, params={"hours": 1})["points"]
            return any(p["waiting"] == 3 and p["in_flight"] == 2 for p in points) and len(points) >= 3

        assert wait_until(sampled, 20)
    console.goto(queue_url(stack, unique_name, "metrics"))
    console.get_by_label("Period").select_option("1")
    expect(console.locator('[data-chart="depth"]')).to_have_attribute("data-hours", "1")
    with stack.admin() as admin:
        points = admin.request("GET", depth, params={"hours": 1})["points"]
    drawn = console.evaluate(CHART, "depth")
    n = len(drawn["data"][0])
    assert n >= len(points) - 1 >= 2  # a sample or two may have come between the two reads
    by_time = {round(x): (w, f) for x, w, f in zip(drawn["data"][0], drawn["data"][1], drawn["data"][2], strict=True)}
    assert (3, 2) in by_time.values() and all(isinstance(w, int) for w, _ in by_time.values())
    ticks = [float(t) for t in drawn["yTicks"].split(",")]
    assert ticks[0] == 0 and all(t == int(t) for t in ticks)  # whole messages, evenly spaced
    assert len({b - a for a, b in zip(ticks, ticks[1:], strict=False)}) == 1
    highest = max(v for series in drawn["data"][1:] for v in series if v is not None)
    assert ticks[-1] <= float(drawn["yMax"]) and highest <= float(drawn["yMax"])
    # each value is drawn where the axis says it is: the ticks' heights are evenly spaced too
    heights = console.evaluate("""(ticks) => ticks.map((t) =>
        document.querySelector('[data-chart="depth"]').uplot.valToPos(t, "y"))""", ticks)
    gaps = [round(b - a, 3) for a, b in zip(heights, heights[1:], strict=False)]
    assert len(set(gaps)) == 1 and gaps[0] < 0  # (canvas y grows downwards)
    assert round(float(drawn["xMax"]) - float(drawn["xMin"])) == 3600  # the hour asked for

    rates = console.evaluate(CHART, "rates")
    sent = [r for r in rates["data"][1] if r is not None]
    assert sent and max(sent) > 0  # 5 sent between two samples: a rate above zero
    docs_shot(console, "console-metrics")

    console.get_by_label("Period").select_option("24")
    expect(console.locator('[data-chart="depth"]')).to_have_attribute("data-hours", "24")
    wide = console.evaluate(CHART, "depth")
    assert round(float(wide["xMax"]) - float(wide["xMin"])) == 24 * 3600  # another axis, not the hour's


PAGES = ("settings", "messages", "dead-letters", "credentials", "metrics")


def test_every_page_fits_a_420_px_window(console: Page, stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    make_queue(stack, unique_name, dead_letter_queue=dlq, max_receives=2)
    with stack.admin() as admin:
        admin.send("default", unique_name, {"to": "someone.with.a.long.address@example.com"})
    console.set_viewport_size({"width": 420, "height": 800})
    for url in (f"{stack.api_url}/projects/default/queues", f"{stack.api_url}/projects/default/queues/new",
                *(queue_url(stack, unique_name, tab) for tab in PAGES)):
        console.goto(url)
        console.wait_for_load_state("networkidle")
        assert console.evaluate("document.documentElement.scrollWidth") <= 420, url
    console.goto(f"{stack.api_url}/projects/default/queues")
    row = console.locator(f'tr[data-queue="{unique_name}"]')
    box = row.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 420
    expect(row.locator('[data-col="waiting"]')).to_be_visible()
    shot(console, "queues-420px")


#: valid JSON with no place a line may break: ``word-break: break-all`` breaks between letters,
#: not in a run of punctuation (``overflow-wrap: anywhere`` does)
BRACKETS = "[" * 500 + "]" * 500


def test_a_body_header_and_error_of_punctuation_wrap_in_a_420_px_window(console: Page, stack, unique_name):
    """A received card, a peek and a dead letter whose body, header and last error are long runs of
    punctuation: the page stays as wide as the window (it was 7870 px wide in 420 px)."""
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, dead_letter_queue=dlq, max_receives=3)
    with connect_sync(creds) as queue:
        queue.send(BRACKETS, headers={"Trace-Id": "(" * 300})
        [dying] = queue.receive(1, wait=5)
        dying.reject(error="!" * 300)
        queue.send(BRACKETS, headers={"Trace-Id": "{" * 300})
    console.set_viewport_size({"width": 420, "height": 800})

    def fits(*cells) -> None:
        """The page is no wider than the window, nor is any of ``cells``, whose text wraps within
        it (a table scrolls in its box when its columns need more room, but a body of brackets
        made one 8779 px wide; an error cell's text ran out of its 30rem)."""
        assert console.evaluate("document.documentElement.scrollWidth") <= 420
        for cell in cells:
            box = cell.bounding_box()
            assert box is not None and box["width"] <= 420
            inside, shown = cell.evaluate("cell => [cell.scrollWidth, cell.clientWidth]")
            assert inside <= shown

    console.goto(queue_url(stack, unique_name, "messages"))
    console.get_by_role("button", name="Peek").click()
    peeked = console.locator("[data-peek] tbody tr pre")
    expect(peeked).to_have_text(BRACKETS)
    fits(peeked)
    console.get_by_role("button", name="Receive").click()
    card = console.locator("[data-received] li").first
    expect(card.locator("[data-body]")).to_have_text(BRACKETS)
    expect(card.locator("[data-headers]")).to_contain_text("{" * 300)
    fits(card)
    console.goto(queue_url(stack, dlq, "dead-letters"))
    letter = console.locator("[data-letters] tbody tr").first
    expect(letter.locator("[data-last-error]")).to_have_text("!" * 300, timeout=15_000)
    fits(letter.locator("[data-last-error]"), letter.locator("pre"))
    shot(console, "punctuation-420px")
