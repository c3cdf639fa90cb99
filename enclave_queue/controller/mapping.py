"""Pure functions from a queue's spec to its JetStream stream and consumer, and the drift check.

The stream keeps messages until a worker deletes them (WorkQueue retention), on disk, refusing
new messages rather than dropping old ones when full (``max_messages``: the broker answers a
publish to a full stream with err_code 10077, "maximum messages exceeded"). The consumer is the
one durable pull consumer all workers share; ``ack_wait`` is the visibility timeout and
``max_deliver`` the number of receives allowed. ``allow_atomic`` lets ``put_many`` store a batch
all or none (``Nats-Batch-*`` headers; a stream without it answers err_code 10174).
``allow_msg_schedules`` stores delayed messages as schedules on ``<subject>.delay.<token>``, a
stream subject outside the consumer's filter (envelope.py). The server allows schedules only
with discard old and never turns them off, so a queue has either ``max_messages`` (discard new)
or delayed messages (spec.LIMIT_RULE). With ``priorities``, levels 1–9 each have a subject
(``<subject>.priority.<N>``) and a consumer (``worker-p<N>``) of their own: lanes.
"""

from __future__ import annotations

import dataclasses

from nats.js import api

from ..envelope import delay_subjects, lane_subject
from ..names import LANES, lane_consumer, stream_name
from ..spec import HEADER_ROOM, LIMITS, QueueSpec, subject_for

#: leased-but-not-deleted messages per queue (the server's default of 1000 is low for a queue)
MAX_ACK_PENDING = 20_000
#: the default of ``dedupe_window_seconds``: seconds a Nats-Msg-Id is remembered for
#: deduplication. A dead letter moved twice (the mover killed between copy and delete) or a
#: redrive run twice within the dead-letter queue's window stores one copy; no more than the
#: shortest retention (1 h), as JetStream requires (duplicate_window ≤ max_age)
DUPLICATE_WINDOW = float(LIMITS["dedupe_window_seconds"][1])

#: fields that cannot change on a live object; drift there cannot be repaired in place (a sealed
#: stream cannot be unsealed, nor deletes or purges allowed again once denied)
IMMUTABLE_STREAM = frozenset({"retention", "storage", "sealed", "deny_delete", "deny_purge", "mirror"})
IMMUTABLE_CONSUMER = frozenset({"ack_policy", "deliver_policy"})

#: every field of the stream's configuration nats-py reads, but its name, description and
#: metadata (the server writes its own there): a field Enclave does not set must stay at the
#: server's default, or someone else changed it (such as ``max_msgs_per_subject``, which would
#: keep one message of the queue's and drop the rest, every put acknowledged)
STREAM_FIELDS = ("subjects", "retention", "storage", "discard", "max_age", "max_msg_size", "allow_direct",
                 "max_msgs", "max_bytes", "duplicate_window", "allow_atomic", "allow_msg_schedules", "num_replicas",
                 "max_consumers", "discard_new_per_subject", "max_msgs_per_subject", "no_ack", "placement",
                 "mirror", "sources", "sealed", "deny_delete", "deny_purge", "allow_rollup_hdrs", "republish",
                 "subject_transform", "mirror_direct", "compression", "allow_msg_ttl", "allow_batched",
                 "allow_msg_counter", "persist_mode", "consumer_limits", "subject_delete_marker_ttl")
CONSUMER_FIELDS = ("ack_policy", "deliver_policy", "ack_wait", "max_deliver", "max_ack_pending", "filter_subject",
                   "backoff", "filter_subjects", "opt_start_seq", "opt_start_time", "replay_policy", "rate_limit_bps",
                   "sample_freq", "max_waiting", "flow_control", "idle_heartbeat", "headers_only", "deliver_subject",
                   "deliver_group", "inactive_threshold", "mem_storage", "pause_until")
#: what the server answers for a field nobody set: the same as unset
DEFAULTS = {"max_consumers": -1, "max_msgs_per_subject": -1, "compression": "none", "persist_mode": "default",
            "subject_delete_marker_ttl": 0, "replay_policy": "instant", "max_waiting": 512, "inactive_threshold": 0}


def stream_config(queue_id: str, spec: QueueSpec, *, schedules: bool = False) -> api.StreamConfig:
    """The queue's stream. ``schedules``: with ``allow_msg_schedules`` (delayed messages), which a
    stream gets the first time it needs it (queues/schedules.py) and then keeps."""
    subject = subject_for(spec.project, spec.name)
    lanes = [lane_subject(subject, level) for level in LANES] if spec.priorities else []
    return api.StreamConfig(
        name=stream_name(queue_id),
        subjects=[subject, delay_subjects(subject), *lanes],
        retention=api.RetentionPolicy.WORK_QUEUE,
        storage=api.StorageType.FILE,
        # a limit refuses new messages; without one, delayed messages (schedules, which the
        # server allows only with discard old: nothing is discarded without a limit)
        discard=api.DiscardPolicy.NEW if spec.max_messages else api.DiscardPolicy.OLD,
        max_age=float(spec.retention_hours * 3600),
        max_msg_size=spec.max_message_bytes + HEADER_ROOM,
        max_msgs=spec.max_messages or -1,  # with discard new: a full queue refuses (err_code 10077)
        max_bytes=-1,
        allow_direct=True,
        allow_atomic=True,  # put_many: atomic batch publish (nats-server 2.12+); an older stream gets it as drift
        allow_msg_schedules=schedules and not spec.max_messages,  # put(delay_s=): one-shot schedules (2.12+)
        # nats-server turns roll-ups on with schedules (and refuses to turn them off): desired so,
        # not drift (a resync "repaired" it every time, and the broker put it back)
        allow_rollup_hdrs=schedules and not spec.max_messages,
        duplicate_window=float(spec.dedupe_window_seconds),
        num_replicas=spec.replicas,  # its consumers follow it
    )


def consumer_configs(queue_id: str, spec: QueueSpec) -> list[api.ConsumerConfig]:
    """The queue's consumer, and with ``priorities`` one a priority level (1–9), all alike but
    for the subject each delivers."""
    return [consumer_config(queue_id, spec, level) for level in (0, *(LANES if spec.priorities else ()))]


def consumer_config(queue_id: str, spec: QueueSpec, priority: int = 0) -> api.ConsumerConfig:
    """With ``retry_backoff_seconds``, the broker leases the nth receive for the nth entry (the last
    repeats) instead of the visibility timeout, and sets ``ack_wait`` to the first entry."""
    backoff = [float(step) for step in spec.retry_backoff_seconds] if spec.retry_backoff_seconds else None
    return api.ConsumerConfig(
        durable_name=lane_consumer(priority),
        ack_policy=api.AckPolicy.EXPLICIT,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_wait=backoff[0] if backoff else float(spec.visibility_timeout_seconds),
        max_deliver=spec.max_receives or -1,
        max_ack_pending=MAX_ACK_PENDING,
        filter_subject=lane_subject(subject_for(spec.project, spec.name), priority),
        backoff=backoff,
    )


def _norm(value: object) -> object:
    if value is False:
        return None  # the server leaves a false flag out (allow_msg_schedules on a capped queue)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value] or None
    if hasattr(value, "value"):  # enums
        return value.value  # type: ignore[attr-defined]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # placement, consumer_limits, …
        fields = {f.name: _norm(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {k: v for k, v in fields.items() if v is not None} or None
    return value


def _field(value: object, name: str) -> object:
    value = _norm(value)
    return None if value == DEFAULTS.get(name) else value


def drift(actual: object, desired: object, fields: tuple[str, ...]) -> list[str]:
    """The fields of ``fields`` whose actual value differs from the desired one."""
    return [f for f in fields if _field(getattr(actual, f, None), f) != _field(getattr(desired, f, None), f)]
