"""The SDK's compensation for how nats-server times a delayed nak when the consumer has a backoff."""

import json

import pytest

from enclave_queue.envelope import nak_delay, nak_payload
from enclave_queue.spec import scheduled_delay


def server_gap(sent: float, receive_count: int, backoff: list[float]) -> float:
    """When nats-server 2.15 redelivers after a -NAK with ``sent`` delay (consumer.go checkPending)."""
    redeliveries = min(receive_count - 1, len(backoff) - 1)
    return sent - backoff[0] + backoff[redeliveries]


@pytest.mark.parametrize("receive_count", [1, 2, 3, 7])
@pytest.mark.parametrize("wanted", [0.5, 2, 30])
def test_the_sent_delay_makes_the_server_wait_what_was_asked(receive_count, wanted):
    backoff = [1.0, 5.0, 60.0]
    assert server_gap(nak_delay(wanted, receive_count, backoff), receive_count, backoff) == pytest.approx(wanted)


def test_without_a_backoff_the_delay_is_sent_as_it_is():
    assert nak_delay(7, 3, []) == 7
    assert scheduled_delay(3, []) == 0


def test_the_schedule_repeats_its_last_entry():
    assert [scheduled_delay(n, [1.0, 2.0]) for n in (1, 2, 3)] == [1.0, 2.0, 2.0]


@pytest.mark.parametrize(("delay", "receive_count", "backoff", "sent_ns"), [
    (0, 1, [1.0, 5.0], None),  # at once: a plain -NAK
    (10, 1, [], 10_000_000_000),  # no schedule: as asked
    (10, 1, [1.0, 5.0, 60.0], 10_000_000_000),  # first receive: backoff[0] - backoff[0]
    (10, 2, [1.0, 5.0, 60.0], 6_000_000_000),  # 10 + 1 - 5
    (2, 3, [1.0, 5.0, 60.0], -57_000_000_000),  # 2 + 1 - 60: negative, which the server adds as it is
    (0.5, 2, [1.0, 3.0, 8.0], -1_500_000_000),  # 0.5 + 1 - 3
    (4, 2, [1.0, 5.0], -1),  # 4 + 1 - 5 = 0 would be no delay: one nanosecond less
])
def test_the_nak_sent(delay, receive_count, backoff, sent_ns):
    """Hand-computed: wanted + backoff[0] - backoff[min(receive_count - 1, last)], in nanoseconds."""
    payload = nak_payload(delay, receive_count, backoff)
    if sent_ns is None:
        assert payload == b"-NAK"
    else:
        assert payload.startswith(b"-NAK ") and json.loads(payload[5:]) == {"delay": sent_ns}
