"""The SDK's admin half: a small synchronous client of the HTTP API (the CLI is built on it).

Errors come back as the same classes the server raised (errors.py), rebuilt from the API's
JSON problems.

Every name, project, receipt, secret, id and sequence that goes into a URL is first checked
against its rule (``check_path_part``: a bad one is a SpecError naming the field and the rule)
and then percent-encoded, so no argument can climb out of its place in the path
(``../other/queues/victim``) or add a route (``q/credentials``). Redirects are never followed:
a 3xx answer is an error, not a success.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional, Union
from urllib.parse import quote

import httpx

from .errors import BrokerUnavailable, EnclaveError, NotFound, Timeout, Unauthorized, from_problem, out_of_range
from .settings import ClientSettings
from .spec import (
    MAX_SEQUENCE,
    NAME_RULE,
    PROJECT_PATTERN,
    PROJECT_RULE,
    QUEUE_NAME_PATTERN,
    RECEIPT_PATTERN,
    RECEIPT_RULE,
    REDRIVE_PATTERN,
    REDRIVE_RULE,
    SECRET_PATTERN,
    SECRET_RULE,
    SEQUENCE_RULE,
    shown,
)

WAIT_STEP = 10.0  #: seconds one long-poll of a queue's status may wait on the server

#: what each kind of path part must look like: (pattern matched in full, the rule as a user reads it)
PATH_RULES: dict[str, tuple[re.Pattern[str], str]] = {
    "project": (PROJECT_PATTERN, PROJECT_RULE),
    "queue name": (QUEUE_NAME_PATTERN, NAME_RULE),
    "secret name": (SECRET_PATTERN, SECRET_RULE),
    "receipt": (RECEIPT_PATTERN, RECEIPT_RULE),
    "redrive id": (REDRIVE_PATTERN, REDRIVE_RULE),
}

#: a path part: literal text as it is, or (field, value) to check and encode
Segment = Union[str, tuple[str, Any]]


def check_path_part(field: str, value: Any) -> str:
    """``value`` as the text that goes into a URL for ``field`` (a key of PATH_RULES, or
    'sequence'), if it follows the field's rule; raises SpecError naming the field and the rule."""
    if field == "sequence":
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SEQUENCE:
            return str(value)
        rule = SEQUENCE_RULE
    else:
        pattern, rule = PATH_RULES[field]
        if isinstance(value, str) and pattern.fullmatch(value):
            return value
    raise out_of_range(field, rule, shown(value))


def url_path(*segments: Segment) -> str:
    """'/v1/…' from literal segments and (field, value) parts, each part checked
    (``check_path_part``) and percent-encoded whole: the one way a path is built here."""
    return "/" + "/".join(part if isinstance(part, str) else quote(check_path_part(*part), safe="")
                          for part in segments)


#: the statuses a proxy answers when the server behind it is down or slow: the API can't be reached
GATEWAY_STATUSES = (502, 503, 504)


class ApiUnreachable(BrokerUnavailable):
    """The API itself did not answer (nothing listens, or a proxy in front of it says so): unlike
    its own 503 (its broker did not answer), not a moment a wait rides out."""


def sendable_token(token: Optional[str]) -> bool:
    """Whether ``token`` can go into an Authorization header: printable ASCII without spaces."""
    return token is None or all("!" <= c <= "~" for c in token)


class AdminClient:
    def __init__(self, url: str, token: Optional[str], *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        if not sendable_token(token):  # never repeated: a secret
            raise Unauthorized("The API token holds a character that is not printable ASCII: it is not an API token.")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._tokenless = not token
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, follow_redirects=False,
                                  event_hooks={"response": [lambda response: _only_json(self.url, response)]})

    @classmethod
    def from_env(cls) -> AdminClient:
        settings = ClientSettings.from_env()
        return cls(settings.url, settings.token)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call of the API; ``path`` as ``url_path`` builds it (its parts checked and encoded)."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        if response.status_code == 401 and self._tokenless:  # the server's words are for HTTP callers
            raise Unauthorized(f"The Enclave API at {self.url} needs a token, and none was found: set ENCLAVE_TOKEN, "
                               "or ENCLAVE_HOME to the data directory of the running 'enclave up' (its admin-token "
                               "file is read).")
        _raise_for_problem(response)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise self._unparsable(exc) from exc

    def _unparsable(self, exc: ValueError) -> EnclaveError:
        return EnclaveError(f"The server at {self.url} answered JSON that does not parse ({exc}); is ENCLAVE_URL "
                            "the API's own address?")

    def _unreachable(self, exc: httpx.TransportError) -> BrokerUnavailable:
        return ApiUnreachable(
            f"Cannot reach the Enclave API at {self.url} ({exc.__class__.__name__}); is 'enclave up' running?")

    def stream_lines(self, path: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """GET a JSON Lines answer, one object a line as it arrives (errors on the first step)."""
        try:
            with self._http.stream("GET", path, **kwargs) as response:
                if response.status_code >= 300:
                    response.read()
                    _raise_for_problem(response)
                for line in response.iter_lines():
                    if line.strip():
                        try:
                            yield json.loads(line)
                        except ValueError as exc:
                            raise self._unparsable(exc) from exc
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    # -- queues ---------------------------------------------------------------------------------

    def _queues(self, project: str) -> str:
        return url_path("v1", "projects", ("project", project), "queues")

    def _queue(self, project: str, name: str, *tail: Segment) -> str:
        """The path of queue ``name`` in ``project``, then ``tail``."""
        return url_path("v1", "projects", ("project", project), "queues", ("queue name", name), *tail)

    def list_queues(self, project: str) -> list[dict[str, Any]]:
        return self.request("GET", self._queues(project))

    def overview(self, project: str) -> list[dict[str, Any]]:
        """Every queue of the project with its state and depth (``depth`` None while not ready)."""
        return self.request("GET", url_path("v1", "projects", ("project", project), "queues", "-", "overview"))["queues"]

    def create_queue(self, project: str, spec: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", self._queues(project), json=spec)

    def get_queue(self, project: str, name: str) -> dict[str, Any]:
        return self.request("GET", self._queue(project, name))

    def update_queue(self, project: str, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", self._queue(project, name), json=changes)

    def delete_queue(self, project: str, name: str) -> None:
        self.request("DELETE", self._queue(project, name))

    def queue_status(self, project: str, name: str, wait_seconds: float = 0) -> dict[str, Any]:
        """The queue's status; with ``wait_seconds``, the server answers once it settles."""
        params = {"wait_seconds": wait_seconds} if wait_seconds else None
        return self.request("GET", self._queue(project, name, "status"), params=params,
                            timeout=wait_seconds + 30)

    def credentials(self, project: str, name: str) -> dict[str, str]:
        return self.request("GET", self._queue(project, name, "credentials"))

    def rotate_password(self, project: str, name: str, grace_seconds: Optional[int] = None) -> dict[str, Any]:
        """A new password for the queue; the old one logs in for ``grace_seconds`` more (server default 3600)."""
        body = {} if grace_seconds is None else {"grace_seconds": grace_seconds}
        return self.request("POST", self._queue(project, name, "rotate-password"), json=body)

    def read_secret(self, project: str, secret: str) -> dict[str, str]:
        return self.request("GET", url_path("v1", "projects", ("project", project), "secrets",
                                            ("secret name", secret)))

    def wait_ready(self, project: str, name: str, timeout: float = 60.0, *, step: float = WAIT_STEP,
                   stop: Optional[Callable[[], bool]] = None) -> dict[str, Any]:
        """Poll until the queue's latest spec is applied (``Ready``); raises the status message as
        an EnclaveError if it is ``Errored``, Timeout after ``timeout`` seconds or once ``stop()``
        says so (checked every ``step`` seconds at most)."""
        deadline = time.monotonic() + timeout
        while True:
            _check_stop(stop, name)
            status = self._status_riding_out(project, name, step, deadline)
            if status is None:
                continue
            if status["observed_generation"] >= status["generation"]:
                if status["state"] == "Ready":
                    return self.get_queue(project, name)
                if status["state"] == "Errored":
                    raise EnclaveError(f"Queue '{name}' failed: {status['message']}")
            if time.monotonic() > deadline:
                raise Timeout(f"Queue '{name}' was not ready after {timeout:g} s: {status['message']}")

    def _status_riding_out(self, project: str, name: str, step: float, deadline: float) -> Optional[dict[str, Any]]:
        """The queue's status (waited for up to ``step`` seconds), or None after a moment the API's
        broker did not answer (it restarts, say: the change asked for may well be applied), until
        ``deadline``, when that is raised. An API that does not answer itself is raised at once."""
        try:
            status = self.queue_status(project, name, wait_seconds=max(0.1, min(step, deadline - time.monotonic())))
        except ApiUnreachable:
            raise
        except BrokerUnavailable:
            if time.monotonic() + step > deadline:
                raise
            time.sleep(step)
            return None
        # what another server answers (``null``, a list) had been taken for a moment of the broker's:
        # asked again at once, for ever
        if not (isinstance(status, dict) and {"state", "message", "generation", "observed_generation"} <= status.keys()):
            raise EnclaveError(f"The server at {self.url} answered something that is not a queue's status; is "
                               "ENCLAVE_URL the API's own address?")
        return status

    def wait_deleted(self, project: str, name: str, timeout: float = 60.0, *, step: float = WAIT_STEP,
                     stop: Optional[Callable[[], bool]] = None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            _check_stop(stop, name)
            try:
                status = self._status_riding_out(project, name, step, deadline)
            except NotFound:
                return
            if status is None:
                continue
            if time.monotonic() > deadline:
                raise Timeout(f"Queue '{name}' was not deleted after {timeout:g} s: {status['message']}")

    # -- dead letters ---------------------------------------------------------------------------

    def list_dead_letters(self, project: str, name: str, limit: int = 50, after: int = 0,
                          source: Optional[str] = None) -> dict[str, Any]:
        """A page of the queue's letters; with ``source``, only those from that queue."""
        params: dict[str, Any] = {"limit": limit, "after": after}
        if source is not None:
            params["source"] = source
        return self.request("GET", self._queue(project, name, "dead-letters"), params=params)

    def dead_letter_counts(self, project: str, name: str) -> dict[str, Any]:
        """``{"total", "by_source", "sources"}``: the queue's messages, its letters by source queue."""
        return self.request("GET", self._queue(project, name, "dead-letters", "counts"))

    def retry_dead_letter(self, project: str, name: str, seq: int) -> dict[str, Any]:
        return self.request("POST", self._queue(project, name, "dead-letters", ("sequence", seq), "retry"))

    def discard_dead_letter(self, project: str, name: str, seq: int) -> None:
        self.request("DELETE", self._queue(project, name, "dead-letters", ("sequence", seq)))

    def start_redrive(self, project: str, name: str, **options: Any) -> dict[str, Any]:
        """Options: to, max, rate, filter_error, dry_run, source. Returns the task (poll redrive_status)."""
        body = {k: v for k, v in options.items() if v is not None}
        return self.request("POST", self._queue(project, name, "redrives"), json=body)

    def redrive_status(self, project: str, name: str, task_id: str) -> dict[str, Any]:
        return self.request("GET", self._queue(project, name, "redrives", ("redrive id", task_id)))

    def cancel_redrive(self, project: str, name: str, task_id: str) -> dict[str, Any]:
        return self.request("DELETE", self._queue(project, name, "redrives", ("redrive id", task_id)))

    # -- messages -------------------------------------------------------------------------------

    def send(self, project: str, name: str, body: Any = None, *, body_base64: Optional[str] = None,
             dedupe_key: Optional[str] = None, delay: float = 0) -> dict[str, Any]:
        """Send one message; with ``delay`` seconds (0–604800) it can be received only from then
        (the answer's ``delayed_until``)."""
        payload: dict[str, Any] = {"body_base64": body_base64} if body_base64 is not None else {"body": body}
        if dedupe_key is not None:
            payload["dedupe_key"] = dedupe_key
        if delay:
            payload["delay_seconds"] = delay
        return self.request("POST", self._queue(project, name, "messages"), json=payload)

    def receive(self, project: str, name: str, max_messages: int = 1, wait: float = 1.0) -> list[dict[str, Any]]:
        data = self.request("POST", self._queue(project, name, "messages", "receive"),
                            json={"max": max_messages, "wait": wait},
                            timeout=_wait_timeout(wait))
        return data["messages"]

    def delete_message(self, project: str, name: str, receipt: str) -> None:
        self.request("DELETE", self._queue(project, name, "messages", ("receipt", receipt)))

    def delete_sequence(self, project: str, name: str, seq: int) -> None:
        """Delete the message stored at ``seq`` without a receipt (waiting, in flight or delayed)."""
        self.request("DELETE", self._queue(project, name, "messages", "sequence", ("sequence", seq)))

    def nack_message(self, project: str, name: str, receipt: str, delay: float = 0) -> None:
        self.request("POST", self._queue(project, name, "messages", ("receipt", receipt), "nack"),
                     json={"delay": delay})

    def peek(self, project: str, name: str, limit: int = 10) -> list[dict[str, Any]]:
        return self.request("GET", self._queue(project, name, "messages"), params={"limit": limit})["messages"]

    def export(self, project: str, name: str) -> Iterator[dict[str, Any]]:
        """Every message of the queue as it stands (waiting, in flight, delayed, dead), one dict a
        message, streamed; nothing is taken off the queue. NotFound on the first step."""
        return self.stream_lines(self._queue(project, name, "export"), timeout=httpx.Timeout(30.0, read=120.0))

    def clear(self, project: str, name: str) -> dict[str, int]:
        """Remove the waiting, delayed and dead messages (in-flight ones finish); how many of each."""
        return self.request("POST", self._queue(project, name, "clear"), timeout=120)

    def stats(self, project: str, name: str) -> dict[str, Any]:
        """Waiting, in flight, delayed and dead now, and the counts since the queue was created."""
        return self.request("GET", self._queue(project, name, "stats"))


def _wait_timeout(wait: Any) -> float:
    """The HTTP timeout of a call that waits ``wait`` seconds on the server (which refuses more
    than a minute: the timeout must not overflow on a huge or odd value before it can say so)."""
    seconds = wait if isinstance(wait, (int, float)) and not isinstance(wait, bool) else 0.0
    return min(max(float(seconds), 0.0), 60.0) + 10.0 if seconds == seconds else 10.0


def _only_json(url: str, response: httpx.Response) -> None:
    """Raise an EnclaveError for an answer that is not JSON (problems and JSON Lines included):
    the API answers nothing else, so another server answered (a web server or a proxy at the URL).
    Redirects are left to ``_raise_for_problem``."""
    status = response.status_code
    if status == 204 or 300 <= status < 400 or response.headers.get("content-length") == "0":
        return
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if media.endswith("json"):  # application/json, application/problem+json, application/x-ndjson
        return
    response.read()
    said = f"{status} {response.reason_phrase}".strip()
    said += f" with {media}" if media else " with no content type"
    if media == "text/plain" and response.text.strip():
        said += f" ({shown(response.text.strip().splitlines()[0])})"  # its first line, cut if long
    if status in GATEWAY_STATUSES:
        raise ApiUnreachable(f"Cannot reach the Enclave API at {url}: the server there answered {said}.")
    hint = "its log may say why." if status >= 500 else "is ENCLAVE_URL the API's own address?"
    raise EnclaveError(f"The server at {url} answered {said}, not the Enclave API's JSON; {hint}")


def _raise_for_problem(response: httpx.Response) -> None:
    """Raise the error a JSON problem names (errors.py), if the answer is one; a redirect is an
    error too (never followed: the API does not send one, so it came from something else)."""
    if response.status_code < 300:
        return
    if response.status_code < 400:
        where = response.headers.get("location") or "nowhere"
        raise EnclaveError(f"The Enclave API answered {response.status_code} {response.reason_phrase} (a redirect "
                           f"to {where!r}), which is not followed: is ENCLAVE_URL the API's own address?")
    try:
        problem = response.json()
    except ValueError:
        problem = {"detail": response.text or response.reason_phrase}
    raise from_problem(response.status_code, problem)


def _check_stop(stop: Optional[Callable[[], bool]], name: str) -> None:
    if stop is not None and stop():
        raise Timeout(f"Stopped waiting for queue '{name}'; it may not be settled yet.")
