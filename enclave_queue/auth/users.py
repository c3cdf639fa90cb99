"""Broker names and permissions for a queue's account and its app user (pure functions).

Each queue is its own NATS account, named by the queue's id, so nothing one queue's user does
can reach another queue (inside one account, a reply subject on an allowed request would let the
server write into any stream of that account; across accounts there is nothing to reach).
The user's permissions are allow-only: publish into the queue, pull from and acknowledge on its
consumers (one, or one a priority level), read its own stream; subscribe only under its own inbox prefix.
"""

from __future__ import annotations

#: the durable pull consumer every queue's workers share (priority 0: the queue's own subject)
CONSUMER = "worker"
#: the priority levels above 0 a queue with ``priorities`` has a consumer (a lane) of its own for
LANES = tuple(range(1, 10))


def lane_consumer(priority: int) -> str:
    """The consumer of one priority level: ``worker`` for 0, ``worker-p<N>`` above."""
    return CONSUMER if priority == 0 else f"{CONSUMER}-p{priority}"


def lane_of(consumer: str) -> int:
    """The priority level a consumer serves (the inverse of ``lane_consumer``)."""
    return int(consumer.rsplit("-p", 1)[1]) if consumer.startswith(f"{CONSUMER}-p") else 0
#: every queue subject lives under this token inside its own account
SUBJECT_ROOT = "queue"
#: an app records why a message failed here (``.<stream seq>``); the broker stores it for the
#: control plane, which puts it on the dead letter
ERRORS_SUBJECT = "enclave.errors"
#: an app asks the control plane to dead-letter a message now (``reject``)
REJECT_SUBJECT = "enclave.reject"
#: an app's requests to the control plane about its own queue (``.<verb>``: release, clear,
#: export, metrics, …; controller/desk.py)
DESK_SUBJECT = "enclave.desk"
#: an app tells the control plane about a put it must act on later (a start deadline); stored
#: durably, so it lands even while the control process is down
NOTES_SUBJECT = "enclave.notes"


def stream_name(queue_id: str) -> str:
    return queue_id.upper()


def username(queue_id: str) -> str:
    return queue_id


def inbox_prefix(queue_id: str) -> str:
    """The only subjects the app user may subscribe to (apps pass it as ``inbox_prefix``)."""
    return f"_INBOX_{username(queue_id)}"


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
