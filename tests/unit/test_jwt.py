"""NATS JWTs: what is signed reads back, anything altered, mis-issued or expired is refused."""

import base64
import json
import os

import nkeys
import pytest

from enclave_queue.auth import jwt


def key(prefix=nkeys.PREFIX_BYTE_ACCOUNT):
    return jwt.new_key(prefix, os.urandom(32))


def parts(token):
    return token.split(".")


def test_signed_claims_read_back_with_issuer_iat_and_jti():
    account = key()
    token = jwt.encode(jwt.account_claims("ABC", "q", limits={"conn": -1}), account, now=1000)
    claims = jwt.decode(token, issuer_prefix="A", now=1001)
    assert claims["iss"] == jwt.public_key(account) and claims["iat"] == 1000
    assert claims["nats"] == {"type": "account", "version": 2, "limits": {"conn": -1}}
    assert len(claims["jti"]) == 52  # base32 of a SHA-256, unpadded
    header = json.loads(base64.urlsafe_b64decode(parts(token)[0] + "=="))
    assert header == {"typ": "JWT", "alg": "ed25519-nkey"}


def test_the_jti_changes_with_the_claims():
    signer = key()
    a = jwt.decode(jwt.encode({"sub": "x"}, signer, now=5))
    b = jwt.decode(jwt.encode({"sub": "y"}, signer, now=5))
    assert a["jti"] != b["jti"]


@pytest.mark.parametrize("damage", ["claims", "signature", "issuer", "parts", "alg"])
def test_altered_tokens_are_refused(damage):
    signer = key()
    token = jwt.encode({"sub": "x", "name": "n"}, signer)
    header, body, signature = parts(token)
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    if damage == "claims":
        claims["name"] = "m"
        token = ".".join([header, jwt._b64(json.dumps(claims).encode()), signature])
    elif damage == "signature":
        token = ".".join([header, body, jwt._b64(b"\0" * 64)])
    elif damage == "issuer":  # re-signed by another key, claiming the first as issuer
        claims["iss"] = jwt.public_key(key())
        forged = ".".join([header, jwt._b64(json.dumps(claims).encode())])
        token = f"{forged}.{jwt._b64(signer.sign(forged.encode()))}"
    elif damage == "parts":
        token = f"{header}.{body}"
    elif damage == "alg":
        token = ".".join([jwt._b64(b'{"typ":"JWT","alg":"none"}'), body, signature])
    with pytest.raises(jwt.JWTError):
        jwt.decode(token)


def test_issuer_kind_and_expiry_are_checked():
    server = key(nkeys.PREFIX_BYTE_SERVER)
    token = jwt.encode({"sub": "x", "exp": 2000}, server, now=1000)
    assert jwt.decode(token, issuer_prefix="N", now=1999)["sub"] == "x"
    with pytest.raises(jwt.JWTError, match="expired"):
        jwt.decode(token, issuer_prefix="N", now=2000)
    with pytest.raises(jwt.JWTError, match="issuer"):
        jwt.decode(token, issuer_prefix="A", now=1500)
    for junk in ("", "a.b.c", None, "x" * 10):
        with pytest.raises(jwt.JWTError):
            jwt.decode(junk)
