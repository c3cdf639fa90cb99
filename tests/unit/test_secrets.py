"""The master key: sealing, binding to an owner, derived nkeys, files written 0600."""

import stat

import bcrypt
import pytest

from enclave_queue.auth.secrets import MasterKey, SealError, generate_password, hash_password
from enclave_queue.auth.tokens import generate_token, token_digest


def test_master_key_file_is_created_private_and_reused(tmp_path):
    first = MasterKey.load_or_create(tmp_path)
    mode = stat.S_IMODE((tmp_path / "master.key").stat().st_mode)
    assert mode == 0o600
    again = MasterKey.load_or_create(tmp_path)
    assert again.unseal(first.seal(b"x", "p"), "p") == b"x"


def test_sealed_values_are_bound_to_purpose_and_context(tmp_path):
    key = MasterKey.load_or_create(tmp_path)
    sealed = key.seal(b"secret", "queue-password", "qone")
    assert b"secret" not in sealed.encode()
    assert key.unseal(sealed, "queue-password", "qone") == b"secret"
    with pytest.raises(SealError):
        key.unseal(sealed, "queue-password", "qtwo")
    with pytest.raises(SealError):
        key.unseal(sealed, "receipt", "qone")
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(SealError):
        key.unseal(tampered, "queue-password", "qone")


def test_handles_never_read_as_a_command_line_option(tmp_path):
    # base64url starts with '-' once in 64; 1,000 receipts would show it all but surely
    key = MasterKey.load_or_create(tmp_path)
    handles = [key.seal_handle(b"r%d" % n, "receipt", "qone") for n in range(1000)]
    assert not [h for h in handles if h.startswith("-")]
    assert [key.unseal_handle(h, "receipt", "qone") for h in handles[:3]] == [b"r0", b"r1", b"r2"]
    with pytest.raises(SealError):  # a bare sealed value is not a handle
        key.unseal_handle(key.seal(b"r0", "receipt", "qone"), "receipt", "qone")
    with pytest.raises(SealError):
        key.unseal_handle(handles[0], "receipt", "qtwo")


def test_another_master_key_cannot_unseal(tmp_path):
    sealed = MasterKey.load_or_create(tmp_path / "a").seal(b"x", "p")
    with pytest.raises(SealError):
        MasterKey.load_or_create(tmp_path / "b").unseal(sealed, "p")


def test_master_key_from_environment_overrides_file(tmp_path):
    import base64
    import os

    raw = os.urandom(32)
    env_key = MasterKey.load_or_create(tmp_path, base64.urlsafe_b64encode(raw).decode())
    assert not (tmp_path / "master.key").exists()
    assert MasterKey(raw).unseal(env_key.seal(b"v", "p"), "p") == b"v"


def test_nkeys_are_derived_stable_and_distinct(tmp_path):
    key = MasterKey.load_or_create(tmp_path)
    assert key.nkey("control") == MasterKey.load_or_create(tmp_path).nkey("control")
    assert key.nkey("control").public != key.nkey("system").public
    assert key.nkey("control").public.startswith("U") and key.nkey("control").seed.startswith("SU")
    assert key.nkey("control").seed not in repr(key.nkey("control"))


def test_passwords_are_long_random_and_hashed_with_bcrypt():
    a, b = generate_password(), generate_password()
    assert a != b and len(a) >= 32
    hashed = hash_password(a)
    assert bcrypt.checkpw(a.encode(), hashed.encode())
    assert a not in hashed


def test_tokens_are_stored_as_digests():
    token = generate_token()
    assert token.startswith("enq_") and len(token) > 40
    assert token_digest(token) != token and len(token_digest(token)) == 64
