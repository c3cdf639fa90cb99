"""Test helpers: privileged access to a stack's broker (to change things behind the
controller's back) and raw nats-py clients that record the errors the server sends."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import nats
from nats.aio.client import Client

from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.testing import EnclaveStack


@asynccontextmanager
async def _minted(stack: EnclaveStack, account: Any, user: Any) -> AsyncIterator[Client]:
    """A connection as ``user`` of ``account``, its JWT minted from the stack's derived keys; closed
    after the block (and at once when the broker refuses it)."""
    from enclave_queue.auth import jwt
    from enclave_queue.broker.claims import control_user

    token = jwt.encode(control_user(jwt.public_key(user), "test"), account).encode()
    nc = nats.NATS()
    try:
        await nc.connect(stack.broker_url, user_jwt_cb=lambda: token, allow_reconnect=False, connect_timeout=2,
                         signature_cb=lambda nonce: base64.b64encode(user.sign(nonce.encode())))
        yield nc
    finally:
        await nc.close()  # a refused connect leaves its socket and tasks behind otherwise


@asynccontextmanager
async def app_connection(creds: dict[str, Any]) -> AsyncIterator[Client]:
    """The queue's own user on a plain nats-py connection: an app on any NATS client, which may send
    what the SDK never would."""
    nc = await nats.connect(creds["broker_url"], user=creds["username"], password=creds["password"],
                            inbox_prefix=creds["inbox_prefix"], allow_reconnect=False)
    try:
        yield nc
    finally:
        await nc.close()


async def publish_as_an_app(creds: dict[str, Any], bodies: list[str], headers: Callable[[str], dict[str, str]]) -> None:
    """Store ``bodies`` on the queue as a plain NATS client would, each with ``headers(body)``."""
    async with app_connection(creds) as nc:
        for body in bodies:
            await nc.jetstream().publish(creds["subject"], body.encode(), headers=headers(body))


def _keys(stack: EnclaveStack) -> OperatorKeys:
    return OperatorKeys(MasterKey.load_or_create(stack.home, stack.env.get("ENCLAVE_MASTER_KEY")))


def control_connection(stack: EnclaveStack) -> AbstractAsyncContextManager[Client]:
    """The control plane's own broker user in the control account: what an operator with shell
    access could do, to break things on purpose."""
    keys = _keys(stack)
    return _minted(stack, keys.platform_account("control"), keys.platform_user("control"))


def queue_account_connection(stack: EnclaveStack, queue_id: str) -> AbstractAsyncContextManager[Client]:
    """The control plane's own user in a queue's account, with every right there: to change a
    queue's stream or consumer behind the controller's back."""
    keys = _keys(stack)
    return _minted(stack, keys.queue_account(queue_id), keys.queue_control_user(queue_id))


def system_connection(stack: EnclaveStack) -> AbstractAsyncContextManager[Client]:
    """The control plane's user in the system account."""
    keys = _keys(stack)
    return _minted(stack, keys.platform_account("system"), keys.platform_user("system"))


class RawClient:
    """A nats-py connection as an app with a queue's credentials, keeping the server's errors."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc: Client | None = None

    async def connect(self, creds: dict[str, Any], **options: Any) -> Client:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc).lower())

        self.nc = await nats.connect(
            creds["broker_url"], user=creds["username"], password=creds["password"],
            inbox_prefix=creds["inbox_prefix"], error_cb=on_error, max_reconnect_attempts=1,
            reconnect_time_wait=0.1, **options,
        )
        return self.nc

    async def wait_error(self, fragment: str, timeout: float = 2.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for error in self.errors:
                if fragment.lower() in error:
                    return error
            await asyncio.sleep(0.02)
        raise AssertionError(f"no error containing {fragment!r}; got {self.errors}")

    async def close(self) -> None:
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.close()


async def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Call ``check`` (sync or async) until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout:g} s (last value: {last!r})")


async def consumer_info(creds: dict[str, Any]) -> Any:
    """The queue's consumer as the broker reports it (CONSUMER.INFO, asked as the queue's own user):
    ``num_waiting`` pull requests, ``num_ack_pending`` leased messages, ``num_pending`` waiting ones."""
    client = RawClient()
    nc = await client.connect(creds)
    try:
        return await nc.jetstream().consumer_info(creds["stream"], creds["consumer"])
    finally:
        await client.close()


async def pulls_waiting(creds: dict[str, Any]) -> int:
    """Pull requests the broker holds for the queue's consumer: a long poll in progress."""
    return (await consumer_info(creds)).num_waiting


#: routes with a credential of their own instead of the API token or the console's session: the
#: SQS endpoint takes AWS Signature V4 (tests/sqs/), so neither a token nor a cookie counts there
SIGNED_ROUTES = {"/sqs"}
#: the methods a route that lists none (it takes them all) is tried with
ANY_METHOD = ("GET", "POST")


def problem(response: Any, status: int, title: str) -> dict[str, Any]:
    """The JSON problem of an API answer, checked: its status, content type, title and detail."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert (body["status"], body["title"]) == (status, title) and body["detail"]
    return body


async def runtime_queue(runtime: Any, name: str, **spec: Any) -> dict[str, Any]:
    """Create a queue on an in-process Runtime (the ``runtime`` fixture), wait until it is Ready,
    and return its credentials."""
    from enclave_queue.spec import QueueSpec

    await runtime.service.create(QueueSpec(name=name, **spec))

    async def ready() -> bool:
        return (await runtime.service.status("default", name))["state"] == "Ready"

    await eventually(ready, timeout=20)
    return await runtime.service.credentials("default", name)


def make_queue(stack: EnclaveStack, name: str, project: str = "default", **settings: Any) -> dict[str, Any]:
    """Create a queue through the API and wait until it is Ready; returns its credentials."""
    with stack.admin() as admin:
        admin.create_queue(project, {"name": name, **settings})
        admin.wait_ready(project, name, timeout=20)
        return admin.credentials(project, name)


async def stream_config(stack: EnclaveStack, queue_id: str) -> Any:
    """A queue's stream config as the broker itself reports it."""
    from enclave_queue.names import stream_name
    from enclave_queue.retry import retry_unavailable

    async with queue_account_connection(stack, queue_id) as nc:
        js = nc.jetstream()
        info = await retry_unavailable(lambda: js.stream_info(stream_name(queue_id)))
        return info.config


def account_key(stack: EnclaveStack, queue_id: str) -> str:
    """The public key that names a queue's account on the broker."""
    keys = _keys(stack)
    return keys.public(keys.queue_account(queue_id))


def account_on_broker(stack: EnclaveStack, queue_id: str) -> bool:
    """Whether the broker's account resolver holds the queue's account (its JWT file)."""
    return (stack.home / "broker" / "accounts" / f"{account_key(stack, queue_id)}.jwt").exists()


def account_store(stack: EnclaveStack, queue_id: str) -> Any:
    """The queue account's directory in the broker's JetStream store."""
    return stack.home / "broker" / "jetstream" / account_key(stack, queue_id)


async def account_refuses_logins(stack: EnclaveStack, queue_id: str) -> bool:
    """Whether the broker refuses even the control plane's own user of the queue's account (it is gone)."""
    try:
        async with queue_account_connection(stack, queue_id):
            return False
    except nats.errors.Error as exc:
        return "authorization violation" in str(exc).lower()



def dirty_pages(path: Any) -> int:
    """How many of a file's pages the kernel holds written but not yet on the disk (Linux 6.5's
    cachestat): what an OS crash or a power cut would lose of it."""
    import ctypes
    import os

    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]  # len 0: to the end

    class Stat(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]

    libc = ctypes.CDLL(None, use_errno=True)
    stat = Stat()
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.syscall(CACHESTAT, fd, ctypes.byref(Range(0, 0)), ctypes.byref(stat), 0) != 0:
            raise OSError(ctypes.get_errno(), f"cachestat of {path}")
    finally:
        os.close(fd)
    return stat.dirty + stat.writeback


CACHESTAT = 451  #: the cachestat syscall's number (the same on x86_64 and arm64)
