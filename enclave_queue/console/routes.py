"""The web console's pages, served by the control process at ``/``.

Pages are rendered on the server (Jinja2) from the same ``QueueService`` the HTTP API calls, and
forms that declare, change or delete a queue, or rotate its password, post here (validation errors
come back beside their fields; a rotation's outcome is shown once by the page it redirects to,
notices.py). What happens on a page after it loads (live counts, messages by hand, dead letters,
credentials, the depth chart) is ``static/console.js`` calling the HTTP API with the session
cookie and its CSRF token. The console has no powers of its own beyond the API token it was
given at sign-in. Path parameters are checked by the app-wide rules (web/paths.py); the cookies
and their flags are web/cookies.py's, and failed sign-ins are limited per address (throttle.py).
"""

from __future__ import annotations

import asyncio
import math
import re
import secrets
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from ..auth.tokens import token_digest
from ..envelope import MAX_DELAY
from ..errors import Conflict, EnclaveError, SpecError
from ..service import QueueService
from ..spec import (
    DEFAULT_GRACE,
    LIMITS,
    MAX_DEDUPE_KEY,
    MAX_GRACE,
    MAX_PRIORITY,
    MIN_PRIORITY,
    MUTABLE,
    NAME_RULE,
    parse_patch,
    parse_spec,
    rule,
    shown,
)
from ..web import cookies
from ..web.paths import QUEUE_TABS, check_path_params
from ..web.plane import plane, queue_service
from ..web.sessions import Session, same_token
from .notices import Notices
from .throttle import FailureLimiter, address_key

HERE = Path(__file__).parent
TABS = QUEUE_TABS

templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.globals.update(LIMITS=LIMITS, rule=rule, NAME_RULE=NAME_RULE, TABS=TABS, MIN_PRIORITY=MIN_PRIORITY,
                             MAX_PRIORITY=MAX_PRIORITY, DEFAULT_GRACE=DEFAULT_GRACE, MAX_GRACE=MAX_GRACE,
                             MAX_DELAY=MAX_DELAY, MAX_DEDUPE_KEY=MAX_DEDUPE_KEY)
router = APIRouter(include_in_schema=False)


class SignInNeeded(Exception):
    """A page was asked for without a session."""


class CsrfRefused(Exception):
    """A form came without its session's CSRF token."""


def install(app: FastAPI) -> None:
    """Add the console's pages to ``app`` (made by api.create_app: it serves the control plane and
    knows the trusted proxies, web/plane.py)."""
    app.state.sign_in_limiter = FailureLimiter()
    app.state.console_notices = Notices()
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    @app.exception_handler(SignInNeeded)
    async def sign_in_first(request: Request, exc: SignInNeeded) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/sign-in?next={quote(target)}", status_code=303)

    @app.exception_handler(CsrfRefused)
    async def csrf_refused(request: Request, exc: CsrfRefused) -> Response:
        return error_page(request, "Refused", "The form was refused: it did not carry this session's CSRF "
                          "token. Reload the page and try again.", 403)


# -- helpers ---------------------------------------------------------------------------------------


def service(request: Request) -> QueueService:
    return queue_service(request)


def notices(request: Request) -> Notices:
    return request.app.state.console_notices


async def session_of(request: Request) -> Session:
    runtime = plane(request)
    session = runtime.sessions.get(cookies.session_id(request))
    if session is None or await runtime.token_name(session.token_digest) is None:
        raise SignInNeeded()
    return session


async def checked_form(request: Request, session: Session) -> dict[str, str]:
    form = await request.form()
    if not session.csrf_ok(str(form.get("csrf", ""))):
        raise CsrfRefused()
    return {key: str(value) for key, value in form.items() if key != "csrf"}


def page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    response = templates.TemplateResponse(request, template, context, status_code=status)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
    return response


def error_page(request: Request, title: str, detail: str, status: int) -> HTMLResponse:
    """An error as the console's page (also for errors the API's handlers meet on a page)."""
    session = plane(request).sessions.get(cookies.session_id(request))
    return page(request, "error.html", {"title": title, "detail": detail, "session": session}, status=status)


async def frame(request: Request, session: Session, project: str, **extra: Any) -> dict[str, Any]:
    """What every signed-in page shows: the session, the project and the project switcher (the
    project's name follows its rule: every path is checked, web/paths.py)."""
    projects = await service(request).projects()
    if project not in projects:
        projects = sorted([*projects, project])
    return {"session": session, "project": project, "projects": projects, **extra}


#: what the forms call each field (_fields.html, queue.html): the words an error uses for it, not
#: the API's field name ("Retention must be …", not "retention_hours must be …")
LABELS = {
    "name": "Name",
    "visibility_timeout_seconds": "Visibility timeout",
    "max_receives": "Tries (max receives)",
    "retention_hours": "Retention",
    "max_message_bytes": "Max message size",
    "max_messages": "Capacity (max messages)",
    "max_bytes": "Storage (max bytes)",
    "dedupe_window_seconds": "Dedupe window",
    "dead_letter_queue": "Dead-letter queue",
    "retry_backoff_seconds": "Retry backoff",
    "priorities": "Priorities",
    "replicas": "Replicas",
    "grace_seconds": "Grace period",
}
FIELD_NAMES = re.compile(r"\b(" + "|".join(sorted(LABELS, key=len, reverse=True)) + r")\b")


def in_words(message: str) -> str:
    """``message`` with each field's API name replaced by its label in the forms."""
    return FIELD_NAMES.sub(lambda m: LABELS[m.group(1)], message)


def field_errors(exc: EnclaveError, form: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Each bad field's message, by field; with the ``form``, a number is shown as it was typed."""
    return {e["field"].split(".")[0]: as_typed(e["message"], form) for e in exc.errors}


def as_typed(message: str, form: Optional[dict[str, str]]) -> str:
    """``message`` with each number a form field sent shown as the text that was typed ('999'),
    not as the integer the console made of it (settings_from_form, rotate_password), and the
    fields named by their labels (``in_words``)."""
    for key in NUMBER_FIELDS:
        text = (form or {}).get(key, "").strip()
        if WHOLE_NUMBER.fullmatch(text):
            message = message.replace(f"(got {int(text)})", f"(got {shown(text)})")
    return in_words(message)


WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,19}")  #: what a number field's text may be (ASCII digits)
NUMBER_FIELDS = (*LIMITS, "grace_seconds", "replicas")  #: the forms' fields whose text becomes a number


def form_number(text: str) -> int | str:
    """A number field's text as an int; text that is no whole number stays text, for the strict
    spec to refuse with the field's name and rule ("must be an integer from 1 to 336 (got 'x')")."""
    return int(text) if WHOLE_NUMBER.fullmatch(text) else text


def settings_from_form(form: dict[str, str]) -> dict[str, Any]:
    """Form strings as a spec (whose types are strict: the form's text is converted here): empty
    numbers are left out (their defaults apply), an empty dead-letter queue or backoff means
    none, the backoff is a comma-separated list, and the priorities checkbox is sent only when
    ticked (turning them on; they never go off)."""
    data: dict[str, Any] = {}
    for key in LIMITS:
        value = form.get(key, "").strip()
        if value:
            data[key] = form_number(value)
    if "dead_letter_queue" in form:
        data["dead_letter_queue"] = form["dead_letter_queue"].strip() or None
    if "retry_backoff_seconds" in form:
        text = form["retry_backoff_seconds"].strip()
        data["retry_backoff_seconds"] = [form_number(part.strip()) for part in text.replace(" ", ",").split(",")
                                         if part.strip()] if text else None
    if "priorities" in form:
        data["priorities"] = True  # a checkbox is posted only when ticked, whatever its value
    if form.get("replicas", "").strip():  # empty: the cluster's default (a new queue)
        data["replicas"] = form_number(form["replicas"].strip())
    return data


# -- sign-in ----------------------------------------------------------------------------------------


def safe_next(target: Optional[str]) -> str:
    """Only a path on this site (never //host or a scheme) may be the page after sign-in."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def sign_in_form(request: Request, target: str, error: Optional[str], status: int) -> Response:
    """The sign-in page with a fresh form token (in its cookie too)."""
    token = secrets.token_urlsafe(24)
    response = page(request, "sign_in.html", {"csrf": token, "next": target, "error": error}, status=status)
    cookies.set_pre(response, request, token)
    return response


@router.get("/sign-in")
async def sign_in_page(request: Request, next: str = "/") -> Response:
    return sign_in_form(request, safe_next(next), None, 200)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    form = await request.form()
    target = safe_next(str(form.get("next", "/")))
    if not same_token(str(form.get("csrf", "")), cookies.pre_token(request)):
        raise CsrfRefused()
    limiter: FailureLimiter = request.app.state.sign_in_limiter
    client = address_key(request.app.state.proxies.client_host(request.scope))
    wait = limiter.retry_after(client)
    if wait:  # refused without looking at the token, so guessing gains nothing
        seconds = math.ceil(wait)
        response = sign_in_form(request, target, f"was not checked: too many failed sign-ins from your address; "
                                f"try again in {seconds} s", 429)
        response.headers["Retry-After"] = str(seconds)
        return response
    token = str(form.get("token", "")).strip()
    runtime = plane(request)
    name = await runtime.token_name(token_digest(token)) if token else None
    if name is None:
        if token:
            limiter.failed(client)
        return sign_in_form(request, target, "is required" if not token else "is not a valid API token", 401)
    limiter.succeeded(client)
    session = runtime.sessions.open(token_digest(token), name)
    response = RedirectResponse(target, status_code=303)
    cookies.set_session(response, request, session.id)
    cookies.clear_pre(response, request)
    return response


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    session = await session_of(request)
    await checked_form(request, session)
    plane(request).sessions.close(session.id)
    response = RedirectResponse("/sign-in", status_code=303)
    cookies.clear_session(response, request)
    return response


# -- queues -----------------------------------------------------------------------------------------


@router.get("/")
async def home(request: Request) -> Response:
    await session_of(request)
    return RedirectResponse("/projects/default/queues", status_code=303)


@router.get("/projects")
async def switch_project(request: Request, project: str = "default") -> Response:
    await session_of(request)
    project = project.strip()
    check_path_params({"project": project})  # a query, not a path: checked by the same rule here
    return RedirectResponse(f"/projects/{project}/queues", status_code=303)


@router.get("/projects/{project}/queues")
async def queues_page(request: Request, project: str) -> Response:
    session = await session_of(request)
    deleted = (notices(request).take(session.id, f"{project}/queues") or {}).get("deleted")
    context, rows = await asyncio.gather(frame(request, session, project, deleted=deleted),
                                         service(request).overview(project))
    return page(request, "queues.html", {**context, "rows": rows})


@router.get("/projects/{project}/queues/new")
async def new_queue_page(request: Request, project: str) -> Response:
    session = await session_of(request)
    context = await frame(request, session, project, values={}, errors={}, detail=None)
    context["queues"] = [q.name for q in await service(request).list(project)]
    return page(request, "new_queue.html", context)


@router.post("/projects/{project}/queues/new")
async def create_queue(request: Request, project: str) -> Response:
    session = await session_of(request)
    form = await checked_form(request, session)
    name = form.get("name", "").strip()
    try:
        spec = parse_spec({"name": name, "project": project, **settings_from_form(form)})
        await service(request).create(spec)
    except (SpecError, Conflict) as exc:
        # beside Name, after its label: "Name is taken: Queue 'x' already exists …"
        errors = field_errors(exc, form) if exc.errors else {"name": f"is taken: {exc.message}"} \
            if isinstance(exc, Conflict) else {}
        context = await frame(request, session, project, values=form, errors=errors, detail=as_typed(exc.message, form))
        context["queues"] = [q.name for q in await service(request).list(project)]
        return page(request, "new_queue.html", context, status=exc.status)
    notices(request).leave(session.id, f"{project}/{name}/settings", {"created": True})
    return RedirectResponse(f"/projects/{project}/queues/{name}/settings", status_code=303)


@router.get("/projects/{project}/queues/{name}")
async def queue_home(request: Request, project: str, name: str) -> Response:
    await session_of(request)
    return RedirectResponse(f"/projects/{project}/queues/{name}/settings", status_code=303)


async def queue_context(request: Request, session: Session, project: str, name: str, tab: str,
                        **extra: Any) -> dict[str, Any]:
    context = await frame(request, session, project, tab=tab, **extra)
    svc = service(request)
    queues, context["status"], context["dlq_users"] = await asyncio.gather(
        svc.list(project), svc.status(project, name), svc.dead_letter_sources(project, name))
    found = [q for q in queues if q.name == name]
    # not listed: being deleted, and get() raises the service's own NotFound
    context["queue"] = found[0] if found else await svc.get(project, name)
    context["queues"] = [q.name for q in queues if q.name != name]
    queue = context["queue"]
    context["leases"] = queue.retry_backoff_seconds or [queue.visibility_timeout_seconds]  # what the broker leases
    context.setdefault("values", {})
    context.setdefault("errors", {})
    context.setdefault("detail", None)
    return context


@router.get("/projects/{project}/queues/{name}/{tab}")
async def queue_page(request: Request, project: str, name: str, tab: str) -> Response:
    session = await session_of(request)  # the tab is one of TABS: checked with the path (web/paths.py)
    rotated = notices(request).take(session.id, f"{project}/{name}") if tab == "credentials" else None
    done = (notices(request).take(session.id, f"{project}/{name}/settings") or {}) if tab == "settings" else {}
    context = await queue_context(request, session, project, name, tab, created=bool(done.get("created")),
                                  saved=bool(done.get("saved")), rotated=rotated)
    return page(request, "queue.html", context)


@router.post("/projects/{project}/queues/{name}/settings")
async def update_queue(request: Request, project: str, name: str) -> Response:
    session = await session_of(request)
    form = await checked_form(request, session)
    try:
        data = settings_from_form(form)
        await service(request).update(project, name, parse_patch({k: v for k, v in data.items() if k in MUTABLE}))
    except (SpecError, Conflict) as exc:
        context = await queue_context(request, session, project, name, "settings", values=form,
                                      errors=field_errors(exc, form), detail=as_typed(exc.message, form))
        return page(request, "queue.html", context, status=exc.status)
    notices(request).leave(session.id, f"{project}/{name}/settings", {"saved": True})
    return RedirectResponse(f"/projects/{project}/queues/{name}/settings", status_code=303)


@router.post("/projects/{project}/queues/{name}/delete")
async def delete_queue(request: Request, project: str, name: str) -> Response:
    session = await session_of(request)
    form = await checked_form(request, session)
    if form.get("confirm", "").strip() != name:
        context = await queue_context(request, session, project, name, "settings",
                                      errors={"confirm": f"must be the queue's name, '{name}'"},
                                      detail=f"Type '{name}' to confirm the delete.")
        return page(request, "queue.html", context, status=422)
    try:
        await service(request).delete(project, name)
    except Conflict as exc:
        context = await queue_context(request, session, project, name, "settings",
                                      errors={"confirm": exc.message}, detail=exc.message)
        return page(request, "queue.html", context, status=409)
    notices(request).leave(session.id, f"{project}/queues", {"deleted": name})
    return RedirectResponse(f"/projects/{project}/queues", status_code=303)


@router.post("/projects/{project}/queues/{name}/rotate-password")
async def rotate_password(request: Request, project: str, name: str) -> Response:
    """A new password (the service's rotate_password) with the grace the form gives (empty: the
    default); the Credentials tab it redirects to shows the rotation once and reveals the new
    password. A refused grace comes back beside its field, and nothing is rotated."""
    session = await session_of(request)
    form = await checked_form(request, session)
    text = form.get("grace_seconds", "").strip()
    try:
        rotated = await service(request).rotate_password(project, name, form_number(text) if text else DEFAULT_GRACE)
    except SpecError as exc:
        context = await queue_context(request, session, project, name, "credentials", values=form,
                                      errors=field_errors(exc, form), detail=as_typed(exc.message, form))
        return page(request, "queue.html", context, status=exc.status)
    notices(request).leave(session.id, f"{project}/{name}", {
        "password_version": rotated["password_version"],
        "previous_password_valid_until": rotated["previous_password_valid_until"],
    })
    return RedirectResponse(f"/projects/{project}/queues/{name}/credentials", status_code=303)
