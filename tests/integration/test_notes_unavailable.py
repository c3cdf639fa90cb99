"""Error notes are what an app says about a failure, kept beside the message: when they cannot be
written or read (their stream gone here; one app flooding it stalled it for a minute for every
queue), a nack still hands the message back, a receive still delivers, and a dead letter still
moves, without its last error."""

from enclave_queue.client import connect
from enclave_queue.names import ERRORS_STREAM
from tests.helpers import runtime_queue


async def test_nacks_receives_and_moves_go_on_without_the_notes(runtime):
    await runtime_queue(runtime, "notes-dlq")
    creds = await runtime_queue(runtime, "notes-src", max_receives=2, dead_letter_queue="notes-dlq",
                                visibility_timeout_seconds=30)
    await runtime.conn.js.delete_stream(ERRORS_STREAM)
    async with connect(creds) as queue:
        await queue.put({"n": 1})
        first = await queue.get(timeout_s=5)
        await first.nack(error="the first try failed")  # the note is not stored: handed back all the same
        second = await queue.get(timeout_s=5)  # a retried message: its last error cannot be read
        assert (second.id, second.attempts, second.last_error) == (first.id, 2, None)
        await second.nack(error="the last try failed")
    dlq = await runtime.service.credentials("default", "notes-dlq")
    async with connect(dlq) as letters:
        letter = await letters.get(timeout_s=15)
        assert letter is not None and letter.body == {"n": 1}
        await letter.ack()
