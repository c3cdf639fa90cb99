"""Every broker name in one place: accounts, streams, consumers and their lanes, the subjects
a queue's apps and the control plane use, and the control account's own streams and KV buckets
(pure functions and constants).

Each queue is its own NATS account, named by the queue's id. Inside it, the queue's stream is the
id in capitals and its consumers are ``worker`` and ``worker-p<N>``; the control account reaches
each queue account's subjects under names that start with the queue's id (``jsapi.<id>``,
``send.<id>.…``, ``desk.<id>.<verb>``, …). The control account keeps its state in KV buckets
(state/kv.py) and four streams of its own: advisories (the dead-letter mover's), error notes,
put notes (start deadlines) and depth samples.
"""

from __future__ import annotations

SYSTEM_ACCOUNT = "SYS"
CONTROL_ACCOUNT = "CONTROL"
#: accounts that are not queues
PLATFORM_ACCOUNTS = frozenset({SYSTEM_ACCOUNT, CONTROL_ACCOUNT})

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
#: export, metrics, …; desk/endpoint.py)
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


#: the subjects a frozen queue account's puts are mapped to (``queue_account``)
REFUSED_ROOT = "refused"


def advisory_subject(queue_id: str, kind: str) -> str:
    """Where a queue's consumer advisories of ``kind`` (``MAX_DELIVERIES``, ``MSG_NAKED``, or ``*``)
    land in the control account: the queue account maps ``$JS.EVENT.ADVISORY.CONSUMER.>`` onto
    ``adv.<id>.>`` (broker/claims.py), so they arrive as ``adv.<id>.<KIND>.<stream>.<consumer>``.
    The broker only emits an advisory that someone listens to, so unheard kinds cost nothing."""
    return f"adv.{queue_id}.{kind}.*.*"


def errors_subject(queue_id: str, sequence: int | str = "*") -> str:
    """Where a queue's apps' error notes land in the control account (one subject a message)."""
    return f"errors.{queue_id}.{sequence}"


def reject_subject(queue_id: str) -> str:
    """Where a queue's apps' reject requests reach the control plane."""
    return f"deadletter.{queue_id}"


def desk_subject(queue_id: str, verb: str = "*") -> str:
    """Where a queue's apps' requests about their queue reach the control plane (desk/endpoint.py)."""
    return f"desk.{queue_id}.{verb}"


def notes_subject(queue_id: str) -> str:
    """Where a queue's apps' put notes (start deadlines) land in the control account's notes stream."""
    return f"notes.{queue_id}"


def refused_subject(queue_id: str) -> str:
    """Where a frozen queue account's puts reach the control plane (``refused.<id>.<queue subject
    without its root>``), to be answered with a refusal (broker/storage.py)."""
    return f"{REFUSED_ROOT}.{queue_id}.>"


# -- the control account's own streams, consumers and buckets ---------------------------------

#: MAX_DELIVERIES advisories of every queue, kept for the dead-letter mover (controller/mover.py)
ADVISORY_STREAM = "ENCLAVE_ADVISORIES"
#: the mover's durable consumer of ADVISORY_STREAM
MOVER = "mover"
#: the error notes apps leave for their messages, one a message (controller/errornotes.py)
ERRORS_STREAM = "ENCLAVE_ERRORS"
#: the put notes apps leave for start deadlines and delayed puts (desk/deadlines.py)
NOTES_STREAM = "ENCLAVE_NOTES"
#: every queue's depth samples (controller/sampler.py)
SAMPLES_STREAM = "ENCLAVE_SAMPLES"


def samples_subject(queue_id: str) -> str:
    """Where a queue's depth samples are stored in SAMPLES_STREAM (``*``: every queue's)."""
    return f"samples.{queue_id}"


#: the state store's KV buckets (state/kv.py)
QUEUES_BUCKET = "enclave-queues"
STATUS_BUCKET = "enclave-status"
ACCOUNTS_BUCKET = "enclave-accounts"
TOKENS_BUCKET = "enclave-tokens"
COUNTERS_BUCKET = "enclave-counters"
#: the control-plane lease of a cluster (controller/lease.py)
LEASE_BUCKET = "enclave-lease"
