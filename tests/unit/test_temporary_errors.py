"""Which reconcile failures are retried quietly (Reconciling) and which show as Errored at once."""

import nats.errors
import nats.js.errors
import pytest

from enclave_queue.controller.reconciler import is_temporary
from enclave_queue.errors import BrokerUnavailable, SpecError


@pytest.mark.parametrize(("exc", "temporary"), [
    (nats.errors.NoRespondersError(), True),  # a configuration reload
    (nats.errors.TimeoutError(), True),
    (BrokerUnavailable("down"), True),
    (nats.js.errors.ServerError(code=500, err_code=10049, description="error creating store for stream"), True),
    (nats.js.errors.ServiceUnavailableError(code=503, err_code=10023), True),
    (nats.js.errors.BadRequestError(code=400, err_code=10058, description="stream name already in use"), False),
    # a replicated queue made while a node of the cluster is away: placed once it is back
    (nats.js.errors.BadRequestError(code=400, err_code=10005,
                                    description="no suitable peers for placement, peer offline"), True),
    (nats.js.errors.NotFoundError(code=404, err_code=10059), False),
    (nats.js.errors.KeyWrongLastSequenceError(description="wrong last sequence: 7"), False),  # sets no code
    (SpecError("bad setting"), False),
    (RuntimeError("a bug"), False),
])
def test_server_side_and_reload_failures_are_temporary(exc, temporary):
    assert is_temporary(exc) is temporary
