"""Error notes, one a message: why an app said it failed, kept in the control account's
``ENCLAVE_ERRORS`` stream as ``errors.<queue id>.<message id>`` (controller/errornotes.py creates
the stream and bounds each queue's notes). Written, dropped and parsed here for the dead-letter
mover, the desk, exports and the expiry of start deadlines alike (read in batches by direct gets:
errornotes.last_errors, queues/contents.py).

Notes are kept by message id (envelope.message_id), so a copy made by ``release`` keeps its
original's note.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Optional

import nats.errors
from nats.js.client import JetStreamContext

from ..envelope import one_line
from ..names import ERRORS_STREAM, errors_subject
from ..retry import retry_unavailable


def read_note(headers: Mapping[str, str], data: bytes) -> Optional[tuple[int, str]]:
    """A note as a direct get returns it: the id of its message (the last token of its subject,
    ``Nats-Subject``) and its text; None for one whose subject names no message."""
    message_id = headers.get("Nats-Subject", "").rsplit(".", 1)[-1]
    if not message_id.isdigit():
        return None
    return int(message_id), one_line(data.decode(errors="replace"))


async def write_note(js: JetStreamContext, queue_id: str, message_id: int, error: str) -> None:
    """Store ``error`` as the note of message ``message_id`` (as an app does), replacing any."""
    await retry_unavailable(lambda: js.publish(errors_subject(queue_id, message_id), one_line(error).encode()))


async def drop_note(js: JetStreamContext, queue_id: str, message_id: int | str = "*") -> None:
    """Remove the note of one message (it has served, or the message is gone), or with ``*`` every
    note of the queue; nothing if there is none, or the broker does not answer."""
    with contextlib.suppress(nats.errors.Error):
        await js.purge_stream(ERRORS_STREAM, subject=errors_subject(queue_id, message_id))
