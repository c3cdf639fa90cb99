"""The console session's defences: the CSRF header on cookie reads of secrets and message
bodies, CSRF values that are not ASCII, cookie flags over HTTPS (behind a trusted proxy, and
not from an untrusted one), the sign-in limit per client address, and the console's own error
page (with the page's headers) for a page that is not there, a broker that does not answer, a bug.

The HTTPS and sign-in-limit tests run on a stack of their own that trusts 127.0.0.1 as a proxy
(ENCLAVE_TRUSTED_PROXIES): a blocked address would lock the shared stack's other tests out."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from playwright.sync_api import Page

from enclave_queue.api import problems
from enclave_queue.console.throttle import MAX_FAILURES
from enclave_queue.testing import EnclaveStack
from tests.helpers import make_queue

HTTPS = {"X-Forwarded-Proto": "https"}


def secret_reads(name: str) -> list[str]:
    base = f"/v1/projects/default/queues/{name}"
    return [f"{base}/credentials", f"/v1/projects/default/secrets/{name}-password", f"{base}/export",
            f"{base}/messages?limit=5", f"{base}/dead-letters"]


def session_cookie(page: Page) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "enclave_session")


def test_cookie_reads_of_secrets_and_bodies_need_the_csrf_header(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    sent = httpx.post(f"{stack.api_url}/v1/projects/default/queues/{unique_name}/messages", json={"body": "a body"},
                      headers={"Authorization": f"Bearer {stack.token}"})
    assert sent.status_code == 201
    console.goto(f"{stack.api_url}/projects/default/queues")
    csrf = console.locator('meta[name="csrf-token"]').get_attribute("content")
    for path in secret_reads(unique_name):
        refused = console.request.get(stack.api_url + path)
        assert refused.status == 403, path
        assert refused.headers["content-type"] == "application/problem+json"
        assert "X-CSRF-Token" in refused.json()["detail"]
        assert console.request.get(stack.api_url + path, headers={"X-CSRF-Token": csrf}).status == 200, path
        # a bearer token needs none: no browser sends it by itself
        assert httpx.get(stack.api_url + path, headers={"Authorization": f"Bearer {stack.token}"}).status_code == 200
    # reads without secrets need none, as before
    assert console.request.get(f"{stack.api_url}/v1/projects/default/queues/{unique_name}/stats").status == 200
    assert "a body" in console.request.get(stack.api_url + secret_reads(unique_name)[2],
                                           headers={"X-CSRF-Token": csrf}).text()


def test_the_console_sends_its_csrf_header_on_secret_reads(console: Page, stack, unique_name):
    make_queue(stack, unique_name)
    console.goto(f"{stack.api_url}/projects/default/queues/{unique_name}/credentials")
    with console.expect_request(re.compile(r"/credentials$")) as seen:
        console.get_by_role("button", name="Reveal password").click()
    assert seen.value.headers["x-csrf-token"] == console.locator('meta[name="csrf-token"]').get_attribute("content")
    with stack.admin() as admin:
        password = admin.credentials("default", unique_name)["password"]
    assert console.locator("[data-password]").text_content() == password


@pytest.mark.parametrize("value", ["ü", "\u2603", "é" * 32], ids=["u-umlaut", "snowman", "latin-1"])
def test_a_csrf_value_that_is_not_ascii_is_a_403(console: Page, stack, unique_name, value):
    cookie = {"enclave_session": session_cookie(console)}
    header = {"X-CSRF-Token": value.encode()}  # raw bytes, as a client may send them
    post = httpx.post(f"{stack.api_url}/v1/projects/default/queues", json={"name": unique_name}, cookies=cookie,
                      headers=header)
    assert post.status_code == 403 and post.headers["content-type"] == "application/problem+json"
    read = httpx.get(f"{stack.api_url}/v1/projects/default/queues/{unique_name}/credentials", cookies=cookie,
                     headers=header)
    assert read.status_code == 403
    form = httpx.post(f"{stack.api_url}/projects/default/queues/new", cookies=cookie,
                      data={"name": unique_name, "csrf": value})
    assert form.status_code == 403
    sign_in = httpx.post(f"{stack.api_url}/sign-in", cookies={"enclave_signin": "x"},
                         data={"csrf": value, "token": stack.token})
    assert sign_in.status_code == 403
    with stack.admin() as admin:
        assert unique_name not in {q["name"] for q in admin.list_queues("default")}


# -- cookies over HTTPS and the sign-in limit: a stack of their own ---------------------------------


def set_cookies(response: httpx.Response) -> dict[str, dict[str, str]]:
    """Each Set-Cookie of ``response`` by name: its value and its attributes (lowercase)."""
    found = {}
    for header in response.headers.get_list("set-cookie"):
        cookie = SimpleCookie()
        cookie.load(header)
        for name, morsel in cookie.items():
            flags = {key: str(value) for key, value in morsel.items() if value}
            found[name] = {"value": morsel.value, **flags, "raw": header}
    return found


def sign_in(stack: EnclaveStack, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """The browser's sign-in, by hand: the form (and its cookie), then the post."""
    headers = headers or {}
    form = httpx.get(f"{stack.api_url}/sign-in", headers=headers)
    pre = next(iter(set_cookies(form).items()))
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    return httpx.post(f"{stack.api_url}/sign-in", data={"csrf": csrf, "token": token, "next": "/"},
                      headers={**headers, "Cookie": f"{pre[0]}={pre[1]['value']}"})


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnclaveStack]:
    """A stack behind a 'proxy' on 127.0.0.1: it believes X-Forwarded-* from there."""
    home = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    running = EnclaveStack.start(home, {"ENCLAVE_TRUSTED_PROXIES": "127.0.0.1, ::1"})
    try:
        yield running
    finally:
        running.stop()


def test_over_https_from_a_trusted_proxy_the_cookies_are_secure_and_prefixed(proxied):
    form = set_cookies(httpx.get(f"{proxied.api_url}/sign-in", headers=HTTPS))
    assert list(form) == ["__Secure-enclave_signin"]
    assert form["__Secure-enclave_signin"]["secure"] and form["__Secure-enclave_signin"]["path"] == "/sign-in"
    signed = sign_in(proxied, proxied.token, HTTPS)
    assert signed.status_code == 303
    session = set_cookies(signed)["__Host-enclave_session"]
    assert session["secure"] and session["httponly"] and session["path"] == "/"
    assert session["samesite"].lower() == "strict" and "domain" not in session
    # the prefixed cookie is the one read over HTTPS, and only over HTTPS
    queues = f"{proxied.api_url}/v1/projects/default/queues"
    assert httpx.get(queues, headers={**HTTPS, "Cookie": f"__Host-enclave_session={session['value']}"}).status_code == 200
    assert httpx.get(queues, headers={**HTTPS, "Cookie": f"enclave_session={session['value']}"}).status_code == 401
    assert httpx.get(queues, headers={"Cookie": f"__Host-enclave_session={session['value']}"}).status_code == 401
    page = httpx.get(f"{proxied.api_url}/projects/default/queues",
                     headers={**HTTPS, "Cookie": f"__Host-enclave_session={session['value']}"})
    assert page.status_code == 200
    # plain HTTP through the same proxy: the plain cookies
    signed = sign_in(proxied, proxied.token, {"X-Forwarded-Proto": "http"})
    assert set(set_cookies(signed)) == {"enclave_session", "enclave_signin"}  # the session, and the form's deleted
    assert "secure" not in set_cookies(signed)["enclave_session"]


def test_x_forwarded_proto_from_an_untrusted_address_is_ignored(stack):
    # the shared stack trusts no proxy (the default)
    form = set_cookies(httpx.get(f"{stack.api_url}/sign-in", headers=HTTPS))
    assert list(form) == ["enclave_signin"] and "secure" not in form["enclave_signin"]
    signed = sign_in(stack, stack.token, HTTPS)
    session = set_cookies(signed)["enclave_session"]
    assert "secure" not in session and "__Host-enclave_session" not in set_cookies(signed)


def test_sign_in_is_limited_per_client_address(proxied):
    attacker = {"X-Forwarded-For": "203.0.113.7"}
    for _ in range(MAX_FAILURES):
        assert sign_in(proxied, "enq_guess", attacker).status_code == 401
    refused = sign_in(proxied, "enq_guess", attacker)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert "too many failed sign-ins" in refused.text
    # not even the right token is looked at from there now
    assert sign_in(proxied, proxied.token, attacker).status_code == 429
    # another address is unaffected
    neighbour = {"X-Forwarded-For": "203.0.113.8"}
    assert sign_in(proxied, "enq_guess", neighbour).status_code == 401
    assert sign_in(proxied, proxied.token, neighbour).status_code == 303


def test_a_browser_asking_for_a_page_that_is_not_there_gets_the_console_s_page(stack):
    """Not the API's JSON problem (it was, for paths no route matches and methods a page does not take)."""
    for method, path, status in [("GET", "/projects/default/nope", 404), ("GET", "/sign-in/", 404),
                                 ("GET", "/projects/default/queues/", 404), ("PUT", "/sign-in", 405)]:
        page = httpx.request(method, stack.api_url + path, headers={"Accept": "text/html"})
        assert page.status_code == status, (path, page.text[:200])
        assert page.headers["content-type"].startswith("text/html"), (path, page.headers["content-type"])
        assert "<html" in page.text.lower()
        if status == 405:
            assert "GET" in page.headers["allow"]
    api = httpx.get(stack.api_url + "/projects/default/nope")  # no browser: the problem, as before
    assert api.headers["content-type"] == "application/problem+json"


def test_a_page_the_broker_does_not_answer_is_the_console_s_503_page(enclave_stack):
    """Not the API's JSON problem, without the page's headers (it was, for a broker that did not
    answer a page's reads): the console's error page, with its sign-out, CSP, X-Frame-Options and
    no-store, and when to ask again. A stack of its own: its broker is stopped for a moment."""
    stack = enclave_stack
    session = set_cookies(sign_in(stack, stack.token))["enclave_session"]["value"]
    url = f"{stack.api_url}/projects/default/queues"
    with httpx.Client(timeout=30, headers={"Accept": "text/html", "Cookie": f"enclave_session={session}"}) as http:
        assert http.get(url).status_code == 200
        os.kill(stack.broker_pid, signal.SIGSTOP)
        try:
            page = http.get(url)
            api = http.get(url, headers={"Accept": "application/json"})  # no browser: the problem, as before
        finally:
            os.kill(stack.broker_pid, signal.SIGCONT)
    assert page.status_code == 503, page.text[:200]
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["retry-after"] == "1"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "<h1>Broker unavailable</h1>" in page.text
    assert "The broker did not answer in time; try again shortly." in page.text
    assert 'action="/sign-out"' in page.text
    assert (api.status_code, api.headers["content-type"]) == (503, "application/problem+json")


def test_an_unexpected_error_on_a_page_is_the_console_s_500_page():
    """The catch-all too: a page a browser asked for is the error page the app was given; the API's
    answer stays the JSON problem."""
    app = FastAPI()
    problems.install(app, error_page=lambda request, title, detail, status: HTMLResponse(
        f"<h1>{title}</h1><p>{detail}</p>", status_code=status))

    @app.get("/projects/default/boom")
    @app.get("/v1/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    async def ask(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)  # answered, as a server does
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            return await client.get(path, headers={"Accept": "text/html"})

    with ThreadPoolExecutor(1) as thread:  # this one may run Playwright's event loop
        page, api = (thread.submit(asyncio.run, ask(path)).result() for path in ("/projects/default/boom", "/v1/boom"))
    assert (page.status_code, page.headers["content-type"]) == (500, "text/html; charset=utf-8")
    assert page.text == "<h1>Internal error</h1><p>The server failed to handle the request; see its log.</p>"
    assert (api.status_code, api.headers["content-type"]) == (500, "application/problem+json")
