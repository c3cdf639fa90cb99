"""The delay a nack sends the broker when the queue has a retry schedule (a consumer backoff).

nats-server 2.15 redelivers a ``-NAK {"delay": d}`` after d - backoff[0] + backoff[n] (n: the
message's redeliveries so far, the last entry repeating), which tests/integration/test_nak_backoff.py
measures on the real broker. The values here are worked out by hand from that rule, not by a
second copy of it."""

import json

import pytest

from enclave_queue.envelope import nak_delay, nak_payload
from enclave_queue.spec import scheduled_delay

SCHEDULE = [1.0, 5.0, 60.0]


@pytest.mark.parametrize(("wanted", "receive_count", "sent"), [
    (0.5, 1, 0.5), (2, 1, 2), (30, 1, 30),  # the first receive: backoff[0] - backoff[0], as asked
    (0.5, 2, -3.5), (2, 2, -2), (30, 2, 26),  # the server adds 5 - 1: send 4 s less
    (0.5, 3, -58.5), (2, 3, -57), (30, 3, -29),  # it adds 60 - 1: send 59 s less, below zero
    (0.5, 7, -58.5), (2, 7, -57), (30, 7, -29),  # past the schedule's end its last entry repeats
])
def test_the_sent_delay_takes_off_what_the_server_will_add(wanted, receive_count, sent):
    assert nak_delay(wanted, receive_count, SCHEDULE) == pytest.approx(sent)


def test_without_a_backoff_the_delay_is_sent_as_it_is():
    assert nak_delay(7, 3, []) == 7
    assert scheduled_delay(3, []) == 0


def test_the_schedule_repeats_its_last_entry():
    assert [scheduled_delay(n, [1.0, 2.0]) for n in (1, 2, 3)] == [1.0, 2.0, 2.0]


@pytest.mark.parametrize(("delay", "receive_count", "backoff", "sent_ns"), [
    (0, 1, [1.0, 5.0], None),  # at once: a plain -NAK
    (0, 3, [], None),
    (10, 1, [], 10_000_000_000),  # no schedule: as asked
    (10, 1, [1.0, 5.0, 60.0], 10_000_000_000),  # first receive: backoff[0] - backoff[0]
    (10, 2, [1.0, 5.0, 60.0], 6_000_000_000),  # 10 + 1 - 5
    (2, 3, [1.0, 5.0, 60.0], -57_000_000_000),  # 2 + 1 - 60: negative, which the server adds as it is
    (0.5, 2, [1.0, 3.0, 8.0], -1_500_000_000),  # 0.5 + 1 - 3
    (4, 2, [1.0, 5.0], 0),  # 4 + 1 - 5: a zero delay, which the server also adds (not a plain nak)
    (0.001, 9, [2.0, 3.0], -999_000_000),  # 0.001 + 2 - 3, the last entry again
])
def test_the_nak_sent(delay, receive_count, backoff, sent_ns):
    """Hand-computed: wanted + backoff[0] - backoff[min(receive_count - 1, last)], in nanoseconds."""
    payload = nak_payload(delay, receive_count, backoff)
    if sent_ns is None:
        assert payload == b"-NAK"
    else:
        assert payload.startswith(b"-NAK ") and json.loads(payload[5:]) == {"delay": sent_ns}
