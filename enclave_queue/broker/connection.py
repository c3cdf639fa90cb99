"""The control plane's connections to the broker, and the few requests every layer makes on them.

Two nkey-authenticated connections: one in the system account (config reloads, server
stats) and one in the control account (the KV state store, and every queue through the
imports that broker/config.py renders: ``jsapi.<id>`` for a queue's JetStream API,
``send.<id>.…`` for its subject, and the queue's own ack subjects). Beside them: a publish into
a queue with its PubAck (``publish_into``, ``stored_seq``), a delete of one message and the
creation of a control stream. Requests that find no responders (a reload) are tried again
(retry.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Optional

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from ..auth.secrets import NKey
from ..errors import BrokerUnavailable, publish_refused
from ..names import jsapi_prefix, send_subject
from ..retry import retry_unavailable
from ..spec import QueueSpec

log = logging.getLogger("enclave.broker")

REQUEST_TIMEOUT = 10.0  #: seconds for a reload or stats request
DRAIN_TIMEOUT = 3.0  #: seconds a connection may take to drain when the control process stops
PUBLISH_TIMEOUT = 5.0  #: seconds the broker may take to confirm a publish into a queue


#: JetStream's "no message found" (a delete or get of a sequence that is not there)
NO_MESSAGE = 10057


async def delete_message(js: JetStreamContext, stream: str, seq: int) -> bool:
    """Delete one message from a stream; False if it was not there (already deleted or moved)."""
    try:
        await retry_unavailable(lambda: js.delete_msg(stream, seq))
    except nats.js.errors.NotFoundError:
        return False
    except nats.js.errors.APIError as exc:
        if exc.err_code != NO_MESSAGE:
            raise
        return False
    return True


async def publish_into(conn: BrokerConnection, queue_id: str, subject: str, body: bytes,
                       headers: Optional[dict[str, str]] = None, timeout: float = PUBLISH_TIMEOUT) -> dict[str, Any]:
    """Publish ``body`` to ``subject`` (a queue subject: the queue's own, a priority lane or a delay
    subject) in queue account ``queue_id``, through the control account's import of it
    (``send.<id>.…``), and return the broker's answer: the PubAck (``seq``, ``duplicate``) or its
    ``error``. Retried while nobody answers (a reload); nats-py's TimeoutError if no answer came."""
    reply = await retry_unavailable(lambda: conn.control.request(
        send_subject(queue_id, subject), body, timeout=timeout, headers=headers or None))
    return json.loads(reply.data)


def stored_seq(answer: dict[str, Any], spec: QueueSpec) -> int:
    """The sequence a publish into the queue of ``spec`` was stored at (``publish_into``'s answer);
    the error of a refusal (errors.publish_refused: QueueFull, MessageTooLarge, StorageFull, …)."""
    if "error" in answer:
        raise publish_refused(answer["error"], f"'{spec.name}' in project '{spec.project}'", spec.max_messages,
                              spec.max_bytes)
    return int(answer["seq"])


async def ensure_stream(js: JetStreamContext, config: Any) -> None:
    """Create a stream of the control plane's own (advisories, error notes, samples), or bring an
    existing one to ``config`` (an ``api.StreamConfig``)."""
    try:
        await retry_unavailable(lambda: js.stream_info(config.name))
    except nats.js.errors.NotFoundError:
        await retry_unavailable(lambda: js.add_stream(config))
    else:
        await retry_unavailable(lambda: js.update_stream(config))


async def _connect(url: str, nkey: NKey, name: str) -> Client:
    async def on_error(exc: Exception) -> None:
        log.debug("%s connection: %s", name, exc)

    async def on_disconnect() -> None:
        if not (holder and (holder[0].is_closed or holder[0].is_draining)):
            log.info("%s connection to the broker lost; reconnecting", name)

    holder: list[Client] = []

    try:
        nc = await nats.connect(
            url, nkeys_seed_str=nkey.seed, name=f"enclave-{name}",
            max_reconnect_attempts=1, reconnect_time_wait=0.2, connect_timeout=2,
            error_cb=on_error, disconnected_cb=on_disconnect, pending_size=64 * 1024 * 1024,
        )
    except Exception as exc:  # nats-py raises several unrelated types here
        raise BrokerUnavailable(f"Cannot connect to the broker at {url}: {exc}") from exc
    nc.options["max_reconnect_attempts"] = -1  # one try to connect, then reconnect for ever
    holder.append(nc)
    return nc


class BrokerConnection:
    def __init__(self, system: Client, control: Client) -> None:
        self.system = system
        self.control = control
        self.js = control.jetstream(timeout=5)

    @classmethod
    async def connect(cls, url: str, system: NKey, control: NKey) -> BrokerConnection:
        opened: list[Client] = []
        try:
            for nkey, name in ((system, "system"), (control, "control")):
                opened.append(await _connect(url, nkey, name))
        except BaseException:
            for nc in opened:
                await nc.close()
            raise
        return cls(*opened)

    def queue_js(self, queue_id: str, timeout: float = 5) -> JetStreamContext:
        """A JetStream context that speaks to one queue account's JetStream API."""
        return self.control.jetstream(prefix=jsapi_prefix(queue_id), timeout=timeout)

    async def _server_request(self, verb: str, body: bytes = b"", timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        server_id = (self.system._server_info or {}).get("server_id")
        if not server_id or not self.system.is_connected:
            raise BrokerUnavailable("The broker's system connection is down.")
        try:
            reply = await self.system.request(f"$SYS.REQ.SERVER.{server_id}.{verb}", body, timeout=timeout)
        except Exception as exc:
            raise BrokerUnavailable(f"The broker did not answer {verb}: {exc!r}") from exc
        body = json.loads(reply.data)
        if body.get("error"):
            raise BrokerUnavailable(f"The broker refused {verb}: {body['error'].get('description', body['error'])}")
        return body.get("data") or {}

    async def reload(self) -> None:
        """Reload the broker's configuration file; returns when the server has applied it."""
        await self._server_request("RELOAD")

    async def varz(self) -> dict[str, Any]:
        """The server's general statistics (memory, connections, uptime)."""
        return await self._server_request("VARZ")

    async def healthz(self, timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """The server's health with details: ``{"status": "ok"}``, or ``"error"`` with ``errors``, a
        list of ``{"type", "account", "stream", "error"}``. The only place nats-server 2.15 reports
        a stream whose store failed to write (``type`` STREAM, "write error: …"; broker/storage.py)."""
        return await self._server_request("HEALTHZ", b'{"details": true}', timeout)

    async def close(self) -> None:
        """Drain both connections (what was published reaches the broker), within DRAIN_TIMEOUT."""
        for nc in (self.control, self.system):
            if nc.is_connected:
                with contextlib.suppress(asyncio.TimeoutError, nats.errors.Error):
                    await asyncio.wait_for(nc.drain(), DRAIN_TIMEOUT)
            if not nc.is_closed:
                await nc.close()
