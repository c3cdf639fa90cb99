"""Server settings from the environment: the sampler's period and the metrics token are checked
when ``enclave up`` starts, like every other setting."""

import pytest

from enclave_queue.errors import SpecError
from enclave_queue.settings import EnclaveSettings, parse_routes


def test_defaults_sample_every_minute_without_a_metrics_token():
    settings = EnclaveSettings.from_env({})
    assert settings.sample_seconds == 60.0 and settings.metrics_token is None


def test_sample_seconds_and_metrics_token_are_read():
    settings = EnclaveSettings.from_env({"ENCLAVE_SAMPLE_SECONDS": "0.5", "ENCLAVE_METRICS_TOKEN": "m" * 16})
    assert settings.sample_seconds == 0.5 and settings.metrics_token == "m" * 16
    assert "m" * 16 not in repr(settings)


@pytest.mark.parametrize("value", ["0.1", "86401", "often"])
def test_sample_seconds_out_of_range_is_refused_with_its_range(value):
    with pytest.raises(SpecError, match=r"ENCLAVE_SAMPLE_SECONDS must be a number from 0.2 to 86400"):
        EnclaveSettings.from_env({"ENCLAVE_SAMPLE_SECONDS": value})


@pytest.mark.parametrize("value", ["short", "has a space in the middle"])
def test_a_weak_metrics_token_is_refused(value):
    with pytest.raises(SpecError, match="ENCLAVE_METRICS_TOKEN must be at least 16 characters without spaces"):
        EnclaveSettings.from_env({"ENCLAVE_METRICS_TOKEN": value})


def test_routes_are_read_as_host_port_whatever_way_they_are_written():
    assert parse_routes(" node-b.example:6222,nats-route://10.0.0.3:6222 ,[::1]:7000") == (
        "node-b.example:6222", "10.0.0.3:6222", "[::1]:7000")


@pytest.mark.parametrize("value", [
    "node-b", "node-b:", ":6222", "node-b:0", "node-b:65536", "node-b:62x2", "node b:6222", 'node"b:6222',
    "node-b}:6222", "user:pw@node-b:6222", "node-b:6222/x", "-node:6222", "node-b:6222,", "::1:6222",
    "node-b:６２２２",
])
def test_a_route_that_is_not_host_port_is_refused_naming_the_setting_and_the_rule(value):
    with pytest.raises(SpecError, match=r"ENCLAVE_ROUTES must be a comma-separated list of host:port .*each host a DNS "):
        EnclaveSettings.from_env({"ENCLAVE_ROUTES": value, "ENCLAVE_CLUSTER_PORT": "6222"})


def test_a_node_named_twice_in_the_routes_is_refused():
    with pytest.raises(SpecError, match="ENCLAVE_ROUTES names a node twice"):
        parse_routes("node-b:6222,nats-route://node-b:6222")
