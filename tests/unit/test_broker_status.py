"""envelope.broker_status: a broker's status reply told from a message whose sender wrote a
``Status`` header of its own (nats-py reads both into the same header)."""

from types import SimpleNamespace

import pytest

from enclave_queue.envelope import broker_status


@pytest.mark.parametrize(("headers", "reply", "status"), [
    ({"Status": "404", "Description": "No Messages"}, "", "404"),  # a pull's end
    ({"Status": "408", "Description": "Request Timeout"}, None, "408"),
    ({"Status": "204", "Nats-Num-Pending": "3", "Nats-Last-Sequence": "9"}, "", "204"),  # a direct get's end
    ({"Status": "503"}, "", "503"),  # no responders
    ({"Status": "404"}, "$JS.ACK.S.C.1.5.5.1700000000.0", None),  # a delivery whose sender wrote Status
    ({"Status": "204", "Nats-Sequence": "5", "Nats-Stream": "S"}, "", None),  # a stored message a direct get read
    ({"Content-Type": "text/plain"}, "$JS.ACK.S.C.1.5.5.1700000000.0", None),
    (None, "", None),
])
def test_a_status_is_the_broker_s_only_without_a_message_s_marks(headers, reply, status):
    assert broker_status(SimpleNamespace(headers=headers, reply=reply)) == status
