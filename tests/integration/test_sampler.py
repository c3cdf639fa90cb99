"""The depth sampler against the real broker (test stacks sample every second): samples follow a
queue's real depth, the depth route returns them oldest first, a bad ``hours`` is a 422 naming
it, and a deleted queue's history is gone from the API."""

from datetime import UTC, datetime

import httpx
import pytest

from enclave_queue.client import connect
from enclave_queue.controller.sampler import KEEP_SECONDS
from enclave_queue.names import SAMPLES_STREAM
from tests.helpers import control_connection, eventually, make_queue


@pytest.fixture
def http(stack):
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as client:
        yield client


def history(http, name, **params):
    response = http.get(f"/v1/projects/default/queues/{name}/depth", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["sample_seconds"] == 1
    return body["points"]


def counts(point):
    return {k: point[k] for k in ("waiting", "in_flight", "delayed", "dead")}


async def test_samples_follow_the_real_depth_oldest_first(stack, http, unique_name):
    dlq = f"{unique_name}-dlq"
    started = datetime.now(UTC)  # before the queue exists: no sample of it can be older
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=60, dead_letter_queue=dlq)
    await eventually(lambda: history(http, unique_name), timeout=15)  # sampled while empty
    async with connect(creds) as queue:
        await queue.send_batch(["a", "b", "c", "d"])
        (taken,) = await queue.receive(wait=3)
        (poison,) = await queue.receive(wait=3)
        assert await poison.reject(error="cannot parse") == "moved"
        await eventually(lambda: counts(history(http, unique_name)[-1]) ==
                         {"waiting": 2, "in_flight": 1, "delayed": 0, "dead": 1}, timeout=15)
        await taken.delete()

    points = history(http, unique_name, hours=1)
    assert counts(points[0]) == {"waiting": 0, "in_flight": 0, "delayed": 0, "dead": 0}
    times = [datetime.fromisoformat(p["t"]) for p in points]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert started <= times[0] and times[-1] <= datetime.now(UTC)
    assert history(http, unique_name)[: len(points)] == points  # the default, 24 hours, from the same start
    # a queue without a dead-letter queue has no dead count
    await eventually(lambda: history(http, dlq) and counts(history(http, dlq)[-1]) ==
                     {"waiting": 1, "in_flight": 0, "delayed": 0, "dead": None}, timeout=15)


async def test_samples_live_in_a_stream_kept_seven_days(stack):
    async with control_connection(stack) as nc:
        info = await nc.jetstream().stream_info(SAMPLES_STREAM)
    assert info.config.max_age == KEEP_SECONDS == 7 * 24 * 3600
    assert info.config.subjects == ["samples.*"] and info.config.allow_direct


@pytest.mark.parametrize("hours", ["0", "169", "-1", "1.5", "day"])
def test_hours_out_of_range_is_a_422_naming_it(http, hours):
    response = http.get("/v1/projects/default/queues/emails/depth", params={"hours": hours})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"] == [{"field": "hours", "message": f"must be an integer from 1 to 168 (got {hours!r})"}]


async def test_a_deleted_queue_has_no_history(stack, http, unique_name):
    make_queue(stack, unique_name)
    await eventually(lambda: history(http, unique_name), timeout=15)
    with stack.admin() as admin:
        admin.delete_queue("default", unique_name)
        response = http.get(f"/v1/projects/default/queues/{unique_name}/depth")  # being deleted: gone already
        assert response.status_code == 404
        admin.wait_deleted("default", unique_name, timeout=20)
    response = http.get(f"/v1/projects/default/queues/{unique_name}/depth")
    assert response.status_code == 404
    assert response.json()["detail"] == f"Queue '{unique_name}' does not exist in project 'default'."
