"""Every route that changes something refuses a request that carries the console's session cookie
but not the session's CSRF token, generated from the app's route table (a new route or form
without the check fails here): the API's routes want the X-CSRF-Token header, the console's
forms their csrf field. The queue the paths name is real, and still there afterwards, with its
settings and its password unchanged (a refused rotation rotates nothing). The sign-in form, used
before there is a session, wants the token its own form was served with (in its cookie too)."""

import re

import httpx
import pytest

from enclave_queue.server.app import create_app
from enclave_queue.web.paths import endpoints
from tests.console.test_console_session import set_cookies, sign_in
from tests.helpers import ANY_METHOD, SIGNED_ROUTES, make_queue

CHANGING = {"POST", "PATCH", "PUT", "DELETE"}
NOT_SIGNED_IN_YET = {"/sign-in"}  #: its own form token (tests/console/test_console_session.py)


def changing_routes(signed_in: bool) -> list[tuple[str, str]]:
    """(method, path) of each route that changes something: those used in a session, or those
    used before one (``signed_in=False``)."""
    table = []
    for route in endpoints(create_app(None).routes):
        if (route.path in NOT_SIGNED_IN_YET) == signed_in or route.path in SIGNED_ROUTES:
            continue  # a signed route takes no cookie: a page elsewhere cannot sign for it
        for method in sorted(set(route.methods or ANY_METHOD) & CHANGING):
            table.append((method, route.path))
    return table


ROUTES = changing_routes(signed_in=True)
SIGN_IN_ROUTES = changing_routes(signed_in=False)


def test_the_route_table_has_the_forms_and_the_api():
    paths = {path for _, path in ROUTES}
    assert {"/sign-out", "/projects/{project}/queues/new", "/projects/{project}/queues/{name}/settings",
            "/projects/{project}/queues/{name}/delete", "/v1/projects/{project}/queues/{name}",
            "/projects/{project}/queues/{name}/rotate-password",
            "/v1/projects/{project}/queues/{name}/rotate-password"} <= paths
    assert SIGN_IN_ROUTES == [("POST", "/sign-in")]


@pytest.fixture(scope="module")
def victim(stack) -> str:
    make_queue(stack, "csrf-victim")
    yield "csrf-victim"
    with stack.admin() as admin:
        admin.delete_queue("default", "csrf-victim")


@pytest.fixture(scope="module")
def victim_password(stack, victim) -> str:
    """The victim's password before the first refused request (module scope: read once)."""
    with stack.admin() as admin:
        return admin.credentials("default", victim)["password"]


@pytest.mark.parametrize("csrf", [None, "wrong", "ünïcode"], ids=["none", "wrong", "non-ascii"])
@pytest.mark.parametrize(("method", "template"), ROUTES)
def test_a_cookie_without_the_sessions_csrf_token_changes_nothing(stack, victim, victim_password, method, template,
                                                                   csrf):
    signed = sign_in(stack, stack.token)
    assert signed.status_code == 303
    cookies = {name: cookie["value"] for name, cookie in set_cookies(signed).items()}
    path = template.format(project="default", name=victim, receipt="abc", seq="1", task_id="r00000000",
                           secret=f"{victim}-password", tab="settings")
    headers: dict[str, str | bytes] = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
    if csrf is not None:
        headers["X-CSRF-Token"] = csrf.encode()  # as bytes: UTF-8 on the wire
    form = {"name": "csrf-made", "visibility_timeout_seconds": "7", **({"csrf": csrf} if csrf else {})}
    response = httpx.request(method, stack.api_url + path, headers=headers,
                             **({"json": {}} if path.startswith("/v1/") else {"data": form}))
    assert response.status_code == 403, (method, path, response.status_code, response.text[:200])
    with stack.admin() as admin:
        queue = admin.get_queue("default", victim)
        assert queue["visibility_timeout_seconds"] == 30
        assert admin.credentials("default", victim)["password"] == victim_password
        assert "csrf-made" not in {q["name"] for q in admin.list_queues("default")}


def form_token(page: httpx.Response) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)


@pytest.mark.parametrize("csrf", ["its-own", "none", "wrong", "another-forms"])
@pytest.mark.parametrize(("method", "path"), SIGN_IN_ROUTES)
def test_a_sign_in_without_its_own_forms_token_signs_nobody_in(stack, method, path, csrf):
    """With the right API token: only the token of the form whose cookie comes along signs in (a
    page elsewhere cannot post a sign-in of its own choosing, to a session the attacker holds)."""
    form = httpx.get(stack.api_url + path)
    (cookie_name, cookie), = set_cookies(form).items()
    data = {"token": stack.token, "next": "/"}
    if csrf == "its-own":
        data["csrf"] = form_token(form)
    elif csrf == "wrong":
        data["csrf"] = "forged"
    elif csrf == "another-forms":
        data["csrf"] = form_token(httpx.get(stack.api_url + path))
    response = httpx.request(method, stack.api_url + path, data=data,
                             headers={"Cookie": f"{cookie_name}={cookie['value']}"})
    session = set_cookies(response).get("enclave_session")
    if csrf == "its-own":
        assert response.status_code == 303 and session and session["value"]
    else:
        assert response.status_code == 403, (csrf, response.status_code, response.text[:200])
        assert session is None or not session["value"]
