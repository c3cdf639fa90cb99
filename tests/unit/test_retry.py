"""Which broker answers ``retry_unavailable`` waits out, and which it hands straight back."""

import nats.errors
import nats.js.errors
import pytest

from enclave_queue.retry import NO_PEERS, retry_unavailable


def failing(first: Exception, times: int):
    """A call that raises ``first`` for its first ``times`` calls, then answers "ok"; it counts its calls."""
    calls = []

    async def call():
        calls.append(1)
        if len(calls) <= times:
            raise first
        return "ok"
    return call, calls


@pytest.mark.parametrize("exc", [
    nats.errors.NoRespondersError(),
    nats.js.errors.ServiceUnavailableError(code=503, err_code=10023),
    nats.js.errors.BadRequestError(code=400, err_code=NO_PEERS, description="no suitable peers for placement"),
])
async def test_a_broker_not_ready_yet_is_waited_out(exc):
    call, calls = failing(exc, 3)
    assert await retry_unavailable(call, window=5) == "ok"
    assert len(calls) == 4


@pytest.mark.parametrize("exc", [
    nats.js.errors.BadRequestError(code=400, err_code=10058, description="stream name already in use"),
    nats.js.errors.KeyWrongLastSequenceError(description="wrong last sequence: 7"),  # sets no err_code
    nats.js.errors.NotFoundError(code=404, err_code=10059),
])
async def test_a_refusal_is_raised_at_once_as_it_came(exc):
    call, calls = failing(exc, 1)
    with pytest.raises(type(exc)) as raised:
        await retry_unavailable(call, window=5)
    assert raised.value is exc
    assert len(calls) == 1


async def test_no_responders_past_the_window_is_raised():
    call, calls = failing(nats.errors.NoRespondersError(), 10_000)
    with pytest.raises(nats.errors.NoRespondersError):
        await retry_unavailable(call, window=0.05)
    assert 1 < len(calls) < 10_000
