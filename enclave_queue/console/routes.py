"""The web console's pages, served by the control process at ``/``.

Pages are rendered on the server (Jinja2) from the same ``QueueService`` the HTTP API calls, and
forms that declare, change or delete a queue post here (validation errors come back beside their
fields). What happens on a page after it loads (live counts, messages by hand, dead letters,
credentials, the depth chart) is ``static/console.js`` calling the HTTP API with the session
cookie and its CSRF token. The console has no powers of its own beyond the API token it was
given at sign-in.
"""

from __future__ import annotations

import asyncio
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
from ..errors import Conflict, EnclaveError, NotFound, SpecError
from ..service import QueueService
from ..spec import LIMITS, MAX_PRIORITY, MIN_PRIORITY, MUTABLE, NAME_RULE, PROJECT_RULE, parse_patch, parse_spec, rule
from .sessions import COOKIE, LIFETIME, PRE_COOKIE, Session

HERE = Path(__file__).parent
TABS = ("settings", "messages", "dead-letters", "credentials", "metrics")
PROJECT = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
NAME = re.compile(r"^[a-z][a-z0-9-]{2,39}$")

templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.globals.update(LIMITS=LIMITS, rule=rule, NAME_RULE=NAME_RULE, TABS=TABS, MIN_PRIORITY=MIN_PRIORITY,
                             MAX_PRIORITY=MAX_PRIORITY)
router = APIRouter(include_in_schema=False)


class SignInNeeded(Exception):
    """A page was asked for without a session."""


class CsrfRefused(Exception):
    """A form came without its session's CSRF token."""


def install(app: FastAPI) -> None:
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
    return request.app.state.runtime.service


async def session_of(request: Request) -> Session:
    runtime = request.app.state.runtime
    session = runtime.sessions.get(request.cookies.get(COOKIE))
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
    session = request.app.state.runtime.sessions.get(request.cookies.get(COOKIE))
    return page(request, "error.html", {"title": title, "detail": detail, "session": session}, status=status)


def check_project(project: str) -> None:
    if not PROJECT.match(project):
        raise NotFound(f"There is no project '{project}': a project is {PROJECT_RULE}.")


async def frame(request: Request, session: Session, project: str, **extra: Any) -> dict[str, Any]:
    """What every signed-in page shows: the session, the project and the project switcher."""
    check_project(project)
    projects = await service(request).projects()
    if project not in projects:
        projects = sorted([*projects, project])
    return {"session": session, "project": project, "projects": projects, **extra}


def field_errors(exc: EnclaveError) -> dict[str, str]:
    return {e["field"].split(".")[0]: e["message"] for e in exc.errors}


def settings_from_form(form: dict[str, str]) -> dict[str, Any]:
    """Form strings as a spec: empty numbers are left out (their defaults apply), an empty
    dead-letter queue or backoff means none, the backoff is a comma-separated list, and the
    priorities checkbox is sent only when ticked (turning them on; they never go off)."""
    data: dict[str, Any] = {}
    for key in LIMITS:
        value = form.get(key, "").strip()
        if value:
            data[key] = value
    if "dead_letter_queue" in form:
        data["dead_letter_queue"] = form["dead_letter_queue"].strip() or None
    if "retry_backoff_seconds" in form:
        text = form["retry_backoff_seconds"].strip()
        data["retry_backoff_seconds"] = [part.strip() for part in text.replace(" ", ",").split(",") if part.strip()] \
            if text else None
    if "priorities" in form:
        data["priorities"] = form["priorities"]
    return data


# -- sign-in ----------------------------------------------------------------------------------------


def safe_next(target: Optional[str]) -> str:
    """Only a path on this site (never //host or a scheme) may be the page after sign-in."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


@router.get("/sign-in")
async def sign_in_page(request: Request, next: str = "/") -> Response:
    token = secrets.token_urlsafe(24)
    response = page(request, "sign_in.html", {"csrf": token, "next": safe_next(next), "error": None})
    response.set_cookie(PRE_COOKIE, token, max_age=600, httponly=True, samesite="strict", path="/sign-in")
    return response


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    form = await request.form()
    target = safe_next(str(form.get("next", "/")))
    pre = request.cookies.get(PRE_COOKIE, "")
    if not pre or not secrets.compare_digest(pre, str(form.get("csrf", ""))):
        raise CsrfRefused()
    token = str(form.get("token", "")).strip()
    runtime = request.app.state.runtime
    name = await runtime.token_name(token_digest(token)) if token else None
    if name is None:
        fresh = secrets.token_urlsafe(24)
        message = "is required" if not token else "is not a valid API token"
        response = page(request, "sign_in.html", {"csrf": fresh, "next": target, "error": message}, status=401)
        response.set_cookie(PRE_COOKIE, fresh, max_age=600, httponly=True, samesite="strict", path="/sign-in")
        return response
    session = runtime.sessions.open(token_digest(token), name)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, session.id, max_age=int(LIFETIME), httponly=True, samesite="strict", path="/")
    response.delete_cookie(PRE_COOKIE, path="/sign-in")
    return response


@router.post("/sign-out")
async def sign_out(request: Request) -> Response:
    session = await session_of(request)
    await checked_form(request, session)
    request.app.state.runtime.sessions.close(session.id)
    response = RedirectResponse("/sign-in", status_code=303)
    response.delete_cookie(COOKIE, path="/")
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
    check_project(project)
    return RedirectResponse(f"/projects/{project}/queues", status_code=303)


@router.get("/projects/{project}/queues")
async def queues_page(request: Request, project: str, deleted: Optional[str] = None) -> Response:
    session = await session_of(request)
    check_project(project)
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
    check_project(project)
    form = await checked_form(request, session)
    name = form.get("name", "").strip()
    try:
        spec = parse_spec({"name": name, "project": project, **settings_from_form(form)})
        await service(request).create(spec)
    except (SpecError, Conflict) as exc:
        errors = field_errors(exc) if exc.errors else {"name": exc.message} if isinstance(exc, Conflict) else {}
        context = await frame(request, session, project, values=form, errors=errors, detail=exc.message)
        context["queues"] = [q.name for q in await service(request).list(project)]
        return page(request, "new_queue.html", context, status=exc.status)
    return RedirectResponse(f"/projects/{project}/queues/{name}/settings?created=1", status_code=303)


@router.get("/projects/{project}/queues/{name}")
async def queue_home(request: Request, project: str, name: str) -> Response:
    await session_of(request)
    return RedirectResponse(f"/projects/{project}/queues/{name}/settings", status_code=303)


async def queue_context(request: Request, session: Session, project: str, name: str, tab: str,
                        **extra: Any) -> dict[str, Any]:
    context = await frame(request, session, project, tab=tab, **extra)
    svc = service(request)
    queues, context["status"] = await asyncio.gather(svc.list(project), svc.status(project, name))
    found = [q for q in queues if q.name == name]
    # not listed: being deleted, and get() raises the service's own NotFound
    context["queue"] = found[0] if found else await svc.get(project, name)
    context["queues"] = [q.name for q in queues if q.name != name]
    context.setdefault("values", {})
    context.setdefault("errors", {})
    context.setdefault("detail", None)
    return context


@router.get("/projects/{project}/queues/{name}/{tab}")
async def queue_page(request: Request, project: str, name: str, tab: str, created: int = 0) -> Response:
    session = await session_of(request)
    if tab not in TABS:
        raise NotFound(f"The queue page has no tab '{tab}'.")
    context = await queue_context(request, session, project, name, tab, created=bool(created))
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
                                      errors=field_errors(exc), detail=exc.message)
        return page(request, "queue.html", context, status=exc.status)
    return RedirectResponse(f"/projects/{project}/queues/{name}/settings?created=1", status_code=303)


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
    return RedirectResponse(f"/projects/{project}/queues?deleted={name}", status_code=303)
