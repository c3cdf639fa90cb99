"""The pure parts of a get's path: a pull request's body and a delivery's reply subject."""

import json

import pytest

from enclave_queue import envelope
from enclave_queue.client import acks, pulls

#: the same delivery in the reply subject's two forms (v2: a domain and an account hash after ACK)
REPLIES = ["$JS.ACK.QSTREAM.worker.3.12345.777.1733464000000000000.0",
           "$JS.ACK.hub.ACCHASH.QSTREAM.worker.3.12345.777.1733464000000000000.0.r4nd0m"]


@pytest.mark.parametrize("reply", REPLIES)
def test_counts_reads_what_delivery_reads(reply):
    delivered = acks.delivery(reply)
    assert (delivered.stream, delivered.consumer, delivered.sent_ns) == ("QSTREAM", "worker", 1733464000000000000)
    assert envelope.delivery_counts(reply) == (delivered.receive_count, delivered.sequence) == (3, 12345)


@pytest.mark.parametrize(("batch", "expires", "body"), [
    (1, 4.99, {"batch": 1, "expires": 4_990_000_000}),
    (1000, 0.0, {"batch": 1000, "no_wait": True}),
    (7, 0.5, {"batch": 7, "expires": 500_000_000}),
])
def test_a_pull_request_body_is_the_json_jetstream_reads(batch, expires, body):
    assert json.loads(pulls._request(batch, expires)) == body
