"""Status conditions: one true at a time, transition time moves only on a flip."""

from enclave_queue.state.records import QueueStatus


def test_initial_status_is_reconciling():
    status = QueueStatus.initial()
    assert status.state == "Reconciling"
    assert [c.type for c in status.conditions if c.status] == ["Reconciling"]


def test_transition_flips_conditions_and_keeps_times_of_unchanged_ones():
    start = QueueStatus.initial()
    ready = start.transition("Ready", "Queue is ready.", "Reconciled", 1)
    assert ready.state == "Ready" and ready.observed_generation == 1
    by_type = {c.type: c for c in ready.conditions}
    assert by_type["Ready"].status and not by_type["Reconciling"].status
    errored = ready.transition("Errored", "boom", "BrokerUnavailable", 2)
    again = errored.transition("Errored", "boom", "BrokerUnavailable", 2)
    assert {c.type: c.last_transition_time for c in again.conditions} == {
        c.type: c.last_transition_time for c in errored.conditions}
    assert {c.type: c for c in errored.conditions}["Errored"].message == "boom"
    assert {c.type: c for c in errored.conditions}["Deleting"].last_transition_time == by_type["Deleting"].last_transition_time
