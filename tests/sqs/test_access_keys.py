"""``enclave access-key create / list / revoke`` as a user runs them, what a key may reach (its
project only, when it has one), that a revoked key is refused at once, and that no secret is kept
or logged in the clear."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from enclave_queue.state.kv import ACCESS_KEYS_BUCKET
from tests.helpers import control_connection

from .conftest import boto_client

ENCLAVE = str(Path(sys.executable).parent / "enclave")
PROJECT = "sqs-scoped"


def cli(stack, *args):
    return subprocess.run([ENCLAVE, *args], env=stack.env, capture_output=True, text=True, timeout=60, check=False)


def test_a_key_from_the_cli_is_scoped_listed_and_revoked(stack, endpoint, unique_name):
    made = cli(stack, "access-key", "create", "--project", PROJECT, "--name", "ci", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert key["access_key_id"].startswith("EQAK") and len(key["access_key_id"]) == 20
    assert len(key["secret_access_key"]) == 40 and key["project"] == PROJECT
    listed = json.loads(cli(stack, "access-key", "list", "--json").stdout)
    assert {"access_key_id": key["access_key_id"], "project": PROJECT, "name": "ci"}.items() <= next(
        k for k in listed if k["access_key_id"] == key["access_key_id"]).items()
    assert all("secret_access_key" not in k for k in listed)

    sqs = boto_client(endpoint, key["access_key_id"], key["secret_access_key"])
    try:
        url = sqs.create_queue(QueueName=unique_name)["QueueUrl"]
        assert url.endswith(f"/sqs/{PROJECT}/{unique_name}")
        with stack.admin() as admin:
            assert admin.get_queue(PROJECT, unique_name)["name"] == unique_name
        assert sqs.list_queues()["QueueUrls"] == [url]
        with pytest.raises(sqs.exceptions.ClientError) as denied:
            sqs.get_queue_url(QueueName=unique_name, QueueOwnerAWSAccountId="default")
        assert denied.value.response["Error"]["Code"] == "AccessDenied"
        with pytest.raises(sqs.exceptions.ClientError) as denied:
            sqs.send_message(QueueUrl=f"{stack.api_url}/sqs/default/{unique_name}", MessageBody="x")
        assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

        revoked = cli(stack, "access-key", "revoke", key["access_key_id"], "--yes")
        assert revoked.returncode == 0, revoked.stderr
        with pytest.raises(sqs.exceptions.ClientError) as refused:
            sqs.list_queues()
        assert refused.value.response["Error"]["Code"] == "InvalidClientTokenId"
        again = cli(stack, "access-key", "revoke", key["access_key_id"], "--yes")
        assert (again.returncode, again.stderr.strip()) == (4, f"error: Access key '{key['access_key_id']}' does not exist.")
    finally:
        with stack.admin() as admin:
            admin.delete_queue(PROJECT, unique_name)


def test_create_shows_the_secret_once_and_list_never(stack):
    made = cli(stack, "access-key", "create", "--name", "shown")
    assert made.returncode == 0, made.stderr
    fields = dict(line.strip().split(None, 1) for line in made.stdout.splitlines() if line.strip())
    assert fields["project"] == "(every project)" and len(fields["secret_access_key"]) == 40
    assert "Save the secret access key now" in made.stderr
    listed = cli(stack, "access-key", "list")
    assert fields["access_key_id"] in listed.stdout and fields["secret_access_key"] not in listed.stdout
    assert cli(stack, "access-key", "revoke", fields["access_key_id"], "--yes").returncode == 0


def test_a_bad_key_id_and_project_are_refused_naming_the_field(stack):
    bad = cli(stack, "access-key", "revoke", "AKIAIOSFODNN7EXAMPLE", "--yes")
    assert bad.returncode == 2 and "access_key_id" in bad.stderr
    project = cli(stack, "access-key", "create", "--project", "Not_A_Project")
    assert project.returncode == 2 and "project" in project.stderr


async def test_secrets_are_sealed_in_the_store_and_never_logged(stack, access_key, sqs):
    sqs.list_queues()  # one signed request, logged or not
    secret = access_key["secret_access_key"]
    async with control_connection(stack) as nc:
        kv = await nc.jetstream().key_value(ACCESS_KEYS_BUCKET)
        stored = (await kv.get(access_key["access_key_id"])).value
    assert secret.encode() not in stored and b"sealed_secret" in stored
    for log in (stack.home / "logs").iterdir():
        assert secret not in log.read_text(errors="replace"), log
