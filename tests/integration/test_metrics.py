"""/metrics against the real broker: after a known sequence of sends, receives, deletes, nacks, a
dead letter and a discard, every per-queue number is what happened; the control plane's own
metrics are there; only an API token or the metrics token may scrape, and the metrics token
nothing else."""

import contextlib
import os
import signal
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from enclave_queue.client import connect
from enclave_queue.names import ADVISORY_STREAM
from tests.helpers import control_connection, eventually, make_queue

METRICS_TOKEN = "metrics-" + "s3cret" * 4


def scrape(stack, token=None):
    response = httpx.get(stack.api_url + "/metrics", headers={"Authorization": f"Bearer {token or stack.token}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def samples(text):
    """{(metric name, labels as a sorted tuple): value} for every sample in the exposition."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def queue_numbers(text, name, project="default"):
    """One queue's numbers: {'messages_waiting': 2, 'messages_sent_total': 8, 'dead_letters': 1, …}."""
    labels = (("project", project), ("queue", name))
    return {metric.removeprefix("enclave_queue_"): value for (metric, found), value in samples(text).items()
            if found == labels}


async def receive_all(queue, count):
    got = []
    while len(got) < count:
        batch = await queue.receive(batch=count - len(got), wait=3)
        assert batch, f"only {len(got)} of {count} messages came"
        got += batch
    return {message.body: message for message in got}


async def test_after_a_known_sequence_every_queue_number_matches(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    plain = f"{unique_name}-plain"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=2, visibility_timeout_seconds=60, dead_letter_queue=dlq)
    plain_creds = make_queue(stack, plain, max_receives=1, visibility_timeout_seconds=60)

    async with connect(creds) as queue:
        await queue.send_batch([f"m{i}" for i in range(6)])
        first = await receive_all(queue, 6)
        await first["m0"].delete()
        await first["m1"].delete()
        await first["m2"].nack()
        await first["m5"].nack()
        again = await receive_all(queue, 2)
        assert {body: m.receive_count for body, m in again.items()} == {"m2": 2, "m5": 2}
        await again["m2"].nack()  # its last receive: the mover takes it to the dead-letter queue
        await again["m5"].delete()
        await queue.send_batch(["m6", "m7"])  # m3 and m4 stay in flight, m6 and m7 wait
    async with connect(plain_creds) as queue:
        await queue.send_batch(["p0", "p1"])
        got = await receive_all(queue, 2)
        await got["p0"].delete()
        await got["p1"].nack()  # its last receive, and no dead-letter queue: discarded

    def counted():
        with stack.admin() as admin:
            return (admin.queue_status("default", unique_name)["dead_lettered"] == 1
                    and admin.queue_status("default", plain)["discarded"] == 1)

    await eventually(counted, timeout=10)
    expected = {
        unique_name: {
            "messages_waiting": 2, "messages_in_flight": 2, "messages_delayed": 0, "dead_letters": 1,
            "messages_sent_total": 8, "messages_received_total": 8, "messages_deleted_total": 3,
            "messages_nacked_total": 3, "messages_dead_lettered_total": 1, "messages_discarded_total": 0,
            "messages_expired_total": 0,
        },
        plain: {  # no dead-letter queue: no dead_letters series
            "messages_waiting": 0, "messages_in_flight": 0, "messages_delayed": 0,
            "messages_sent_total": 2, "messages_received_total": 2, "messages_deleted_total": 1,
            "messages_nacked_total": 1, "messages_dead_lettered_total": 0, "messages_discarded_total": 1,
            "messages_expired_total": 0,
        },
        dlq: {
            "messages_waiting": 1, "messages_in_flight": 0, "messages_delayed": 0,
            "messages_sent_total": 1, "messages_received_total": 0, "messages_deleted_total": 0,
            "messages_nacked_total": 0, "messages_dead_lettered_total": 0, "messages_discarded_total": 0,
            "messages_expired_total": 0,
        },
    }

    found = {}

    def matches():  # the naks' advisories arrive a moment after the naks
        nonlocal found
        text = scrape(stack)
        found = {name: {k: v for k, v in queue_numbers(text, name).items() if k != "oldest_message_age_seconds"}
                 for name in expected}
        return found == expected

    with contextlib.suppress(AssertionError):
        await eventually(matches, timeout=10, interval=0.2)
    assert found == expected
    numbers = queue_numbers(scrape(stack), unique_name)
    assert numbers["oldest_message_age_seconds"] > 0  # m3 has been stored for a while
    assert queue_numbers(scrape(stack), plain)["oldest_message_age_seconds"] == 0  # empty

    # the naks were counted from their advisories without being stored by the mover's stream
    async with control_connection(stack) as nc:
        info = await nc.jetstream().stream_info(ADVISORY_STREAM, subjects_filter="adv.*.MSG_NAKED.*")
        assert not info.state.subjects


async def test_control_plane_metrics_tokens_and_naks_kept_across_a_restart(enclave_stack_factory, tmp_path):
    home = tmp_path / "home"
    stack = enclave_stack_factory(home=home, env={"ENCLAVE_METRICS_TOKEN": METRICS_TOKEN})
    creds = make_queue(stack, "jobs", visibility_timeout_seconds=60)
    async with connect(creds) as queue:
        await queue.send("again and again")
        for _ in range(2):
            (message,) = await queue.receive(wait=3)
            await message.nack()

    def nacked(stack):
        return queue_numbers(scrape(stack, METRICS_TOKEN), "jobs").get("messages_nacked_total") == 2

    await eventually(lambda: nacked(stack), timeout=10, interval=0.2)
    found = samples(scrape(stack, METRICS_TOKEN))
    assert found[("enclave_broker_up", ())] == 1
    assert found[("enclave_broker_memory_bytes", ())] > 1024 * 1024
    assert found[("enclave_reconcile_duration_seconds_count", ())] >= 1
    assert found[("enclave_reconcile_errors_total", ())] == 0
    assert found[("enclave_account_pushes_total", ())] >= 1  # the queue's account, given to the broker

    url = stack.api_url
    assert httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {stack.token}"}).status_code == 200
    for headers in ({}, {"Authorization": "Bearer enq_wrong"}, {"Authorization": f"Basic {METRICS_TOKEN}"}):
        response = httpx.get(url + "/metrics", headers=headers)
        assert response.status_code == 401
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["status"] == 401
    with_metrics_token = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    for path in ("/v1/projects/default/queues", "/v1/projects/default/queues/jobs/depth"):
        assert httpx.get(url + path, headers=with_metrics_token).status_code == 401

    stack.stop()  # a clean stop stores the nak count
    again = enclave_stack_factory(home=home, env={"ENCLAVE_METRICS_TOKEN": METRICS_TOKEN})
    await eventually(lambda: nacked(again), timeout=10, interval=0.2)



def test_a_scrape_as_the_broker_hangs_reads_nothing_after_the_broker_did_not_answer(enclave_stack_factory):
    """The broker hung just as a scrape began: its memory read waited out its timeout, then each
    queue read waited out its own (15 s in all, past Prometheus's 10 s scrape timeout)."""
    stack = enclave_stack_factory()
    make_queue(stack, "hung")
    time.sleep(1.1)  # past the collector's cache of the last read
    before = stack.log_path.read_text()
    os.kill(stack.broker_pid, signal.SIGSTOP)
    try:
        response = httpx.get(stack.api_url + "/metrics", headers={"Authorization": f"Bearer {stack.token}"},
                             timeout=60)
    finally:
        os.kill(stack.broker_pid, signal.SIGCONT)
    assert response.status_code == 200
    assert samples(response.text)[("enclave_broker_up", ())] == 0
    assert "queue metrics not read" not in stack.log_path.read_text()[len(before):]
