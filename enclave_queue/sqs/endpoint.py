"""The SQS endpoint: an ASGI app mounted at ``/sqs`` on the API's port (``__init__.install``).

Every request is authenticated with Signature Version 4 before it is answered: the access key
named in its ``Authorization`` header must exist (InvalidClientTokenId otherwise, told before the
body is read), its credential scope must name the configured region (``ENCLAVE_SQS_REGION``,
default ``us-east-1``; ``*`` takes any) and the service ``sqs``, its date must be within 15 minutes
of the server's clock, and its signature must be the body's under the key's secret. Then the
action is read from either wire protocol (wire.py), run (actions.py) and answered in the same
protocol; any error is answered as SQS answers it, never as an HTML page or an API problem.
Nothing of a request's ``Authorization`` or of a secret is logged.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..errors import EnclaveError
from ..queues.sqs import SqsMessages
from ..service import QueueService
from ..web.plane import plane
from . import sigv4, wire
from .actions import Actions, Caller
from .errors import BROKER_ERRORS, SqsError, from_enclave
from .keys import AccessKeys

log = logging.getLogger("enclave.sqs")

PATH = "/sqs"  #: where the endpoint is mounted: an SDK's endpoint URL is the API's URL + this
DEFAULT_REGION = "us-east-1"
REGION_ENV = "ENCLAVE_SQS_REGION"
#: bytes of a request: a batch of messages of 1 MiB in all (SQS's limit, MAX_BATCH_BYTES), form
#: encoded (3 bytes a byte of UTF-8 past ASCII) or JSON escaped (``\uXXXX``: 6 bytes for 2), with
#: Binary attributes in base64 on top, fits; past it, any action's request is refused unread
BODY_LIMIT = 8 * 1024 * 1024


def regions_from_env() -> tuple[str, frozenset[str]]:
    """The region ARNs name (the first configured) and every region a signature may be scoped to."""
    configured = [r.strip() for r in os.environ.get(REGION_ENV, DEFAULT_REGION).split(",") if r.strip()]
    configured = configured or [DEFAULT_REGION]
    named = next((r for r in configured if r != "*"), DEFAULT_REGION)
    return named, frozenset(configured)


@dataclass
class Context:
    """What the endpoint and the access-key routes share for one running queue service."""

    service: QueueService
    keys: AccessKeys
    actions: Actions


def context_of(conn: Any) -> Context:
    """The SQS context of the control plane the app serves (rebuilt when its queue service is: a
    restarted broker restarts the service, and the leases it knew of are gone with it)."""
    service = plane(conn).service
    if service is None:
        raise SqsError("ServiceUnavailable", "Enclave is starting; try again shortly.", 503, sender=False)
    state = conn.app.state
    current: Optional[Context] = getattr(state, "sqs_context", None)
    if current is None or current.service is not service:
        region, _ = regions_from_env()
        master = service.messages.master
        messages = SqsMessages(service.messages, service.conn, service.store, master)
        current = Context(service, AccessKeys(service.store, master), Actions(service, messages, region))
        state.sqs_context = current
    return current


class SqsEndpoint:
    """The ASGI app of ``/sqs`` and ``/sqs/<project>/<queue>`` (a queue URL, where older SDKs post)."""

    def __init__(self) -> None:
        self.region, self.regions = regions_from_env()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        request_id = str(uuid.uuid4())
        protocol = "json" if "x-amz-target" in request.headers else "query"
        action = ""
        try:
            action, response = await self._answer(request, protocol, request_id)
        except HTTPException as exc:  # the request guard's (api/guard.py): a body over BODY_LIMIT
            if exc.status_code != 413:
                raise
            response = self._error(protocol, self._too_large(request, protocol), request_id, action)
        except SqsError as exc:
            response = self._error(protocol, exc, request_id, action)
        except EnclaveError as exc:
            response = self._error(protocol, from_enclave(exc), request_id, action)
        except BROKER_ERRORS as exc:
            log.warning("SQS %s: the broker did not answer: %r", action or "request", exc)
            response = self._error(protocol, SqsError("ServiceUnavailable", "The broker did not answer in time; try "
                                                      "again shortly.", 503, sender=False), request_id, action)
        except Exception:
            log.exception("SQS %s failed", action or "request")
            response = self._error(protocol, SqsError("InternalFailure", "The server failed to handle the request; "
                                                      "see its log.", 500, sender=False), request_id, action)
        await response(scope, receive, send)

    async def _answer(self, request: Request, protocol: str, request_id: str) -> tuple[str, Response]:
        if request.method not in ("POST", "GET"):
            raise SqsError("InvalidAction", f"The SQS endpoint takes POST (or a query GET), not {request.method}.",
                           405)
        context = context_of(request)
        headers = request.headers
        auth = sigv4.parse_authorization(headers.get("authorization"))
        amz_date, when = sigv4.request_date(headers)
        key = await context.keys.open(auth.access_key_id)
        if key is None:
            raise SqsError("InvalidClientTokenId", "The security token included in the request is invalid.", 403)
        sigv4.check_scope(auth, when, amz_date, self.regions)
        body = await request.body()
        digest = sigv4.payload_hash(headers, body)
        scope = request.scope
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1").partition("?")[0]
        raw_query = scope.get("query_string", b"").decode("latin-1")
        pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        sigv4.verify(auth, key.secret, amz_date, request.method, raw_path, raw_query, pairs, digest)
        if protocol == "json":
            target = headers["x-amz-target"]
            if not target.startswith(wire.TARGET_PREFIX):
                raise SqsError("InvalidAction", f"X-Amz-Target must be {wire.TARGET_PREFIX}<Action>.")
            action, params = target[len(wire.TARGET_PREFIX):], wire.json_params(body)
        else:
            try:
                form = body.decode() if request.method == "POST" else ""
            except UnicodeDecodeError:
                raise SqsError("MalformedQueryString", "The request body is not UTF-8 form data.") from None
            action, params = wire.query_params("&".join(part for part in (raw_query, form) if part))
        wire.check_shapes(params)
        caller = Caller(key, self._base_url(request), self._path_queue(request))
        result = await context.actions.run(action, params, caller)
        log.debug("SQS %s by %s: ok", action, key.id)
        if protocol == "json":
            result = wire.without_empty(result)
            return action, Response(json.dumps(result), media_type=wire.JSON_TYPE,
                                    headers={"x-amzn-RequestId": request_id})
        return action, Response(wire.render_query(action, result, request_id), media_type=wire.XML_TYPE,
                                headers={"x-amzn-RequestId": request_id})

    @staticmethod
    def _too_large(request: Request, protocol: str) -> SqsError:
        """A body over BODY_LIMIT, unread: SQS's error for a batch of it (when the action is
        known without the body: the JSON protocol's target, a query string's Action), or for
        a parameter too long."""
        if protocol == "json":
            action = request.headers["x-amz-target"].removeprefix(wire.TARGET_PREFIX)
        else:
            action = request.query_params.get("Action", "")
        if action.endswith("Batch"):
            return SqsError.modelled("BatchRequestTooLong", f"Batch requests cannot be longer than {BODY_LIMIT} "
                                                            "bytes on the wire.")
        return SqsError("InvalidParameterValue", f"The request is longer than the {BODY_LIMIT} bytes the endpoint "
                                                 "accepts.")

    @staticmethod
    def _base_url(request: Request) -> str:
        host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
        return f"{request.url.scheme}://{host}{PATH}"

    @staticmethod
    def _path_queue(request: Request) -> Optional[tuple[str, str]]:
        path = request.scope["path"]
        rest = path[len(PATH):] if path.startswith(PATH) else path
        segments = [s for s in rest.split("/") if s]
        return (segments[0], segments[1]) if len(segments) == 2 else None

    @staticmethod
    def _error(protocol: str, error: SqsError, request_id: str, action: str) -> Response:
        if error.status >= 500:
            log.warning("SQS %s failed: %s", action or "request", error)
        headers = {"x-amzn-RequestId": request_id}
        if protocol == "json":
            headers["x-amzn-query-error"] = wire.query_error_header(error)
            return Response(wire.render_json_error(error), status_code=error.status, media_type=wire.JSON_TYPE,
                            headers=headers)
        return Response(wire.render_query_error(error, request_id), status_code=error.status,
                        media_type=wire.XML_TYPE, headers=headers)
