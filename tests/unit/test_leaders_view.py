"""A cluster's JSZ answers merged as the leaders see them (broker/connection.py ``leaders_view``):
each server answers for the replicas it holds, and a follower's consumer counts lag."""

from enclave_queue.broker.connection import leaders_view


def _detail(stream_leader, consumer_leader, pending, waiting):
    return {"id": "ACC", "stream_detail": [{
        "name": "Q", "cluster": {"leader": stream_leader}, "state": {"messages": waiting},
        "consumer_detail": [{"name": "worker", "cluster": {"leader": consumer_leader}, "num_pending": pending}],
    }]}


def test_each_stream_and_consumer_is_taken_from_its_own_leader():
    merged = leaders_view([
        ("node-a", _detail("node-b", "node-c", 0, 3)),   # a follower of both
        ("node-b", _detail("node-b", "node-c", 1, 5)),   # the stream's leader
        ("node-c", _detail("node-b", "node-c", 5, 4)),   # the consumer's leader
    ])
    [stream] = merged["stream_detail"]
    assert stream["state"]["messages"] == 5
    assert [c["num_pending"] for c in stream["consumer_detail"]] == [5]


def test_without_a_leader_among_the_answers_the_first_is_kept():
    merged = leaders_view([("node-a", _detail("node-x", "node-y", 2, 2)), ("node-b", _detail("node-x", "node-y", 9, 9))])
    assert merged["stream_detail"][0]["state"]["messages"] == 2
    assert merged["stream_detail"][0]["consumer_detail"][0]["num_pending"] == 2


def test_one_answer_is_taken_as_it_is():
    detail = _detail("node-a", "node-a", 1, 1)
    assert leaders_view([("node-a", detail)]) is detail
