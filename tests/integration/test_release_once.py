"""Two releases of one stored message (a cancelled receive's hand-back, and another worker's after
the first lease ran out, each with its own receive count) make one copy, in-process against the
real broker: the second copy had been stored as a message of its own."""

import asyncio

from enclave_queue.names import stream_name
from enclave_queue.spec import subject_for
from tests.helpers import runtime_queue


async def test_two_releases_of_one_message_store_one_copy(runtime):
    await runtime_queue(runtime, "released")
    record = await runtime.service.lookup.live("default", "released")
    js = runtime.conn.queue_js(record.id)
    seq = (await js.publish(subject_for("default", "released"), b"once")).seq
    first, second = await asyncio.gather(runtime.desk._release(record, seq, 1, 0.0),
                                         runtime.desk._release(record, seq, 2, 0.0), return_exceptions=True)
    copies = [answer for answer in (first, second) if isinstance(answer, dict)]
    assert copies and all(c == copies[0] for c in copies)  # each answered with the one copy
    state = (await js.stream_info(stream_name(record.id))).state
    assert state.messages == 1  # the copy; the original is gone
    copy = await js.get_msg(stream_name(record.id), seq=copies[0]["sequence"])
    assert copy.data == b"once"
