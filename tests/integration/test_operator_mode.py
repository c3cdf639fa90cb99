"""Operator mode on the nats-server we ship: accounts pushed as JWTs (no reload), password logins
through the auth callout, signing keys a password version, and what is refused.

The broker runs the configuration broker/config.py renders; the control plane's users are made
from the same derived keys, the callout is controller/callout.py's, and each queue account's
claims are broker/claims.py's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import nkeys
import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from enclave_queue.auth import jwt
from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey, hash_password
from enclave_queue.broker.claims import control_user, queue_account
from enclave_queue.broker.config import BrokerConfig, render
from enclave_queue.broker.process import child_env, free_port, nats_server_binary
from enclave_queue.controller.callout import Callout
from enclave_queue.names import CONSUMER, inbox_prefix, stream_name
from enclave_queue.testing import wait_for_nats
from tests.helpers import eventually

MAX_BYTES = 8 << 20


class Broker:
    def __init__(self, root: Path) -> None:
        self.keys = OperatorKeys(MasterKey(os.urandom(32)))
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        config = BrokerConfig(host="127.0.0.1", port=self.port, store_dir=root / "js",
                                log_file=root / "nats.log", sync="always", max_file_store=256 << 20)
        (root / "nats.conf").write_text(render(config, self.keys))
        self.log = root / "nats.log"
        self.proc = subprocess.Popen([str(nats_server_binary()), "-c", str(root / "nats.conf")],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=child_env())
        try:
            wait_for_nats(self.proc, self.port, self.log)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    async def connect_as(self, account: nkeys.KeyPair, user: nkeys.KeyPair, claims: dict, *,
                         signer: nkeys.KeyPair | None = None, **options) -> nats.NATS:
        token = jwt.encode(claims, signer or account).encode()
        nc = nats.NATS()
        try:
            await nc.connect(self.url, user_jwt_cb=lambda: token,
                             signature_cb=lambda nonce: base64.b64encode(user.sign(nonce.encode())),
                             allow_reconnect=False, connect_timeout=1, **options)
        except BaseException:
            await nc.close()
            raise
        return nc

    async def platform(self, role: str, user_role: str) -> nats.NATS:
        user = self.keys.platform_user(user_role)
        return await self.connect_as(self.keys.platform_account(role), user,
                                     control_user(self.keys.public(user), user_role))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    running = Broker(tmp_path)
    try:
        yield running
    finally:
        running.stop()


class Plane:
    """The control plane's side: system and callout connections, passwords by version."""

    def __init__(self, broker: Broker) -> None:
        self.broker, self.keys = broker, broker.keys
        self.passwords: dict[str, dict[int, str]] = {}  # queue id -> version -> bcrypt hash
        self.verify_fails = False

    async def start(self) -> None:
        self.system = await self.broker.platform("system", "system")
        self.callout_nc = await self.broker.platform("auth", "callout")
        self.callout = Callout(self.callout_nc, self.verify, self.keys)
        await self.callout.start()
        await self.callout_nc.flush()

    async def verify(self, username: str, password: str) -> int | None:
        import bcrypt

        if self.verify_fails:
            raise RuntimeError("state store unavailable")
        for version, hashed in self.passwords.get(username, {}).items():
            if bcrypt.checkpw(password.encode(), hashed.encode()):
                return version
        return None

    async def push(self, queue_id: str, versions: tuple[int, ...]) -> None:
        account = self.keys.public(self.keys.queue_account(queue_id))
        control = self.keys.public(self.keys.platform_account("control"))
        signers = tuple(self.keys.public(self.keys.queue_signer(queue_id, v)) for v in versions)
        claims = queue_account(queue_id, account, control, max_bytes=MAX_BYTES, signing_keys=signers)
        reply = await self.system.request("$SYS.REQ.CLAIMS.UPDATE", jwt.encode(claims, self.keys.operator).encode(),
                                          timeout=2)
        answer = json.loads(reply.data)
        assert "error" not in answer, answer

    async def make_queue(self, queue_id: str, password: str) -> None:
        self.passwords[queue_id] = {1: hash_password(password)}
        await self.push(queue_id, (1,))
        control = self.keys.queue_control_user(queue_id)
        nc = await self.broker.connect_as(self.keys.queue_account(queue_id), control,
                                          control_user(self.keys.public(control), "control"))
        js = nc.jetstream(timeout=2)
        stream = stream_name(queue_id)
        await js.add_stream(StreamConfig(name=stream, subjects=[f"queue.default.{queue_id}"], retention="workqueue",
                                         max_bytes=MAX_BYTES))
        await js.add_consumer(stream, ConsumerConfig(durable_name=CONSUMER, ack_policy="explicit", ack_wait=30))
        await nc.close()

    async def varz(self) -> dict:
        reply = await self.system.request("$SYS.REQ.SERVER.PING.VARZ", b"{}", timeout=2)
        return json.loads(reply.data)["data"]

    async def close(self) -> None:
        await self.callout.stop()
        for nc in (self.callout_nc, self.system):
            await nc.close()


@pytest.fixture
async def plane(broker: Broker) -> AsyncIterator[Plane]:
    running = Plane(broker)
    await running.start()
    try:
        yield running
    finally:
        await running.close()


async def app(broker: Broker, username: str, password: str, **options) -> nats.NATS:
    return await nats.connect(broker.url, user=username, password=password, allow_reconnect=False,
                              connect_timeout=2, inbox_prefix=inbox_prefix(username), **options)


async def refused(broker: Broker, **options) -> str:
    nc = nats.NATS()
    try:
        with pytest.raises(nats.errors.Error) as caught:
            await nc.connect(broker.url, allow_reconnect=False, connect_timeout=2, **options)
    finally:
        await nc.close()  # a refused connect leaves its socket open otherwise
    return str(caught.value)


async def test_a_password_login_lands_in_its_queue_account_with_the_app_permissions(broker, plane):
    await plane.make_queue("qa", "pw-a")
    nc = await app(broker, "qa", "pw-a")
    try:
        js = nc.jetstream(timeout=2)
        ack = await js.publish("queue.default.qa", b"hello")
        assert ack.stream == "QA"
        async def pending() -> int:  # what nats.js consumers.get() asks
            return (await js.consumer_info("QA", CONSUMER)).num_pending

        # the consumer counts a stored message a moment after the PubAck
        assert await eventually(lambda: pending(), timeout=2, interval=0.01) == 1
        sub = await js.pull_subscribe_bind(CONSUMER, "QA", inbox_prefix=f"{inbox_prefix('qa')}.".encode())
        [msg] = await sub.fetch(1, timeout=2)
        assert msg.data == b"hello"
        await msg.ack_sync(timeout=2)
        assert (await js.consumer_info("QA", CONSUMER)).num_ack_pending == 0
    finally:
        await nc.close()


async def test_wrong_unknown_missing_or_unverifiable_credentials_are_refused(broker, plane):
    await plane.make_queue("qa", "pw-a")
    assert "authorization violation" in (await refused(broker, user="qa", password="wrong")).lower()
    assert "authorization violation" in (await refused(broker, user="nobody", password="pw-a")).lower()
    assert "authorization violation" in (await refused(broker)).lower()  # only the sentinel
    assert "authorization violation" in (await refused(broker, user="qa", password="")).lower()
    plane.verify_fails = True
    assert "authorization violation" in (await refused(broker, user="qa", password="pw-a")).lower()


async def test_forged_or_expired_jwts_are_refused(broker, plane):
    await plane.make_queue("qa", "pw-a")
    account = broker.keys.public(broker.keys.queue_account("qa"))
    user = jwt.new_key(nkeys.PREFIX_BYTE_USER, os.urandom(32))
    stranger = jwt.new_key(nkeys.PREFIX_BYTE_ACCOUNT, os.urandom(32))  # not the account, nor its signer
    forged = jwt.user_claims(broker.keys.public(user), "forged", issuer_account=account)
    with pytest.raises(nats.errors.Error, match="(?i)authorization violation"):
        await broker.connect_as(broker.keys.queue_account("qa"), user, forged, signer=stranger)
    expired = jwt.user_claims(broker.keys.public(user), "expired", expires=1)
    with pytest.raises(nats.errors.Error, match="(?i)(authorization violation|expired)"):
        await broker.connect_as(broker.keys.queue_account("qa"), user, expired)


async def test_one_queues_login_cannot_reach_another_queue(broker, plane):
    await plane.make_queue("qa", "pw-a")
    await plane.make_queue("qb", "pw-b")
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await app(broker, "qa", "pw-a", error_cb=on_error)
    try:
        js = nc.jetstream(timeout=1)
        with pytest.raises((nats.errors.TimeoutError, nats.js.errors.NotFoundError, nats.errors.NoRespondersError,
                            nats.js.errors.ServiceUnavailableError)):
            await js.stream_info("QB")
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await nc.request("queue.default.qb", b"x", timeout=1)  # qb's subject is not in qa's account
    finally:
        await nc.close()
    b = await app(broker, "qb", "pw-b")
    try:
        assert (await b.jetstream(timeout=2).stream_info("QB")).state.messages == 0
    finally:
        await b.close()


async def test_pushed_accounts_need_no_reload(broker, plane):
    before = (await plane.varz())["config_load_time"]
    for n in range(20):
        await plane.make_queue(f"q{n:02d}", f"pw-{n}")
    nc = await app(broker, "q07", "pw-7")
    await nc.close()
    assert (await plane.varz())["config_load_time"] == before


async def test_a_rotation_keeps_both_passwords_for_the_grace_then_ends_the_old_ones_connections(broker, plane):
    await plane.make_queue("qa", "old-pw")
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    old = await app(broker, "qa", "old-pw", closed_cb=on_closed)
    # rotation starts: a second version, both signing keys live
    plane.passwords["qa"][2] = hash_password("new-pw")
    await plane.push("qa", (1, 2))
    new = await app(broker, "qa", "new-pw")
    again = await app(broker, "qa", "old-pw")
    await again.close()
    await old.flush(timeout=2)
    assert old.is_connected and new.is_connected
    # grace over: version 1 goes from the passwords and the account's signing keys
    del plane.passwords["qa"][1]
    await plane.push("qa", (2,))
    await asyncio.wait_for(closed.wait(), 5)
    assert "authorization violation" in (await refused(broker, user="qa", password="old-pw")).lower()
    await new.flush(timeout=2)
    assert new.is_connected
    await new.jetstream(timeout=2).publish("queue.default.qa", b"after")
    await new.close()


async def test_the_account_pool_reuses_bounds_and_never_closes_a_held_connection(broker, plane):
    from enclave_queue.broker.pool import AccountConnections

    for n in range(4):
        await plane.make_queue(f"p{n}", f"pw-{n}")
    pool = AccountConnections(broker.url, broker.keys, size=2)
    try:
        async with pool.lease("p0") as held:
            async with pool.lease("p0") as again:
                assert again is held
            for n in (1, 2, 3):
                async with pool.lease(f"p{n}") as nc:
                    info = await nc.jetstream(timeout=2).stream_info(f"P{n}")  # its own account's stream
                    assert info.config.name == f"P{n}"
            assert held.is_connected and len(pool) <= 3  # p0 is held: over the bound, not closed
            await held.jetstream(timeout=2).publish("queue.default.p0", b"x")
        async with pool.lease("p1"):
            pass
        assert len(pool) == 2
    finally:
        await pool.close()
    assert held.is_closed


async def test_the_account_pool_trims_safely_while_leases_race(broker, plane):
    # six held at once, over the bound: each let go while still over it is closed by a trim that
    # runs while the next is let go (its own trim); then two leases of the two left, and six at
    # once again, whose openings' trims race each other: none may pop what another one chose
    from enclave_queue.broker.pool import AccountConnections

    for n in range(6):
        await plane.make_queue(f"r{n}", f"pw-{n}")
    pool = AccountConnections(broker.url, broker.keys, size=2)

    async def use(queue_id: str) -> str:
        async with pool.lease(queue_id) as nc:
            return (await nc.jetstream(timeout=5).stream_info(queue_id.upper())).config.name

    try:
        async with contextlib.AsyncExitStack() as held:  # six open at once: over the bound, none closed
            for n in range(6):
                await held.enter_async_context(pool.lease(f"r{n}"))
            assert len(pool) == 6
        assert await asyncio.gather(use("r0"), use("r1")) == ["R0", "R1"]
        assert len(pool) == 2  # back to the bound, the two it kept the two let go last
        assert await asyncio.gather(*(use(f"r{n}") for n in range(6))) == [f"R{n}" for n in range(6)]
    finally:
        await pool.close()


async def test_the_account_pool_shrinks_back_to_its_idle_keep_once_a_burst_is_over(broker, plane):
    # a burst opens up to the bound; once unused for idle_seconds, all but keep_idle are closed by
    # themselves (no lease needed to trigger it), the least recently used first, never a held one
    from enclave_queue.broker.pool import AccountConnections

    for n in range(5):
        await plane.make_queue(f"s{n}", f"pw-{n}")
    pool = AccountConnections(broker.url, broker.keys, size=6, keep_idle=2, idle_seconds=0.3)
    try:
        opened = {}
        for n in range(4):
            async with pool.lease(f"s{n}") as nc:
                opened[n] = nc
        async with pool.lease("s4") as held:
            assert len(pool) == 5
            await eventually(lambda: len(pool) == 2, timeout=10)
            assert held.is_connected and opened[3].is_connected  # the held one and the last one used
            assert all(opened[n].is_closed for n in range(3))
            await held.jetstream(timeout=2).publish("queue.default.s4", b"x")
    finally:
        await pool.close()


async def test_the_account_pool_opens_nothing_into_a_forgotten_account(broker, plane):
    # a deleted queue's account: a connection into it, opened after or while it was forgotten,
    # would be closed by the broker and reconnect for ever
    from enclave_queue.broker.pool import AccountConnections
    from enclave_queue.errors import BrokerUnavailable

    for name in ("f0", "f1"):
        await plane.make_queue(name, f"pw-{name}")
    pool = AccountConnections(broker.url, broker.keys, size=4)
    try:
        async with pool.lease("f0") as nc:
            pass
        await pool.forget("f0")
        assert nc.is_closed and len(pool) == 0
        with pytest.raises(BrokerUnavailable, match="f0 was deleted"):
            async with pool.lease("f0"):
                pass

        async def lease_f1() -> None:
            async with pool.lease("f1"):
                pass

        connecting = asyncio.create_task(lease_f1())
        await asyncio.sleep(0)  # under way: connecting
        await pool.forget("f1")
        with pytest.raises(BrokerUnavailable, match="f1 was deleted"):
            await connecting
        assert len(pool) == 0
    finally:
        await pool.close()
