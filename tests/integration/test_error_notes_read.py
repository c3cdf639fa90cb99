"""Reading error notes (controller/errornotes.py): in one batched direct get, and on a cluster,
what that did not find asked again of the errors stream's leader, whose copy has every note
acknowledged (a replica answering a direct get may not yet)."""

from enclave_queue.broker.config import CONTROL_STREAM_BYTES
from enclave_queue.controller.errornotes import _from_leader, last_errors
from enclave_queue.state.notes import write_note


async def test_notes_are_read_in_one_batch_and_from_the_leader(runtime, monkeypatch):
    nc = runtime.conn.control
    await write_note(runtime.conn.js, "qnotes", 3, "boom\\nline two")
    await write_note(runtime.conn.js, "qnotes", 7, "second")
    assert await last_errors(nc, "qnotes", [3, 5, 7]) == {3: "boom\\nline two", 7: "second"}
    assert await _from_leader(nc, "qnotes", [3, 5, 7]) == {3: "boom\\nline two", 7: "second"}
    monkeypatch.setattr(CONTROL_STREAM_BYTES, "replicas", 3)  # as on a cluster: the leader asked too
    assert await last_errors(nc, "qnotes", [3, 5, 7]) == {3: "boom\\nline two", 7: "second"}
