"""The control plane's connections to the broker, and the few requests every layer makes on them.

Three connections as users minted from the derived keys (auth/keys.py): one in the system
account (account claims pushed, server stats), one in the control account (the KV state store
and the control plane's own streams) and one in the AUTH account (the auth callout). A queue
account is reached as a user of that account, from a bounded pool (broker/pool.py):
``queue_js(id)`` for its JetStream API, ``account(id)`` to hold its connection for a while,
``publish_into`` for a publish into the queue with its PubAck (``publish_many_into`` for many at
once, an atomic batch first when they are many). Beside them: a delete of one message and the creation of a control stream. Requests that find no responders (a queue account
the broker is still loading) are tried again (retry.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any, Optional

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.client import JetStreamContext
from nats.nuid import NUID

from ..auth import jwt
from ..auth.keys import OperatorKeys
from ..errors import BrokerUnavailable, StorageFull, publish_refused
from ..retry import api_codes, retry_unavailable
from ..spec import QueueSpec
from .claims import control_user
from .config import CONTROL_STREAM_BYTES
from .pool import AccountConnections

log = logging.getLogger("enclave.broker")

REQUEST_TIMEOUT = 10.0  #: seconds for a reload or stats request
NO_STORAGE = 10047  #: the JetStream API's err_code for "insufficient storage resources available"
GATHER_WAIT = 0.25  #: seconds a cluster's other servers are given to answer a JSZ after the first
DRAIN_TIMEOUT = 3.0  #: seconds a connection may take to drain when the control process stops
#: seconds beyond DRAIN_TIMEOUT for the flush and close that end a drain (nats-py times the drain of
#: the subscriptions itself; cancelling it from outside instead leaves its gathered drains'
#: CancelledError unretrieved, logged as "Future exception was never retrieved")
DRAIN_FLUSH_GRACE = 2.0
PUBLISH_TIMEOUT = 5.0  #: seconds the broker may take to confirm a publish into a queue


#: JetStream's "no message found" (a delete or get of a sequence that is not there)
NO_MESSAGE = 10057
#: what nats-server 2.15 answers a delete of a sequence deleted already, when it is above the
#: stream's first ("sequence N not found"; at or below the first, or past the last: NO_MESSAGE)
SEQUENCE_NOT_FOUND = 10043
_BATCH_IDS = NUID()  #: atomic batch ids (one generator: a new NUID seeds itself from the system's randomness)
#: messages that go as one atomic batch (fewer: one by one). The broker stages a batch in a store
#: of its own before it commits it, about 2 ms of its CPU a batch on file storage: with 50
#: streams written side by side on the default stack, its CPU a message was 0.07–0.09 ms one by
#: one against 0.27 ms in batches of 8, 0.10 of 32, 0.07 of 48 and 0.05 of 64 (bench.atomic)
ATOMIC_FROM = 64


async def delete_message(js: JetStreamContext | QueueJetStream, stream: str, seq: int) -> bool:
    """Delete one message from a stream of a queue account; False if it was not there (already
    deleted or moved). Without erasing it: nats-py's ``delete_msg`` asks the server to overwrite the
    message's bytes, which rewrites its whole block file and syncs the file and the directory
    (measured under 100 failing queues: a fifth of the broker's CPU went to that); a delete is a
    tombstone, as a worker's ack on a work queue is, and the bytes go when the block is compacted."""
    request = json.dumps({"seq": seq, "no_erase": True}).encode()
    try:
        await retry_unavailable(lambda: js._api_request(f"$JS.API.STREAM.MSG.DELETE.{stream}", request))
    except nats.js.errors.NotFoundError:
        return False
    except nats.js.errors.APIError as exc:
        if api_codes(exc)[1] not in (NO_MESSAGE, SEQUENCE_NOT_FOUND):
            raise
        return False
    return True


async def publish_into(conn: BrokerConnection, queue_id: str, subject: str, body: bytes,
                       headers: Optional[dict[str, str]] = None, timeout: float = PUBLISH_TIMEOUT) -> dict[str, Any]:
    """Publish ``body`` to ``subject`` (a queue subject: the queue's own, a priority lane or a delay
    subject) in queue account ``queue_id``, as the control plane's user of that account, and return
    the broker's answer: the PubAck (``seq``, ``duplicate``) or its ``error``. Retried while nobody
    answers; nats-py's TimeoutError if no answer came."""
    async with conn.account(queue_id) as nc:
        reply = await retry_unavailable(lambda: nc.request(subject, body, timeout=timeout, headers=headers or None))
    return json.loads(reply.data)


async def publish_many_into(conn: BrokerConnection, queue_id: str, subject: str,
                            messages: Sequence[tuple[bytes, dict[str, str]]],
                            timeout: float = PUBLISH_TIMEOUT, *,
                            atomic_from: int = ATOMIC_FROM) -> list[dict[str, Any] | BaseException]:
    """``publish_into`` for many ``(body, headers)`` at once; each answer in order: the broker's,
    or the exception that publish raised. ``atomic_from`` or more go first as one atomic batch:
    one PubAck, and on the default stack one fsync instead of one a message. A batch the broker
    refuses (one of its Nats-Msg-Id stored already: a repeated move; no room for them all; a
    stream without allow_atomic) or leaves unanswered stored nothing, or (unanswered) may have:
    they go again one by one. Fewer go one by one from the start: back to back, their PubAcks
    awaited together, each with its own answer (by its Nats-Msg-Id, one a batch stored is
    answered as a duplicate)."""
    async with conn.account(queue_id) as nc:
        if len(messages) >= max(atomic_from, 2):
            answers = await _atomic(nc, subject, messages, timeout)
            if answers is not None:
                return answers

        async def one(body: bytes, headers: dict[str, str]) -> dict[str, Any]:
            reply = await retry_unavailable(lambda: nc.request(subject, body, timeout=timeout, headers=headers or None))
            return json.loads(reply.data)

        return await asyncio.gather(*(one(body, headers) for body, headers in messages), return_exceptions=True)


async def _atomic(nc: Client, subject: str, messages: Sequence[tuple[bytes, dict[str, str]]],
                  timeout: float) -> Optional[list[dict[str, Any] | BaseException]]:
    """``messages`` as one atomic batch, only its commit answered; each one's answer, or None if
    the broker refused the batch or did not answer its commit in time."""
    batch = _BATCH_IDS.next().decode()
    last = len(messages)
    try:
        for position, (body, headers) in enumerate(messages, 1):
            marked = {**headers, "Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(position)}
            if position < last:
                await nc.publish(subject, body, headers=marked)
            else:
                reply = await nc.request(subject, body, timeout=timeout, headers={**marked, "Nats-Batch-Commit": "1"})
    except (nats.errors.Error, TimeoutError) as exc:  # nobody answered (yet): one by one, retried
        log.debug("atomic batch of %d to %s not answered: %s", last, subject, exc)
        return None
    answer = json.loads(reply.data)
    if "error" in answer or answer.get("count") != last:
        log.debug("atomic batch of %d to %s refused: %s", last, subject, answer.get("error"))
        return None
    first = int(answer["seq"]) - last + 1
    return [{"stream": answer.get("stream"), "seq": first + n} for n in range(last)]


def stored_seq(answer: dict[str, Any], spec: QueueSpec) -> int:
    """The sequence a publish into the queue of ``spec`` was stored at (``publish_into``'s answer);
    the error of a refusal (errors.publish_refused: QueueFull, MessageTooLarge, StorageFull, …)."""
    if "error" in answer:
        raise publish_refused(answer["error"], f"'{spec.name}' in project '{spec.project}'", spec.max_messages,
                              spec.max_bytes)
    return int(answer["seq"])


async def ensure_stream(js: JetStreamContext, config: Any) -> None:
    """Create a stream of the control plane's own (advisories, error notes, samples), or bring an
    existing one to ``config`` (an ``api.StreamConfig``), on as many nodes as the control state
    is kept on (``CONTROL_STREAM_BYTES.replicas``)."""
    config.num_replicas = CONTROL_STREAM_BYTES.replicas
    try:
        try:
            await retry_unavailable(lambda: js.stream_info(config.name))
        except nats.js.errors.NotFoundError:
            await retry_unavailable(lambda: js.add_stream(config))
        else:
            await retry_unavailable(lambda: js.update_stream(config))
    except nats.js.errors.APIError as exc:
        if exc.err_code != NO_STORAGE:
            raise
        # the store made smaller than what it holds and reserves (a restart with a smaller
        # ENCLAVE_MAX_FILE_STORE, a data dir restored onto a smaller disk): said so, not a traceback
        raise StorageFull(f"The broker's store has no room left for the control plane's {config.name} stream "
                          f"({config.max_bytes or 0} bytes): the queues reserve more of the store than it has now. "
                          "Start with ENCLAVE_MAX_FILE_STORE at least what it was, or on a larger disk.") from None


async def _connect(url: str, keys: OperatorKeys, role: str, user_role: str) -> Client:
    """A connection as the control plane's ``user_role`` user of the ``role`` platform account."""
    user = keys.platform_user(user_role)
    token = jwt.encode(control_user(keys.public(user), user_role), keys.platform_account(role)).encode()

    async def on_error(exc: Exception) -> None:
        log.debug("%s connection: %s", user_role, exc)

    async def on_disconnect() -> None:
        if not (holder and (holder[0].is_closed or holder[0].is_draining)):
            log.info("%s connection to the broker lost; reconnecting", user_role)

    holder: list[Client] = []

    try:
        nc = await nats.connect(
            url, user_jwt_cb=lambda: token, signature_cb=lambda nonce: base64.b64encode(user.sign(nonce.encode())),
            name=f"enclave-{user_role}", max_reconnect_attempts=1, reconnect_time_wait=0.2, connect_timeout=2,
            error_cb=on_error, disconnected_cb=on_disconnect, pending_size=64 * 1024 * 1024,
            drain_timeout=DRAIN_TIMEOUT,
        )
    except Exception as exc:  # nats-py raises several unrelated types here
        raise BrokerUnavailable(f"Cannot connect to the broker at {url}: {exc}") from exc
    nc.options["max_reconnect_attempts"] = -1  # one try to connect, then reconnect for ever
    holder.append(nc)
    return nc


class QueueJetStream:
    """A queue account's JetStream API: each call (``stream_info``, ``get_msg``, ``delete_msg``, …,
    as on nats-py's JetStreamContext) is made on the pool's connection of that account, held for
    the call. What outlives one call (a pull subscription) needs ``BrokerConnection.account``."""

    def __init__(self, pool: AccountConnections, queue_id: str, timeout: float) -> None:
        self._pool, self._queue_id, self._timeout = pool, queue_id, timeout

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            async with self._pool.lease(self._queue_id) as nc:
                return await getattr(nc.jetstream(timeout=self._timeout), name)(*args, **kwargs)

        return call


def _server_name(answer: dict[str, Any]) -> str:
    return str((answer.get("server") or {}).get("name") or "")


def leaders_view(details: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One account's JSZ detail from every server of a cluster that answered, (server name, detail)
    each, as the leaders see it: each stream as its leader reports it, each consumer as its own
    leader does (a follower's counts lag: a queue of 5 waiting showed 0 waiting, 5 delayed).
    Where no leader answered, the first answer's."""
    if len(details) == 1:
        return details[0][1]
    streams: dict[str, dict[str, Any]] = {}
    consumers: dict[str, dict[str, dict[str, Any]]] = {}
    for server, detail in details:
        for stream in detail.get("stream_detail") or []:
            name = stream.get("name", "")
            if name not in streams or server == (stream.get("cluster") or {}).get("leader"):
                streams[name] = stream
            mine = consumers.setdefault(name, {})
            for consumer in stream.get("consumer_detail") or []:
                key = consumer.get("name", "")
                if key not in mine or server == (consumer.get("cluster") or {}).get("leader"):
                    mine[key] = consumer
    merged = dict(details[0][1])
    merged["stream_detail"] = [{**stream, "consumer_detail": list(consumers[name].values())}
                               for name, stream in streams.items()]
    return merged


class BrokerConnection:
    def __init__(self, system: Client, control: Client, callout: Client, pool: AccountConnections) -> None:
        self.system = system
        self.control = control
        self.callout = callout
        self.pool = pool
        self.js = control.jetstream(timeout=5)
        #: the nodes of the cluster (1: alone): how many answers a JSZ waits for (system_gather)
        self.nodes = 1
        #: the control process is stopping: long polls (broker/pull.py) end at their next round,
        #: answered, before the HTTP server's grace for requests under way runs out
        self.closing = False

    @classmethod
    async def connect(cls, url: str, keys: OperatorKeys) -> BrokerConnection:
        opened: list[Client] = []
        try:
            for role, user_role in (("system", "system"), ("control", "control"), ("auth", "callout")):
                opened.append(await _connect(url, keys, role, user_role))
        except BaseException:
            for nc in opened:
                await nc.close()
            raise
        return cls(*opened, AccountConnections(url, keys))

    def queue_js(self, queue_id: str, timeout: float = 5) -> QueueJetStream:
        """One queue account's JetStream API (each call on that account's pooled connection)."""
        return QueueJetStream(self.pool, queue_id, timeout)

    def account(self, queue_id: str) -> contextlib.AbstractAsyncContextManager[Client]:
        """``async with conn.account(id) as nc``: the queue account's connection, held for the block."""
        return self.pool.lease(queue_id)

    async def queue_request(self, queue_id: str, verb: str, payload: bytes = b"",
                            timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """One JetStream API request (``verb``: ``STREAM.INFO.<stream>``, …) in a queue's account;
        its JSON answer (retried while nobody answers)."""
        async with self.account(queue_id) as nc:
            reply = await retry_unavailable(lambda: nc.request(f"$JS.API.{verb}", payload, timeout=timeout))
        return json.loads(reply.data)

    def account_key(self, queue_id: str) -> str:
        """The public key that names a queue's account on the broker."""
        return self.pool.keys.queue_account_public(queue_id)

    async def account_jsz(self, queue_id: str) -> dict[str, Any]:
        """A queue account's JetStream usage, streams and consumers, as the system account sees
        it (``$SYS.REQ.ACCOUNT.<account>.JSZ``), with their configs (a consumer's ``ack_wait`` and
        ``backoff`` say how long its leases last): no connection into the account needed."""
        subject = f"$SYS.REQ.ACCOUNT.{self.account_key(queue_id)}.JSZ"
        answers = await self.system_gather(subject, b'{"streams": true, "consumer": true, "config": true}')
        if answers[0].get("error"):
            raise BrokerUnavailable(f"The broker did not report queue account {queue_id}: {answers[0]['error']}")
        return leaders_view([(_server_name(a), a.get("data") or {}) for a in answers if not a.get("error")])

    async def system_gather(self, subject: str, body: bytes, timeout: float = REQUEST_TIMEOUT) -> list[dict[str, Any]]:
        """A system request every server of a cluster answers (JSZ): each answer, as many as there
        are ``nodes`` or those that came within GATHER_WAIT of the first. On one node, its answer."""
        if self.nodes <= 1:
            return [await self._system_request(subject, body, timeout)]
        answers: list[dict[str, Any]] = []
        first, enough = asyncio.Event(), asyncio.Event()

        async def collect(msg: Any) -> None:
            with contextlib.suppress(ValueError):
                answers.append(json.loads(msg.data))
            first.set()
            if len(answers) >= self.nodes:
                enough.set()

        inbox = self.system.new_inbox()
        sub = await self.system.subscribe(inbox, cb=collect)
        try:
            await self.system.publish(subject, body, reply=inbox)
            try:
                await asyncio.wait_for(first.wait(), timeout)
            except TimeoutError:
                raise BrokerUnavailable(f"The broker did not answer {subject}.") from None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(enough.wait(), GATHER_WAIT)
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        return list(answers)

    async def push_account(self, token: str) -> None:
        """Give the broker an account's claims (a JWT signed by the operator): created or changed at
        once, with no reload; BrokerUnavailable if the broker refuses them."""
        answer = await self._system_request("$SYS.REQ.CLAIMS.UPDATE", token.encode())
        if answer.get("error"):
            raise BrokerUnavailable(f"The broker refused an account's claims: {answer['error']}")

    async def delete_accounts(self, token: str) -> None:
        """Remove accounts from the broker (a JWT of the operator's naming them); their
        connections are closed."""
        answer = await self._system_request("$SYS.REQ.CLAIMS.DELETE", token.encode())
        if answer.get("error"):
            raise BrokerUnavailable(f"The broker refused to delete accounts: {answer['error']}")

    async def list_accounts(self) -> list[str]:
        """The public keys of every account the broker's resolver holds."""
        answer = await self._system_request("$SYS.REQ.CLAIMS.LIST", b"")
        if answer.get("error") or not isinstance(answer.get("data"), list):
            raise BrokerUnavailable(f"The broker did not list its accounts: {answer.get('error')}")
        return [key for key in answer["data"] if isinstance(key, str)]

    async def _system_request(self, subject: str, body: bytes, timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        try:
            reply = await retry_unavailable(lambda: self.system.request(subject, body, timeout=timeout))
        except Exception as exc:
            raise BrokerUnavailable(f"The broker did not answer {subject}: {exc!r}") from exc
        return json.loads(reply.data)

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

    async def varz(self) -> dict[str, Any]:
        """The server's general statistics (memory, connections, uptime)."""
        return await self._server_request("VARZ")

    async def healthz(self, timeout: float = REQUEST_TIMEOUT) -> dict[str, Any]:
        """The server's health with details: ``{"status": "ok"}``, or ``"error"`` with ``errors``, a
        list of ``{"type", "account", "stream", "error"}``. The only place nats-server 2.15 reports
        a stream whose store failed to write (``type`` STREAM, "write error: …"; broker/storage.py)."""
        return await self._server_request("HEALTHZ", b'{"details": true}', timeout)

    async def close(self) -> None:
        """Close the queue accounts' connections, then drain the others (what was published reaches
        the broker), within DRAIN_TIMEOUT."""
        await self.pool.close()
        for nc in (self.callout, self.control, self.system):
            if nc.is_connected:
                with contextlib.suppress(asyncio.TimeoutError, nats.errors.Error):
                    await asyncio.wait_for(nc.drain(), DRAIN_TIMEOUT + DRAIN_FLUSH_GRACE)
            if not nc.is_closed:
                await nc.close()
