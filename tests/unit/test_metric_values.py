"""Pure parts of the metrics and the sampler: counters kept monotonic per queue, and samples
turned into the points the depth route returns."""

from datetime import UTC, datetime

from enclave_queue.broker.depth import Depth
from enclave_queue.broker.depth import decode_sample as point
from enclave_queue.broker.depth import encode_sample as encode
from enclave_queue.metrics.collector import Totals as _Totals
from enclave_queue.state.records import QueueCounters


def depth(sent, received, removed):
    return Depth(waiting=0, in_flight=0, delayed=0, dead=None, oldest_age_seconds=None, sent=sent,
                 received=received, removed=removed)


def test_deleted_is_removed_less_dead_lettered_and_discarded():
    totals = _Totals()
    counts = QueueCounters(dead_lettered=2, discarded=1, nacked=4)
    assert totals.update(depth(10, 12, 7), counts, unsaved_naks=3) == {
        "sent": 10, "received": 12, "deleted": 4, "nacked": 7, "dead_lettered": 2, "discarded": 1, "expired": 0}


def test_deleted_leaves_out_what_the_control_plane_removed_and_schedules_that_fired():
    totals = _Totals()
    # 20 removed: 2 dead-lettered, 1 discarded, 3 expired, 4 cleared, 1 released original, and of
    # 5 schedules stored, 2 still wait (delayed) so 3 fired: 20 - 14 = 6 acked
    counts = QueueCounters(dead_lettered=2, discarded=1, expired=3, cleared=4, released=1, scheduled=5)
    state = depth(30, 25, 20)
    state = Depth(**{**state.view(), "delayed": 2})
    assert totals.update(state, counts, unsaved_naks=0)["deleted"] == 6


def test_a_dead_letter_move_between_its_delete_and_its_count_does_not_dip_deleted():
    totals = _Totals()
    assert totals.update(depth(5, 5, 3), QueueCounters(), 0)["deleted"] == 3
    # the mover deleted message 4 from the source and has not counted it yet: 4 removed, 0 counted
    assert totals.update(depth(5, 5, 4), QueueCounters(), 0)["deleted"] == 4
    # counted now: removed 4 = 3 deleted + 1 dead-lettered; deleted stays at what was shown
    assert totals.update(depth(5, 5, 4), QueueCounters(dead_lettered=1), 0)["deleted"] == 4
    assert totals.update(depth(6, 6, 6), QueueCounters(dead_lettered=1), 0)["deleted"] == 5


def test_a_recreated_stream_adds_its_new_sequences_on_top():
    totals = _Totals()
    totals.update(depth(100, 120, 90), QueueCounters(), 0)
    after = totals.update(depth(3, 2, 1), QueueCounters(), 0)  # deleted behind the controller's back
    assert (after["sent"], after["received"], after["deleted"]) == (103, 122, 91)


def test_a_recreated_stream_restarts_its_consumer_count_too_even_when_it_ran_ahead():
    totals = _Totals()
    totals.update(depth(10, 4, 8), QueueCounters(), 0)
    after = totals.update(depth(2, 9, 1), QueueCounters(), 0)  # the new consumer delivered 9 already
    assert (after["sent"], after["received"], after["deleted"]) == (12, 13, 9)


def test_a_recreated_consumer_alone_restarts_only_the_received_count():
    totals = _Totals()
    totals.update(depth(10, 12, 8), QueueCounters(), 0)
    after = totals.update(depth(11, 1, 8), QueueCounters(), 0)
    assert (after["sent"], after["received"], after["deleted"]) == (11, 13, 8)


def test_a_sample_is_seven_numbers_and_its_point_has_the_broker_time():
    data = encode(Depth(waiting=3, in_flight=1, delayed=0, dead=None, oldest_age_seconds=2.0, sent=9,
                        received=9, removed=5))
    assert data == b"[3,1,0,null,9,9,5]"
    found = point(data, "2026-03-01T12:00:05.123456789Z")
    assert found == {"t": "2026-03-01T12:00:05.123+00:00", "waiting": 3, "in_flight": 1, "delayed": 0, "dead": None,
                     "sent": 9, "received": 9, "removed": 5}
    older = point(b"[3,1,0,null]", "2026-03-01T12:00:05Z")  # stored before the totals were added
    assert (older["waiting"], older["sent"], older["received"], older["removed"]) == (3, None, None, None)
    assert datetime.fromisoformat(point(data, "2026-03-01T12:00:05Z")["t"]) == datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
