"""Password logins under abuse (controller/logins.py, callout.py): a flood of wrong passwords for
one queue's username does not refuse another queue's logins, nor its own app's known password;
a password longer than bcrypt takes is refused like any wrong one, with nothing logged."""

import asyncio

import nats
import nats.errors
import pytest

from enclave_queue.auth.secrets import generate_password
from tests.helpers import make_queue


async def _login(creds, password=None):
    """True if the broker let the login in; False if it refused it."""
    nc = nats.NATS()
    try:
        await nc.connect(creds["broker_url"], user=creds["username"], password=password or creds["password"],
                         inbox_prefix=creds["inbox_prefix"], allow_reconnect=False, connect_timeout=5)
        return True
    except nats.errors.Error as exc:
        assert "authorization violation" in str(exc).lower(), exc
        return False
    finally:
        await nc.close()


async def test_a_wrong_password_flood_refuses_no_one_else(stack, unique_name):
    target = make_queue(stack, unique_name)
    other = make_queue(stack, f"{unique_name}-b")
    assert await _login(target)  # its app logged in before: its password is known
    flood = [asyncio.create_task(_login(target, generate_password())) for _ in range(500)]
    others = await asyncio.gather(*(_login(other) for _ in range(6)), _login(target))
    assert not any(await asyncio.gather(*flood))
    assert all(others), others


@pytest.mark.parametrize("password", ["p" * 73, "é" * 40, "x" * 1000])
async def test_a_password_bcrypt_cannot_take_is_refused_quietly(stack, unique_name, password):
    creds = make_queue(stack, unique_name)
    before = stack.log_path.read_text()
    assert not await _login(creds, password)
    assert await _login(creds)
    assert "could not check the password" not in stack.log_path.read_text()[len(before):]


async def test_a_wrong_password_flood_keeps_no_right_password_out(stack, unique_name):
    """The username is the queue's id, no secret: a stranger's flood of wrong passwords for it
    kept out every right password the control process had not seen log in lately (a new app
    instance, the password a rotation just gave, every app after a restart)."""
    creds = make_queue(stack, unique_name)  # its app never logged in: its password is not known
    stop, refused = asyncio.Event(), 0

    async def flood():
        nonlocal refused
        while not stop.is_set():
            results = await asyncio.gather(*(_login(creds, generate_password()) for _ in range(20)))
            assert not any(results)
            refused += len(results)

    flooding = asyncio.create_task(flood())
    try:
        while refused < 40:  # the username's failed checks are used up for now
            await asyncio.sleep(0.05)
        assert await _login(creds)
        with stack.admin() as admin:
            new = admin.rotate_password("default", unique_name, grace_seconds=600)
        assert await _login(new)
        assert await _login(creds)  # the old one, in its grace, logged in before: known
    finally:
        stop.set()
        await flooding
