"""An ack after a message's lease ran out says the lease expired, whichever way it ran out: the
queue's visibility timeout, or a lease of its own (``lease_s``) that the SDK ended by handing the
message back. Only a message a verb settled says it was settled already."""

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import Conflict
from tests.helpers import make_queue

EXPIRED = r"^The lease on message {} expired \d+\.\d s ago \(it ran out before the message was acked\)"


async def test_an_ack_after_its_own_lease_ran_out_says_the_lease_expired(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=30)
    async with connect(creds) as queue:
        await queue.put("slow job")
        message = await queue.get(timeout_s=2, lease_s=1)  # shorter than the queue's: handed back at its end
        assert message is not None
        again = await queue.get(timeout_s=5)  # handed back: another worker has it now
        assert again is not None and again.id == message.id and again.attempts == 2
        with pytest.raises(Conflict, match=EXPIRED.format(message.id)):
            await message.ack()
        with pytest.raises(Conflict, match=r"expired .* so it was not nacked"):
            await message.nack()
        await again.ack()
        with pytest.raises(Conflict, match=rf"^Message {again.id} was already acked, nacked or released"):
            await again.ack()  # settled by a verb: that is what it says
        assert await queue.len() == 0
