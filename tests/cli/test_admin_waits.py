"""The admin client's waits (``--wait``, a delete's wait) against a server that is not Enclave's
API: they end with a clear error, however it answers."""

import http.server
import threading
from collections.abc import Iterator

import pytest

from enclave_queue.admin import AdminClient
from enclave_queue.errors import EnclaveError


@pytest.fixture(params=[b"null", b"[]", b'{"state": "Ready"}'], ids=["null", "list", "partial"])
def other_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A plain HTTP server that answers every GET with the same JSON."""
    answer = request.param

    class Answering(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's name for GET
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answering)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("wait", ["wait_ready", "wait_deleted"])
def test_a_status_that_is_not_a_queues_ends_the_wait(other_server, wait):
    """JSON ``null`` was taken for a moment of the broker's and asked again at once, for ever,
    past the wait's own timeout."""
    with AdminClient(other_server, "enq_token") as admin, \
            pytest.raises(EnclaveError, match=r"answered something that is not a queue's status; is ENCLAVE_URL"):
        getattr(admin, wait)("default", "emails", timeout=30)
