"""``replicas`` on one node: 1 by default, 3 refused (a single node cannot keep three copies),
anything but 1 or 3 refused whatever the node count, each as a 422 naming the field."""

import pytest


@pytest.mark.parametrize(("value", "says"), [
    (3, "needs a cluster of 3 nodes or more; this one has 1"),
    (2, "must be 1 or 3"),
    ("1", "must be 1 or 3"),
    (True, "must be 1 or 3"),
    (1.0, "must be 1 or 3"),
])
def test_a_create_asking_for_replicas_it_cannot_have_is_refused(http, unique_name, value, says):
    answer = http.post("/v1/projects/default/queues", json={"name": unique_name, "replicas": value})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    [error] = answer.json()["errors"]
    assert error["field"] == "replicas" and says in answer.json()["detail"] + error["message"]
    assert http.get(f"/v1/projects/default/queues/{unique_name}").status_code == 404  # nothing made


def test_one_node_defaults_to_one_and_refuses_three_in_place(http, unique_name):
    made = http.post("/v1/projects/default/queues", json={"name": unique_name})
    assert made.status_code == 201 and made.json()["replicas"] == 1
    answer = http.patch(f"/v1/projects/default/queues/{unique_name}", json={"replicas": 3})
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "replicas"
    assert http.get(f"/v1/projects/default/queues/{unique_name}").json()["replicas"] == 1
