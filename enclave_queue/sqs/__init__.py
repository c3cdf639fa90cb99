"""An SQS-compatible endpoint: Amazon SQS's API over Enclave's queues, so apps and tools written
for SQS (every AWS SDK, the AWS CLI) work by changing their endpoint URL to ``<API URL>/sqs``.

A peer of api/ and console/ (it calls the queue service, never them): endpoint.py (the ASGI app:
Signature Version 4, either wire protocol), wire.py (the JSON 1.0 and query protocols), actions.py
(the actions onto service.py and queues/sqs.py), attributes.py (queue attributes onto settings),
messages.py (bodies, message attributes, MD5s), sigv4.py (the signature check), keys.py (the
access keys) and routes.py (``/v1/access-keys`` of the HTTP API). docs/sqs.md is the user's guide.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.routing import Route

from .endpoint import BODY_LIMIT, PATH, SqsEndpoint
from .routes import router


def install(app: FastAPI) -> None:
    """Mount the endpoint at ``/sqs`` (the SDKs' endpoint) and below it (queue URLs, where older
    SDKs post), and add the access-key routes to the API."""
    app.include_router(router)
    # a body over the limit is answered by the endpoint, as an SQS error (api/guard.py)
    app.state.own_body_limits = {**getattr(app.state, "own_body_limits", {}), PATH: BODY_LIMIT}
    endpoint = SqsEndpoint()
    app.router.routes.append(Route(PATH, endpoint=endpoint))  # the path itself, without a redirect to "/sqs/"
    app.mount(PATH, endpoint)


__all__ = ["PATH", "install"]
