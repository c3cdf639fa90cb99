"""The permissions of a queue's app user (a pure function; the names it uses are in names.py).

Each queue is its own NATS account, named by the queue's id, so nothing one queue's user does
can reach another queue (inside one account, a reply subject on an allowed request would let the
server write into any stream of that account; across accounts there is nothing to reach).
The user's permissions are allow-only: publish into the queue, pull from and acknowledge on its
consumers (one, or one a priority level), read its own stream; subscribe only under its own inbox prefix.
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
                f"$JS.API.DIRECT.GET.{stream}",
                f"$JS.API.DIRECT.GET.{stream}.>",
                f"{ERRORS_SUBJECT}.*",
                REJECT_SUBJECT,
                f"{DESK_SUBJECT}.*",
                NOTES_SUBJECT,
            ]
        },
        "subscribe": {"allow": [f"{inbox_prefix(queue_id)}.>"]},
    }
