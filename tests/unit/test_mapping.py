"""Spec -> JetStream mapping, table-tested, and the drift check."""

import dataclasses

import pytest
from nats.js import api

from enclave_queue.controller import mapping
from enclave_queue.spec import HEADER_ROOM, QueueSpec


@pytest.mark.parametrize(
    ("spec", "max_age", "max_msg_size"),
    [
        (QueueSpec(name="emails"), 96 * 3600, 262144),
        (QueueSpec(name="emails", retention_hours=1, max_message_bytes=1024), 3600, 1024),
        (QueueSpec(name="emails", retention_hours=336, max_message_bytes=1048576), 336 * 3600, 1048576),
    ],
)
def test_stream_config(spec, max_age, max_msg_size):
    config = mapping.stream_config("qabc", spec)
    assert config.name == "QABC"
    # the queue, and its delayed messages' schedules (stored, but outside the consumer's filter)
    assert config.subjects == ["queue.default.emails", "queue.default.emails.delay.*"]
    assert config.retention == api.RetentionPolicy.WORK_QUEUE
    assert config.storage == api.StorageType.FILE
    assert config.allow_direct is True
    assert config.allow_atomic is True  # put_many's all-or-none batches
    # no max_messages: discard old, which delayed messages (put(delay_s=)) as schedules need; the
    # schedules themselves come with the first delayed message (queues/schedules.py)
    assert (config.allow_msg_schedules, config.discard) == (False, api.DiscardPolicy.OLD)
    assert mapping.stream_config("qabc", spec, schedules=True).allow_msg_schedules is True
    assert config.max_age == max_age
    assert config.max_msg_size == max_msg_size + HEADER_ROOM  # the body's limit, plus room for headers


@pytest.mark.parametrize(
    ("spec", "max_msgs", "duplicate_window"),
    [
        (QueueSpec(name="emails"), -1, 3600),
        (QueueSpec(name="emails", max_messages=1, dedupe_window_seconds=1), 1, 1),
        (QueueSpec(name="emails", max_messages=10_000_000, dedupe_window_seconds=86400), 10_000_000, 86400),
    ],
)
def test_stream_capacity_and_dedupe_window(spec, max_msgs, duplicate_window):
    config = mapping.stream_config("qabc", spec)
    assert config.max_msgs == max_msgs  # 0 = no limit is the broker's -1
    assert config.duplicate_window == duplicate_window
    if spec.max_messages:  # a full queue refuses the new message, keeps the old ones; no schedules then
        assert (config.discard, config.allow_msg_schedules) == (api.DiscardPolicy.NEW, False)
        assert mapping.stream_config("qabc", spec, schedules=True).allow_msg_schedules is False


@pytest.mark.parametrize(
    ("spec", "ack_wait", "max_deliver"),
    [
        (QueueSpec(name="emails"), 30, -1),
        (QueueSpec(name="emails", visibility_timeout_seconds=1, max_receives=1), 1, 1),
        (QueueSpec(name="emails", visibility_timeout_seconds=43200, max_receives=1000), 43200, 1000),
    ],
)
def test_consumer_config(spec, ack_wait, max_deliver):
    config = mapping.consumer_config("qabc", spec)
    assert config.durable_name == "worker"
    assert config.ack_policy == api.AckPolicy.EXPLICIT
    assert config.ack_wait == ack_wait
    assert config.max_deliver == max_deliver
    assert config.max_ack_pending > 1000
    assert config.filter_subject == "queue.default.emails"


def test_drift_names_the_fields_that_differ():
    want = mapping.stream_config("qabc", QueueSpec(name="emails"))
    same = mapping.stream_config("qabc", QueueSpec(name="emails"))
    assert mapping.drift(same, want, mapping.STREAM_FIELDS) == []
    changed = mapping.stream_config("qabc", QueueSpec(name="emails", retention_hours=2, max_message_bytes=2048))
    assert mapping.drift(changed, want, mapping.STREAM_FIELDS) == ["max_age", "max_msg_size"]
    resized = mapping.stream_config("qabc", QueueSpec(name="emails", max_messages=5, dedupe_window_seconds=60))
    assert mapping.drift(resized, want, mapping.STREAM_FIELDS) == ["discard", "max_msgs", "duplicate_window"]
    scheduled = mapping.stream_config("qabc", QueueSpec(name="emails"), schedules=True)
    # nats-server turns roll-ups on with schedules: desired with them
    assert mapping.drift(scheduled, want, mapping.STREAM_FIELDS) == ["allow_msg_schedules", "allow_rollup_hdrs"]
    older = mapping.stream_config("qabc", QueueSpec(name="emails"))
    older.allow_atomic = None  # a stream made before put_many: the broker leaves the field out
    assert mapping.drift(older, want, mapping.STREAM_FIELDS) == ["allow_atomic"]
    changed.retention = api.RetentionPolicy.LIMITS
    assert "retention" in mapping.drift(changed, want, mapping.STREAM_FIELDS)


def test_a_flag_the_server_leaves_out_is_no_drift():
    """A capped queue's stream has allow_msg_schedules false, which the server's answer leaves
    out: that must not read as drift (it made the reconciler update such streams for ever)."""
    want = mapping.stream_config("qabc", QueueSpec(name="emails", max_messages=5))
    assert want.allow_msg_schedules is False
    reported = dataclasses.replace(want, allow_msg_schedules=None)
    assert mapping.drift(reported, want, mapping.STREAM_FIELDS) == []
