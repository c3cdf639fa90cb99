"""The permissions of a queue's app user (a pure function; the names it uses are in names.py).

Each queue is its own NATS account, named by the queue's id, so nothing one queue's user does
can reach another queue (inside one account, a reply subject on an allowed request would let the
server write into any stream of that account; across accounts there is nothing to reach).
The user's permissions are allow-only: publish into the queue, pull from and acknowledge on its
consumers (one, or one a priority level), read its own stream; subscribe only under its own inbox prefix.

Inside its own account a reply subject is still a way in (measured on nats-server 2.15.1,
tests/integration/test_reply_subjects.py). What the stream or a consumer itself sends to a
request's reply subject (a direct get's answer, a pull's status, an ack's confirmation) is
published inside the account, where the JetStream API takes it as a request of the account's.
A direct get's answer carries a stored message, whose body the app chose: any request at all
(``STREAM.UPDATE`` sealing the stream, say). So the user may not send direct gets; it reads a
message with ``STREAM.MSG.GET``, which the API itself answers, as a reply, not as a request. The
answers that stay are empty: as requests, they can purge or delete the queue's own stream or
consumer, what its app could do by taking and deleting every message; the reconciler makes
them again within a resync.
"""

from __future__ import annotations

from ..names import DESK_SUBJECT, ERRORS_SUBJECT, NOTES_SUBJECT, REJECT_SUBJECT, SUBJECT_ROOT, inbox_prefix, stream_name


def app_permissions(queue_id: str) -> dict[str, dict[str, list[str]]]:
    """The app user's allow-only permissions. They name no queue name or project, so an account
    can be made ready before the queue that will own it exists (the account pool)."""
    stream = stream_name(queue_id)
    return {
        "publish": {
            "allow": [
                f"{SUBJECT_ROOT}.>",
                f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*",  # the queue's consumer and its priority lanes
                f"$JS.ACK.{stream}.*.>",
                f"$JS.API.STREAM.INFO.{stream}",
                f"$JS.API.CONSUMER.INFO.{stream}.*",
                f"$JS.API.STREAM.MSG.GET.{stream}",  # not DIRECT.GET: see above
                f"{ERRORS_SUBJECT}.*",
                REJECT_SUBJECT,
                f"{DESK_SUBJECT}.*",
                NOTES_SUBJECT,
            ]
        },
        "subscribe": {"allow": [f"{inbox_prefix(queue_id)}.>"]},
    }
