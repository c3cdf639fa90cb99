"""The plugin process as OpenTofu meets it: go-plugin's handshake with mutual TLS, the schema,
shutdown, and the weaknesses of tf 1.2.0 that the provider works around (each pinned here)."""

import json
import os
import subprocess
from pathlib import Path

import grpc
import msgpack
import pytest
from msgpack import ExtType
from tf.gen import tfplugin_pb2 as pb
from tf.gen import tfplugin_pb2_grpc
from tf.provider import ProviderServicer
from tf.utils import read_dynamic_value

from enclave_provider.provider import EnclaveProvider
from tests.provider.conftest import plain_env
from tests.provider.harness import BINARY, UNKNOWN, Refined, Tofu, client_certificate, errors_of

RESOURCE = "enclave_queue"
ARGUMENTS = {"name", "project", "dead_letter_queue", "max_message_bytes", "max_receives", "retention_hours",
             "max_messages", "max_bytes", "dedupe_window_seconds",
             "visibility_timeout_seconds", "retry_backoff_seconds", "priorities", "replicas"}
OUTPUTS = {"broker_url", "id", "internal_broker_url", "password_secret", "subject", "username"}
ROTATION = {"password_version", "password_grace_seconds"}  #: the resource's only: arguments kept in its state


def test_handshake_is_go_plugins_with_mutual_tls(start_provider):
    process = start_provider()
    handshake = process.handshake
    assert (handshake.core_version, handshake.app_version, handshake.protocol) == (1, 6, "grpc")
    assert handshake.network == "unix" and Path(handshake.address).is_socket()
    assert oct(Path(handshake.address).parent.stat().st_mode & 0o777) == "0o700"

    # the server accepts only the client certificate it was given in PLUGIN_CLIENT_CERT
    other_cert, other_key = client_certificate()
    for chain, key in ((other_cert, other_key), (None, None)):
        credentials = grpc.ssl_channel_credentials(root_certificates=handshake.server_cert_pem,
                                                   private_key=key, certificate_chain=chain)
        with grpc.secure_channel(handshake.target, credentials,
                                 options=[("grpc.ssl_target_name_override", "localhost")]) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                tfplugin_pb2_grpc.ProviderStub(channel).GetProviderSchema(pb.GetProviderSchema.Request(), timeout=3)
            assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)

    health = process.channel.unary_unary("/grpc.health.v1.Health/Check")
    assert health(b"\n\x06plugin", timeout=5) == b"\x08\x01"  # go-plugin's Ping: SERVING
    assert process.stop() == 0
    assert not Path(handshake.address).parent.exists()
    assert process.stdout_rest == []  # nothing but the handshake line on stdout


def test_without_the_magic_cookie_it_says_it_is_a_plugin(tmp_path):
    result = subprocess.run([str(BINARY)], env=plain_env(tmp_path), capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("This binary is a plugin. These are not meant to be executed directly.")


def test_schema(start_provider):
    tofu = Tofu(start_provider())
    queue = tofu.resources[RESOURCE]
    assert queue.version == 0
    assert set(queue.attrs) == ARGUMENTS | ROTATION | OUTPUTS | {"password"}
    assert [n for n, a in queue.attrs.items() if a.required] == ["name"]
    assert {n for n, a in queue.attrs.items() if a.optional} == (ARGUMENTS | ROTATION) - {"name"}
    assert {n for n, a in queue.attrs.items() if a.computed and not a.optional} == OUTPUTS | {"password"}
    assert [n for n, a in queue.attrs.items() if a.sensitive] == ["password"]
    assert queue.attrs["password_version"].type == queue.attrs["password_grace_seconds"].type == "number"
    assert queue.attrs["retry_backoff_seconds"].type == ["list", "number"]
    assert queue.attrs["max_receives"].type == "number" and queue.attrs["id"].type == "string"
    assert queue.attrs["priorities"].type == "bool"
    assert set(tofu.data_sources) == {"enclave_queue", "enclave_secret"}
    assert set(tofu.data_sources["enclave_queue"].attrs) == ARGUMENTS | OUTPUTS
    assert tofu.data_sources["enclave_queue"].attrs["priorities"].type == "bool"
    assert tofu.data_sources["enclave_secret"].attrs["value"].sensitive
    provider = tofu.provider_codec.attrs
    assert set(provider) == {"endpoint", "token", "project"} and provider["token"].sensitive
    assert not any(a.required for a in provider.values())
    capabilities = tofu.schema.server_capabilities
    metadata = tofu.stub.GetMetadata(pb.GetMetadata.Request(), timeout=10)
    assert capabilities.plan_destroy and metadata.server_capabilities == capabilities
    assert {r.type_name for r in metadata.resources} == {RESOURCE}


def test_a_version_0_state_upgrades_without_warnings(start_provider):
    """tf 1.2.0 runs its default upgrade, with a warning, for every state of a schema without a
    version, and hands a same-version state back whatever its attributes; with Schema(version=0)
    every refresh is quiet and the state always has exactly the schema's attributes."""
    tofu = Tofu(start_provider())
    codec = tofu.resources[RESOURCE]
    state = {**codec.null_object(), "name": "emails", "project": "default", "max_receives": 3,
             "password_version": 1, "password_grace_seconds": 3600}
    for stored in (state, {"name": "emails", "project": "default", "max_receives": 3, "removed": "x"},
                   {**state, "password_version": None, "password_grace_seconds": None}):
        response = tofu.stub.UpgradeResourceState(pb.UpgradeResourceState.Request(
            type_name=RESOURCE, version=0, raw_state=pb.RawState(json=json.dumps(stored).encode())), timeout=10)
        assert list(response.diagnostics) == []
        # exactly the schema's attributes; a state from before the rotation's arguments gets their defaults
        assert codec.decode(response.upgraded_state, "upgraded state") == state


def test_refined_unknowns_are_unknown_and_come_back_as_sent(tofu: Tofu):
    """OpenTofu >= 1.6 sends partly known values as msgpack extension 12. tf 1.2.0 hands them on
    as raw ExtType (validation then compares an ExtType with numbers); the provider reads them as
    unknown and plans them back with their refinements, as OpenTofu's plan check requires."""
    refined = ExtType(12, msgpack.packb({1: False, 3: [0, True]}))
    assert read_dynamic_value(pb.DynamicValue(msgpack=msgpack.packb({"n": refined}))) == {"n": refined}  # tf's own

    config = tofu.config(RESOURCE, name="partly-known",
                         max_receives=Refined(not_null=True, lower=(0, True), upper=(1000, True)),
                         dead_letter_queue=Refined(not_null=True, prefix="partly-"),
                         retry_backoff_seconds=[5, Refined(not_null=True, lower=(1, True))])
    assert tofu.validate(RESOURCE, config) == []
    plan = tofu.plan(RESOURCE, None, config)  # the harness checks the plan as OpenTofu does
    assert errors_of(plan.diagnostics) == []
    assert plan.planned["max_receives"] == config["max_receives"]
    assert plan.planned["dead_letter_queue"] == config["dead_letter_queue"]
    assert plan.planned["retry_backoff_seconds"] == config["retry_backoff_seconds"]
    assert plan.planned["id"] is UNKNOWN and plan.planned["retention_hours"] == 96

    # a wholly unknown list, and an invalid known value next to unknown ones, still validate
    assert tofu.validate(RESOURCE, tofu.config(RESOURCE, name=UNKNOWN, retry_backoff_seconds=UNKNOWN)) == []
    (error,) = tofu.validate(RESOURCE, tofu.config(RESOURCE, name=Refined(prefix="q-"), retention_hours=999))
    assert error.path == ("retention_hours",)
    assert tofu.process.alive()


def test_a_destroy_plans_null(tofu: Tofu, start_provider):
    """tf 1.2.0 advertises plan_destroy and then refuses the destroy plan; the provider plans null."""
    codec = tofu.resources[RESOURCE]
    prior = {**codec.null_object(), "name": "gone", "project": "default"}
    stock = ProviderServicer(EnclaveProvider()).PlanResourceChange(pb.PlanResourceChange.Request(
        type_name=RESOURCE, prior_state=codec.encode(prior), proposed_new_state=codec.encode(None),
        config=codec.encode(None)), None)
    assert [d.summary for d in stock.diagnostics] == ["DELETE should never be sent to PlanResourceChange"]
    plan = tofu.plan(RESOURCE, prior, None)
    assert plan.planned is None and plan.diagnostics == []


def test_stop_provider_does_not_stop_serving(tofu: Tofu):
    """tf 1.2.0's runner stops the server on StopProvider, cutting an apply in flight."""
    assert tofu.stub.StopProvider(pb.StopProvider.Request(), timeout=10).Error == ""
    assert tofu.stub.GetProviderSchema(pb.GetProviderSchema.Request(), timeout=10).resource_schemas
    assert tofu.process.alive()


def test_an_unexpected_failure_is_a_diagnostic_and_the_process_lives_on(tofu: Tofu):
    response = tofu.stub.ValidateResourceConfig(pb.ValidateResourceConfig.Request(
        type_name="enclave_nothing", config=pb.DynamicValue(msgpack=msgpack.packb({}))), timeout=10)
    (diag,) = response.diagnostics
    assert diag.summary.startswith("The Enclave provider failed in ValidateResourceConfig: KeyError")
    assert tofu.process.alive() and "Traceback" in tofu.process.log()


def test_provider_configuration_is_validated(start_provider):
    tofu = Tofu(start_provider())
    diags = tofu.configure(endpoint="127.0.0.1:7780", project="Shop")
    assert sorted(d.path for d in errors_of(diags)) == [("endpoint",), ("project",)]
    (error,) = errors_of(tofu.configure(project="shop\n"))
    assert error.path == ("project",)


ENDPOINT_RULE = "an http:// or https:// URL of the API itself: no path other than '/', no query and no spaces"


def test_an_endpoint_with_a_path_or_a_space_is_refused_naming_the_rule(start_provider):
    """The API answers every path it does not serve with a 404: an endpoint with a path (a typo,
    a trailing space) would make every queue look deleted outside OpenTofu."""
    tofu = Tofu(start_provider())
    for endpoint in ("http://127.0.0.1:7780/typo", "http://127.0.0.1:7780 ", "http://127.0.0.1:7780/v1/",
                     "https://api.example.com?x=1"):
        (error,) = errors_of(tofu.configure(endpoint=endpoint))
        assert (error.path, error.summary) == (("endpoint",), "Invalid endpoint")
        assert error.detail == f"endpoint must be {ENDPOINT_RULE} (got {endpoint!r})."
    assert tofu.configure(endpoint="http://127.0.0.1:7780/") == []
    from_env = Tofu(start_provider(env={"ENCLAVE_URL": "http://127.0.0.1:7780/typo"}))
    (error,) = errors_of(from_env.configure())
    assert error.detail == f"ENCLAVE_URL must be {ENDPOINT_RULE} (got 'http://127.0.0.1:7780/typo')."


def test_an_unconfigured_or_unreachable_api_is_a_diagnostic(start_provider, tmp_path):
    tofu = Tofu(start_provider(env={"ENCLAVE_URL": "http://127.0.0.1:9", "ENCLAVE_TOKEN": "enq_nope"}))
    _, diags = tofu.read_data("enclave_queue", tofu.data_config("enclave_queue", name="emails"))
    assert [d.summary for d in diags] == [
        "Unable to read queue 'emails': The provider was not configured (OpenTofu calls ConfigureProvider first)."]
    assert tofu.configure() == []
    state, diags = tofu.read_data("enclave_queue", tofu.data_config("enclave_queue", name="emails"))
    (error,) = errors_of(diags)
    assert error.summary.startswith("Unable to read queue 'emails': Cannot reach the Enclave API at http://127.0.0.1:9")
    assert state is None and tofu.process.alive()
    assert os.path.exists(tofu.process.handshake.address)


def test_a_token_read_from_a_file_with_its_newline_works_and_a_broken_one_is_a_diagnostic(start_provider, stack):
    """``token = file(".../admin-token")`` keeps the file's final newline: trimmed. A token with a
    space inside was the provider's own failure ("a bug in the provider"): now a diagnostic on token."""
    tofu = Tofu(start_provider())
    assert errors_of(tofu.configure(endpoint=stack.api_url, token=stack.token + "\n")) == []
    _, diags = tofu.read_data("enclave_queue", tofu.data_config("enclave_queue", name="no-such-queue"))
    (missing,) = errors_of(diags)  # the token was taken: the API answers the read, and the queue is not there
    assert "does not exist" in missing.summary + missing.detail, missing
    broken = Tofu(start_provider())
    (error,) = errors_of(broken.configure(endpoint=stack.api_url, token="enq_two words"))
    assert error.path == ("token",) and "not printable ASCII" in error.detail
