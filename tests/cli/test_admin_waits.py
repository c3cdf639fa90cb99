"""The admin client's waits (``--wait``, a delete's wait) against a server that is not Enclave's
API: they end with a clear error, however it answers."""

import pytest

from enclave_queue.admin import AdminClient
from enclave_queue.errors import EnclaveError
from tests.cli.test_cli_bad_input import FakeServer, fake_server


@pytest.mark.parametrize("answer", [b"null", b"[]", b'{"state": "Ready"}'], ids=["null", "list", "partial"])
@pytest.mark.parametrize("wait", ["wait_ready", "wait_deleted"])
def test_a_status_that_is_not_a_queues_ends_the_wait(monkeypatch, answer, wait):
    """JSON ``null`` was taken for a moment of the broker's and asked again at once, for ever,
    past the wait's own timeout."""
    monkeypatch.setattr(FakeServer, "answer", (200, "application/json", answer))
    with fake_server() as url, AdminClient(url, "enq_token") as admin, \
            pytest.raises(EnclaveError, match=r"answered something that is not a queue's status; is ENCLAVE_URL"):
        getattr(admin, wait)("default", "emails", timeout=30)
