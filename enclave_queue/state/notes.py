"""Error notes, one a message: why an app said it failed, kept in the control account's
``ENCLAVE_ERRORS`` stream as ``errors.<queue id>.<message id>`` (controller/errornotes.py creates
the stream and bounds each queue's notes). Read, written and dropped here by the dead-letter mover,
the desk and the expiry of start deadlines alike.

Notes are kept by message id (envelope.message_id), so a copy made by ``release`` keeps its
original's note.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext

from ..envelope import one_line
from ..names import ERRORS_STREAM, errors_subject
from ..retry import retry_unavailable


async def last_error(js: JetStreamContext, queue_id: str, message_id: int) -> Optional[str]:
    """The last error an app reported for message ``message_id`` of the queue, if any."""
    try:
        note = await retry_unavailable(lambda: js.get_msg(
            ERRORS_STREAM, subject=errors_subject(queue_id, message_id), direct=True))
    except nats.js.errors.NotFoundError:
        return None
    return one_line((note.data or b"").decode(errors="replace")) or None


async def write_note(js: JetStreamContext, queue_id: str, message_id: int, error: str) -> None:
    """Store ``error`` as the note of message ``message_id`` (as an app does), replacing any."""
    await retry_unavailable(lambda: js.publish(errors_subject(queue_id, message_id), one_line(error).encode()))


async def drop_note(js: JetStreamContext, queue_id: str, message_id: int | str = "*") -> None:
    """Remove the note of one message (it has served, or the message is gone), or with ``*`` every
    note of the queue; nothing if there is none, or the broker does not answer."""
    with contextlib.suppress(nats.errors.Error):
        await js.purge_stream(ERRORS_STREAM, subject=errors_subject(queue_id, message_id))
