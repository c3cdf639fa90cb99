"""A message whose lease ran out and that nobody took again is waiting, as in SQS: the depth counts
it as waiting (not in flight), export says so, and clear removes it."""

from tests.helpers import eventually, make_queue


async def test_a_lease_that_ran_out_counts_as_waiting_and_clear_removes_the_message(stack, unique_name):
    make_queue(stack, unique_name, visibility_timeout_seconds=2)
    with stack.admin() as admin:
        for body in ("taken", "never taken"):
            admin.send("default", unique_name, body)
        (taken,) = admin.receive("default", unique_name, 1, 1.0)
        assert taken["body"] == "taken"
        stats = admin.stats("default", unique_name)
        assert (stats["waiting"], stats["in_flight"]) == (1, 1)  # leased for 2 s: hidden
        by_status = {m["body"]: m["status"] for m in admin.export("default", unique_name)}
        assert by_status == {"taken": "in_flight", "never taken": "waiting"}

        # its lease runs out; nobody receives it again: it waits, it is not held by anyone
        await eventually(lambda: admin.stats("default", unique_name)["in_flight"] == 0, timeout=15)
        stats = admin.stats("default", unique_name)
        assert (stats["waiting"], stats["in_flight"], stats["delayed"]) == (2, 0, 0)
        exported = {m["body"]: (m["status"], m["attempts"]) for m in admin.export("default", unique_name)}
        assert exported == {"taken": ("waiting", 1), "never taken": ("waiting", 0)}

        assert admin.clear("default", unique_name) == {"waiting": 2, "delayed": 0, "dead": 0}
        stats = admin.stats("default", unique_name)
        assert (stats["waiting"], stats["in_flight"], stats["delayed"]) == (0, 0, 0)
        assert admin.receive("default", unique_name, 10, 0.5) == []


def test_a_message_still_leased_stays_in_flight_and_survives_clear(stack, unique_name):
    make_queue(stack, unique_name, visibility_timeout_seconds=60)
    with stack.admin() as admin:
        admin.send("default", unique_name, "held")
        (held,) = admin.receive("default", unique_name, 1, 1.0)
        stats = admin.stats("default", unique_name)
        assert (stats["waiting"], stats["in_flight"]) == (0, 1)
        assert admin.clear("default", unique_name) == {"waiting": 0, "delayed": 0, "dead": 0}
        admin.delete_message("default", unique_name, held["receipt"])  # its worker can still finish it
        assert admin.stats("default", unique_name)["in_flight"] == 0
