import pytest

from enclave_queue import envelope
from enclave_queue.errors import SpecError


def test_leases_are_over_a_lease_after_the_last_one_began_and_when_the_broker_forgot_it():
    from datetime import UTC, datetime, timedelta

    from enclave_queue.envelope import leases_over

    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    assert not leases_over(now - timedelta(seconds=29), 30.0, [], now)
    assert leases_over(now - timedelta(seconds=30), 30.0, [], now)
    assert not leases_over(now - timedelta(seconds=50), 30.0, [5.0, 60.0], now)  # the longest backoff entry
    # a restarted broker keeps no last_active: what a worker held before is waiting, not in flight for good
    assert leases_over(None, 30.0, [], now)


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON", "application/json;"])
def test_a_json_body_is_decoded_whatever_parameters_its_content_type_carries(content_type):
    """Many HTTP and JS stacks send the charset: the body was handed over as bytes."""
    assert envelope.decode(b'{"a": 1}', content_type) == {"a": 1}
    assert envelope.decode("é".encode(), "TEXT/plain; charset=utf-8") == "é"
    with pytest.raises(SpecError):
        envelope.decode(b"{not json", content_type)
