"""Console: page load of the queues list with 100 queues, and a send in the Messages tab until the
message is shown as received, each against the raw HTTP API calls in the same run.

- page load: headless Chromium (Debian's, through Playwright) loads
  ``/projects/bench/queues`` (server-rendered table of 100 queues with their depths; the page's
  own CSS and JS), timed by the browser from navigation start to the end of the ``load`` event. Baselines: ``GET /v1/projects/bench/queues`` (the
  declarations) and ``GET /v1/projects/bench/queues/-/overview`` (the same rows with depths, what
  the page shows), each with httpx on a kept-alive connection;
- send to received: in the Messages tab, submit Send (as a click does), wait for the
  confirmation, submit Receive, until the message's body is on the page, timed in the page. Baseline: ``POST …/messages`` then
  ``POST …/messages/receive`` with httpx.

Medians of N repetitions after a warm-up. The browser is started once (not timed).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from playwright.sync_api import sync_playwright

from enclave_queue.testing import CHROMIUM_ARGS, chromium_path

from . import PROJECT, Report, enclave_stack, main, median, new_queue, percentile, quiet, say, wait_ready

NAME = "console"
QUEUES = 100


#: in the page, timed by the browser's clock: submit the send form as a click would, wait for the
#: confirmation, submit the receive form, until the body is on the page
BY_HAND = """async (body) => {
  const until = (ok) => new Promise((resolve) => {
    if (ok()) return resolve();
    const watch = new MutationObserver(() => { if (ok()) { watch.disconnect(); resolve(); } });
    watch.observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  const send = document.querySelector('[data-action="send"]');
  const result = document.querySelector('[data-result="send"]');
  const before = result.textContent;
  send.elements.body.value = body;
  const started = performance.now();
  send.requestSubmit();
  await until(() => result.textContent !== before);
  document.querySelector('[data-action="receive"]').requestSubmit();
  await until(() => [...document.querySelectorAll('[data-received] li [data-body]')].some((e) => e.textContent === body));
  return performance.now() - started;
}"""


def create_queues(stack: Any, count: int) -> None:
    def one(index: int) -> None:
        with stack.admin() as admin:
            admin.create_queue(PROJECT, {"name": f"list-{index:03d}"})
            wait_ready(admin, PROJECT, f"list-{index:03d}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))
    quiet(stack)


def timed(call: Any, repeat: int) -> list[float]:
    call()  # warm-up
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    repeat = 5 if quick else 25
    chromium = chromium_path()
    report.info.update({"queues": QUEUES, "repeat": repeat, "browser": chromium})
    with enclave_stack() as stack:
        say(f"creating {QUEUES} queues")
        create_queues(stack, QUEUES - 1)
        new_queue(stack, "by-hand")
        api = f"{stack.api_url}/v1/projects/{PROJECT}/queues"
        auth = {"Authorization": f"Bearer {stack.token}"}
        with httpx.Client(headers=auth, timeout=30) as http, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page()
                page.goto(f"{stack.api_url}/sign-in")
                page.fill("#token", stack.token)
                page.click("button[type=submit]")
                page.wait_for_url("**/projects/default/queues")

                say("page load of the queues list")
                url = f"{stack.api_url}/projects/{PROJECT}/queues"

                def load_page() -> float:
                    page.goto(url, wait_until="load")
                    rows = page.locator("tr[data-queue]").count()
                    if rows != QUEUES:
                        raise RuntimeError(f"the page shows {rows} queues, not {QUEUES}")
                    # the browser's own clock: navigation start to the end of the load event
                    return page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")

                load_page()
                pages = [load_page() for _ in range(repeat)]
                lists = timed(lambda: http.get(api).raise_for_status(), repeat)
                overviews = timed(lambda: http.get(f"{api}/-/overview").raise_for_status(), repeat)

                say("send to received in the Messages tab")
                page.goto(f"{stack.api_url}/projects/{PROJECT}/queues/by-hand/messages")
                page.get_by_label("Text").check()
                counter = iter(range(10**6))

                def by_hand() -> float:
                    body = f"message-{next(counter)}"
                    took = page.evaluate(BY_HAND, body)
                    page.locator("[data-received] li [data-body]").first.filter(has_text=body).wait_for()
                    return took

                def raw() -> None:
                    http.post(f"{api}/by-hand/messages", json={"body": "raw"}).raise_for_status()
                    got = http.post(f"{api}/by-hand/messages/receive", json={"max": 1, "wait": 2}).json()["messages"]
                    if not got:
                        raise RuntimeError("the raw receive got nothing")

                by_hand()
                hands = [by_hand() for _ in range(repeat)]
                raws = timed(raw, repeat)
            finally:
                browser.close()
    report.info["ms"] = {"page": pages, "api_list": lists, "api_overview": overviews, "by_hand": hands, "raw": raws}
    p50 = median
    report.add(f"queues page load, {QUEUES} queues (p50)", p50(pages), "ms", baseline=p50(lists),
               baseline_case="GET /v1/…/queues (httpx)",
               note=f"p95 {percentile(pages, 95):.0f} ms; the page reads every queue's depth")
    report.add(f"queues page load, {QUEUES} queues, vs the overview API (p50)", p50(pages), "ms",
               baseline=p50(overviews), baseline_case="GET /v1/…/queues/-/overview (httpx)")
    report.add("Messages tab: send until shown received (p50)", p50(hands), "ms", baseline=p50(raws),
               baseline_case="POST messages + POST messages/receive (httpx)",
               note=f"p95 {percentile(hands, 95):.0f} ms")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.console")
