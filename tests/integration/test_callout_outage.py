"""Apps ride out a control plane that cannot answer logins for a while: a reconnect refused because
the auth callout is away (the control process paused, a broker restart the callout has not caught
up with) is retried, and the session carries on once logins are answered again. Credentials that
stay refused still end the session with Unauthorized."""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest

from enclave_queue.client import connect
from enclave_queue.client import session as sdk_session
from enclave_queue.errors import BrokerUnavailable, Unauthorized
from tests.helpers import eventually, make_queue, system_connection

pytestmark = pytest.mark.slow


async def kick(stack, client_name: str) -> None:
    """Disconnect the app connection named ``client_name`` through the system account (it reconnects)."""
    async with system_connection(stack) as nc:
        server_id = nc._server_info["server_id"]
        connz = json.loads((await nc.request(f"$SYS.REQ.SERVER.{server_id}.CONNZ", b'{"limit": 1024}', timeout=2)).data)
        cids = [c["cid"] for c in connz["data"]["connections"] if c.get("name") == client_name]
        assert cids, connz
        for cid in cids:
            answer = json.loads((await nc.request(f"$SYS.REQ.SERVER.{server_id}.KICK",
                                                  json.dumps({"cid": cid}).encode(), timeout=2)).data)
            assert "error" not in answer, answer




async def test_a_reconnect_refused_while_the_callout_is_away_is_retried(enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "steady")
    # a connect timeout under the broker's 2 s wait for the callout: attempts also end unanswered
    async with connect(creds, name="steady-app", connect_timeout=1) as queue:
        await queue.put("before")
        failures: list[Exception] = []  #: what nats-py reported since the kick: its failed reconnects
        nc = queue._nc
        report = nc._error_cb

        async def counted(exc: Exception) -> None:
            failures.append(exc)
            await report(exc)

        nc._error_cb = counted
        os.kill(stack.pid, signal.SIGSTOP)  # the control process answers no login
        try:
            await kick(stack, "steady-app")
            await eventually(lambda: len(failures) >= 3, timeout=30)  # a few reconnects refused …
            assert not nc.is_connected  # … and none let in
        finally:
            os.kill(stack.pid, signal.SIGCONT)
        await queue.put("after", timeout=10)
        got = sorted((await queue.receive(batch=10, wait=2)), key=lambda m: m.body)
        assert [m.body for m in got] == ["after", "before"]


async def test_credentials_that_stay_refused_end_the_session(enclave_stack_factory, monkeypatch):
    monkeypatch.setattr(sdk_session, "REFUSED_RECONNECT_GRACE", 3.0)
    stack = enclave_stack_factory()
    creds = make_queue(stack, "gone")
    async with connect(creds, name="gone-app") as queue:
        os.kill(stack.pid, signal.SIGSTOP)
        try:
            await kick(stack, "gone-app")
            with pytest.raises(Unauthorized, match="refused user"):
                for _ in range(30):  # each put waits for the reconnect until its timeout
                    with contextlib.suppress(BrokerUnavailable, TimeoutError):
                        await queue.put("refused", timeout=0.5)
        finally:
            os.kill(stack.pid, signal.SIGCONT)
