"""Server settings from the environment: the sampler's period and the metrics token are checked
when ``enclave up`` starts, like every other setting."""

import pytest

from enclave_queue.errors import SpecError
from enclave_queue.settings import EnclaveSettings


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
