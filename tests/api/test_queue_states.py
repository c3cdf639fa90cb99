"""What the queue's state makes of a request (issue 12): a queue not Ready yet answers 409
"not ready yet" on every route that needs its stream (never a 500 or 503), dead-letter queues
cannot form a cycle (which would leave none of them deletable), and deletes racing with other
writes answer 202 or 404, never the store's compare-and-set conflicts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.helpers import make_queue, problem

QUEUES = "/v1/projects/default/queues"


def not_ready(name: str) -> str:
    return (f"Queue '{name}' in project 'default' is not ready yet; wait until its status is Ready "
            f"(GET /v1/projects/default/queues/{name}/status?wait_seconds=30).")


#: the routes that need the queue's stream: (method, path under the queue, JSON body)
STREAM_ROUTES = [
    ("POST", "/messages/receive", {"wait": 0}),
    ("GET", "/stats", None),
    ("POST", "/messages", {"body": "early"}),
    ("GET", "/messages", None),
    ("GET", "/dead-letters", None),
    ("GET", "/export", None),
    ("POST", "/clear", None),
]


def test_a_queue_not_ready_yet_answers_409_on_every_route_that_needs_its_stream(http, unique_name):
    seen_conflicts = 0
    for attempt in range(8):
        name = f"{unique_name}-{attempt}"
        assert http.post(QUEUES, json={"name": name}).status_code == 201
        for method, path, body in STREAM_ROUTES:
            response = http.request(method, f"{QUEUES}/{name}{path}", json=body)
            if response.status_code == 409:
                assert problem(response, 409, "Conflict")["detail"] == not_ready(name)
                seen_conflicts += 1
            else:
                assert response.status_code in (200, 201), response.text
    assert seen_conflicts > 0  # the reconciler takes longer than one request (all of them, as measured)
    name = f"{unique_name}-0"
    assert http.get(f"{QUEUES}/{name}/status", params={"wait_seconds": 20}).json()["state"] == "Ready"
    for method, path, body in STREAM_ROUTES:
        assert http.request(method, f"{QUEUES}/{name}{path}", json=body).status_code in (200, 201)


def test_a_dead_letter_queue_cycle_is_refused_on_update_naming_the_field(stack, http, unique_name):
    a, b, c = unique_name, f"{unique_name}-b", f"{unique_name}-c"
    make_queue(stack, a)
    make_queue(stack, b, dead_letter_queue=a)
    body = problem(http.patch(f"{QUEUES}/{a}", json={"dead_letter_queue": b}), 422, "Invalid specification")
    message = f"names queue '{b}', which would form a cycle {a} → {b} → {a}"
    assert body["errors"] == [{"field": "dead_letter_queue", "message": message}]
    assert body["detail"] == f"dead_letter_queue {message}: a queue's dead letters must end somewhere."
    # a longer one: c → b → a, and a → c would close it
    make_queue(stack, c, dead_letter_queue=b)
    body = problem(http.patch(f"{QUEUES}/{a}", json={"dead_letter_queue": c}), 422, "Invalid specification")
    assert body["errors"] == [{"field": "dead_letter_queue",
                               "message": f"names queue '{c}', which would form a cycle {a} → {c} → {b} → {a}"}]
    assert http.get(f"{QUEUES}/{a}").json()["dead_letter_queue"] is None
    # a chain that does not come back is fine, and every queue of it can still be deleted, users first
    make_queue(stack, f"{unique_name}-d")
    assert http.patch(f"{QUEUES}/{a}", json={"dead_letter_queue": f"{unique_name}-d"}).status_code == 200
    for name in (c, b, a, f"{unique_name}-d"):
        assert http.delete(f"{QUEUES}/{name}").status_code == 202


def test_a_dead_letter_queue_cycle_is_refused_on_create(stack, http, unique_name):
    # a queue named as a DLQ must exist, so only a queue re-using the name of one that some queue
    # still names could close a cycle on create; what is refused is the same chain rule
    make_queue(stack, f"{unique_name}-x")
    body = problem(http.post(QUEUES, json={"name": unique_name, "dead_letter_queue": unique_name}), 422,
                   "Invalid specification")
    assert body["errors"][0]["field"] == "dead_letter_queue"
    created = http.post(QUEUES, json={"name": unique_name, "dead_letter_queue": f"{unique_name}-x"})
    assert created.status_code == 201


def racing(stack, jobs: list[tuple[str, str, dict | None]], workers: int = 0) -> list[httpx.Response]:
    """The answers to ``jobs`` (method, path under QUEUES, body), sent ``workers`` at a time
    (all at once by default)."""
    def call(job: tuple[str, str, dict | None]) -> httpx.Response:
        method, path, body = job
        with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as client:
            return client.request(method, f"{QUEUES}/{path}".rstrip("/"), json=body)

    with ThreadPoolExecutor(max_workers=workers or len(jobs)) as pool:
        return list(pool.map(call, jobs))


def test_two_updates_that_would_close_a_cycle_together_cannot_both_pass(stack, http, unique_name):
    for round_ in range(6):
        a, b = f"{unique_name}-{round_}a", f"{unique_name}-{round_}b"
        make_queue(stack, a)
        make_queue(stack, b)
        statuses = [r.status_code for r in racing(stack, [("PATCH", a, {"dead_letter_queue": b}),
                                                          ("PATCH", b, {"dead_letter_queue": a})])]
        assert sorted(statuses) == [200, 422], statuses  # each alone is fine; together one is refused
        links = {http.get(f"{QUEUES}/{a}").json()["dead_letter_queue"], http.get(f"{QUEUES}/{b}").json()["dead_letter_queue"]}
        assert None in links  # no cycle was stored: one of them can be deleted first
        first = a if http.get(f"{QUEUES}/{a}").json()["dead_letter_queue"] else b
        assert http.delete(f"{QUEUES}/{first}").status_code == 202
        assert http.delete(f"{QUEUES}/{b if first == a else a}").status_code == 202


def test_a_dead_letter_queue_deleted_while_a_queue_naming_it_is_created_is_one_or_the_other(stack, http, unique_name):
    for round_ in range(6):
        dlq, user = f"{unique_name}-{round_}d", f"{unique_name}-{round_}u"
        make_queue(stack, dlq)
        delete, create = (r.status_code for r in racing(
            stack, [("DELETE", dlq, None), ("POST", "", {"name": user, "dead_letter_queue": dlq})]))
        # either the delete came first (the create names a queue being deleted: 422), or the create
        # did (the delete of a queue's DLQ: 409); never both taken
        assert (delete, create) in ((202, 422), (409, 201)), (delete, create)
        if create == 201:
            assert http.delete(f"{QUEUES}/{user}").status_code == 202


def test_deletes_racing_each_other_and_other_writes_answer_202_or_404_never_409(stack, unique_name):
    names = [f"{unique_name}-{i}" for i in range(6)]
    for name in names:
        make_queue(stack, name)

    jobs = [(method, name, body) for name in names
            for method, body in [("DELETE", None)] * 4 + [("PATCH", {"max_receives": 3}), ("PATCH", {"max_receives": 4})]]
    answers = [(job[0], r.status_code, r.text) for job, r in zip(jobs, racing(stack, jobs, workers=12), strict=True)]
    deletes = [(status, text) for method, status, text in answers if method == "DELETE"]
    assert [d for d in deletes if d[0] not in (202, 404)] == []
    assert sum(1 for status, _ in deletes if status == 202) >= len(names)  # each delete took, or saw it going
    patches = [(status, text) for method, status, text in answers if method == "PATCH"]
    assert [p for p in patches if p[0] not in (200, 404)] == []
    with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}) as client:
        for name in names:
            assert client.get(f"{QUEUES}/{name}").status_code == 404  # being deleted reads as gone


def test_deleting_another_queues_dead_letter_queue_is_the_one_documented_409(stack, http, unique_name):
    make_queue(stack, f"{unique_name}-dlq")
    make_queue(stack, unique_name, dead_letter_queue=f"{unique_name}-dlq")
    body = problem(http.delete(f"{QUEUES}/{unique_name}-dlq"), 409, "Conflict")
    assert body["detail"] == (f"Queue '{unique_name}-dlq' is the dead-letter queue of queue '{unique_name}' in "
                              "project 'default'; change or delete that queue first.")
