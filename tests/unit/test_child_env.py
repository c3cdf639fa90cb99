"""The environment a child process (nats-server, its ``-t`` checks) gets: an allow-list, never a
secret. And the supervisor's config check really is started with it."""

import os
import stat

import pytest

from enclave_queue.broker.process import child_env
from enclave_queue.broker.supervisor import Supervisor


@pytest.mark.parametrize(("name", "kept"), [
    ("PATH", True),
    ("HOME", True),
    ("LANG", True),
    ("LANGUAGE", True),
    ("LC_ALL", True),
    ("LC_CTYPE", True),
    ("TZ", True),
    ("TMPDIR", True),
    ("GOMEMLIMIT", True),
    ("GOGC", True),
    ("GOMAXPROCS", True),
    ("ENCLAVE_MASTER_KEY", False),
    ("ENCLAVE_METRICS_TOKEN", False),
    ("ENCLAVE_HOME", False),
    ("ENCLAVE_API_PORT", False),
    ("enclave_master_key", False),
    ("AWS_SECRET_ACCESS_KEY", False),
    ("GITHUB_TOKEN", False),
    ("DB_PASSWORD", False),
    ("MYSQL_PASSWD", False),
    ("LC_API_KEY", False),  # an allowed prefix does not let a secret-looking name through
    ("LC_SECRET", False),
    ("USER", False),
    ("PYTHONPATH", False),
    ("LD_PRELOAD", False),
    ("SSH_AUTH_SOCK", False),
])
def test_child_env_keeps_only_allowed_names_and_never_a_secret(name, kept):
    assert (name in child_env({name: "value"})) is kept


def test_child_env_keeps_the_values_and_reads_this_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    monkeypatch.setenv("ENCLAVE_MASTER_KEY", "not-for-children")
    monkeypatch.setenv("SOME_API_SECRET", "not-for-children")
    env = child_env()
    assert env["TZ"] == "Europe/Berlin"
    assert env["PATH"] == os.environ["PATH"]
    assert "not-for-children" not in env.values()


async def test_the_config_check_runs_with_the_child_env(tmp_path, monkeypatch):
    """A stand-in binary that records its environment, run the way every config check is."""
    monkeypatch.setenv("ENCLAVE_MASTER_KEY", "mk-must-not-leak")
    monkeypatch.setenv("ENCLAVE_METRICS_TOKEN", "mt-must-not-leak")
    monkeypatch.setenv("PAYMENTS_API_KEY", "pk-must-not-leak")
    monkeypatch.setenv("TZ", "UTC")
    seen = tmp_path / "environ"
    binary = tmp_path / "nats-server"
    binary.write_text(f"#!/bin/sh\nenv > '{seen}'\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "nats.conf").write_text("")
    await Supervisor(tmp_path / "nats.conf", "127.0.0.1", 4222, binary=binary).validate(tmp_path / "nats.conf")
    names = {line.partition("=")[0] for line in seen.read_text().splitlines()}
    assert "must-not-leak" not in seen.read_text()
    assert "TZ" in names
    assert names - {"PWD", "SHLVL", "_", "OLDPWD"} <= set(child_env())
