"""The auth callout's answers to requests it can and cannot verify (no broker: answer() alone)."""

import os

import nkeys
import pytest

from enclave_queue.auth import jwt
from enclave_queue.auth.keys import OperatorKeys
from enclave_queue.auth.secrets import MasterKey
from enclave_queue.controller.callout import answer

KEYS = OperatorKeys(MasterKey(os.urandom(32)))
SERVER = jwt.new_key(nkeys.PREFIX_BYTE_SERVER, os.urandom(32))
USER = jwt.public_key(jwt.new_key(nkeys.PREFIX_BYTE_USER, os.urandom(32)))


def request(signer=SERVER, user_nkey=USER, **connect_opts):
    return jwt.encode({"sub": USER, "nats": {"type": "authorization_request", "version": 2, "user_nkey": user_nkey,
                                             "server_id": {"id": jwt.public_key(SERVER)},
                                             "connect_opts": connect_opts}}, signer)


async def verify(username, password):
    return 3 if (username, password) == ("qa", "right") else None


async def response(token):
    claims = jwt.decode(await answer(token, verify, KEYS), issuer_prefix="A")
    assert claims["iss"] == KEYS.public(KEYS.platform_account("auth"))
    return claims


async def test_a_live_password_gets_a_user_of_its_queue_signed_by_its_versions_key():
    claims = await response(request(user="qa", **{"pass": "right"}))
    assert claims["sub"] == USER and claims["aud"] == jwt.public_key(SERVER)
    user = jwt.decode(claims["nats"]["jwt"])
    assert user["iss"] == KEYS.public(KEYS.queue_signer("qa", 3))
    assert user["nats"]["issuer_account"] == KEYS.public(KEYS.queue_account("qa"))
    assert user["sub"] == USER and "error" not in claims["nats"]


@pytest.mark.parametrize("token", [
    request(user="qa", **{"pass": "wrong"}),
    request(user="qb", **{"pass": "right"}),
    request(user="qa"),
    request(),
    request(user="qa", **{"pass": ["right"]}),
    request(signer=jwt.new_key(nkeys.PREFIX_BYTE_ACCOUNT, os.urandom(32)), user="qa", **{"pass": "right"}),
    request(user_nkey="ABC", user="qa", **{"pass": "right"}),
    "not a jwt",
])
async def test_anything_else_is_refused_with_no_user(token):
    claims = await response(token)
    assert "jwt" not in claims["nats"] and claims["nats"]["error"]


async def test_a_verifier_that_fails_refuses():
    async def broken(username, password):
        raise RuntimeError("state store down")

    claims = jwt.decode(await answer(request(user="qa", **{"pass": "right"}), broken, KEYS))
    assert "jwt" not in claims["nats"] and claims["nats"]["error"] == "cannot verify now"
