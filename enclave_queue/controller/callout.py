"""The auth callout: turns a queue's username and password into a user of the queue's account.

A client that connects with a username and password and no JWT is given the sentinel (a bearer
user of the AUTH account that may do nothing), and the AUTH account's callout sends the server's
signed authorization request to ``$SYS.REQ.USER.AUTH``, where this service answers. It checks the
request's signature (a server's key), asks ``verify`` which live password version of the queue the
password is, and answers with an authorization response signed by the AUTH account whose user
JWT places the connection in the queue's account with the app permissions, signed by that
version's signing key. Anything it cannot verify is refused; the reason goes to the server's log
as the response's error, never the password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from nats.aio.client import Client
from nats.aio.msg import Msg

from ..auth import jwt
from ..auth.keys import OperatorKeys
from ..broker.claims import app_user
from ..broker.tasks import stop_tasks

log = logging.getLogger("enclave.callout")

#: where nats-server sends authorization requests
AUTH_SUBJECT = "$SYS.REQ.USER.AUTH"
#: what a refused login is told (the server logs it; the client sees "Authorization Violation")
REFUSED = "invalid username or password"

#: ``verify(username, password)``: the password version the pair is live for, or None
Verify = Callable[[str, str], Awaitable[Optional[int]]]


def _response(request: dict[str, Any], keys: OperatorKeys, *, user_jwt: str = "", error: str = "") -> str:
    server = request.get("nats", {}).get("server_id", {}).get("id", "")
    user_nkey = request.get("nats", {}).get("user_nkey", "")
    nats: dict[str, Any] = {"type": "authorization_response", "version": jwt.VERSION}
    if user_jwt:
        nats["jwt"] = user_jwt
    else:
        nats["error"] = error or REFUSED
    return jwt.encode({"sub": user_nkey, "aud": server, "nats": nats}, keys.platform_account("auth"))


async def answer(token: str, verify: Verify, keys: OperatorKeys) -> str:
    """The authorization response to the server's request ``token``."""
    try:
        request = jwt.decode(token, issuer_prefix="N")
    except jwt.JWTError as exc:
        log.warning("refused an authorization request that is not the server's: %s", exc)
        return _response({}, keys, error="unverifiable request")
    body = request.get("nats", {})
    options = body.get("connect_opts") or {}
    username, password, user_nkey = options.get("user"), options.get("pass"), body.get("user_nkey")
    if body.get("type") != "authorization_request" or not isinstance(user_nkey, str) or not user_nkey.startswith("U"):
        return _response(request, keys, error="malformed request")
    if not (isinstance(username, str) and isinstance(password, str) and username and password):
        return _response(request, keys)
    try:
        version = await verify(username, password)
    except Exception:  # a state store that cannot answer refuses the login, it never lets it in
        log.exception("could not check the password of %s; refused", username)
        return _response(request, keys, error="cannot verify now")
    if version is None:
        return _response(request, keys)
    account = keys.queue_account_public(username)
    user = jwt.encode(app_user(username, user_nkey, account), keys.queue_signer(username, version))
    return _response(request, keys, user_jwt=user)


#: logins answered at once: nats-py runs a subscription's callbacks one after another, and one
#: login's hash check (in a thread) must not hold up every other login behind it
CONCURRENT = 16


class Callout:
    """Serves the auth callout on the control plane's callout connection (AUTH account)."""

    def __init__(self, nc: Client, verify: Verify, keys: OperatorKeys) -> None:
        self._nc, self._verify, self._keys = nc, verify, keys
        self._sub: Any = None
        self._slots = asyncio.Semaphore(CONCURRENT)
        self._answering: set[asyncio.Task[None]] = set()

    async def _answer(self, msg: Msg) -> None:
        """Answer one login, then give back the slot ``on_request`` took for it."""
        try:
            response = await answer(msg.data.decode(errors="replace"), self._verify, self._keys)
            await msg.respond(response.encode())
        except Exception:  # one bad request must not end the service
            log.exception("auth callout failed on a request")
        finally:
            self._slots.release()

    async def start(self) -> None:
        async def on_request(msg: Msg) -> None:
            if not msg.reply:
                return
            await self._slots.acquire()  # CONCURRENT at most: the rest wait in the subscription
            task = asyncio.create_task(self._answer(msg))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)

        # one queue group: on a cluster each login is answered by one control process, any of them
        self._sub = await self._nc.subscribe(AUTH_SUBJECT, queue="callout", cb=on_request, pending_msgs_limit=65536)

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(self._sub.unsubscribe(), 2.0)
            self._sub = None
        await stop_tasks(list(self._answering))
