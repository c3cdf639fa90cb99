"""A queue made through SQS is an ordinary Enclave queue (the API, the CLI and NATS clients see and
use it), and a queue made by Enclave is an SQS queue: settings and attributes are one thing, and
messages cross between the SQS endpoint, the API and the NATS SDK both ways."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from enclave_queue.client import connect
from tests.helpers import make_queue, publish_as_an_app
from tests.sqs.conftest import boto_client, create_key, until


def test_a_queue_made_through_sqs_is_an_enclave_queue(sqs, stack, unique_name):
    dlq = sqs.create_queue(QueueName=f"{unique_name}-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName=unique_name, Attributes={
        "VisibilityTimeout": "11", "MessageRetentionPeriod": "5000", "MaximumMessageSize": "4096",
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "4"})})["QueueUrl"]
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
        assert {k: queue[k] for k in ("visibility_timeout_seconds", "retention_hours", "max_message_bytes",
                                      "dead_letter_queue", "max_receives")} == {
            "visibility_timeout_seconds": 11, "retention_hours": 2, "max_message_bytes": 4096,
            "dead_letter_queue": f"{unique_name}-dlq", "max_receives": 4}
        sqs.send_message(QueueUrl=url, MessageBody="to the api")
        taken = admin.receive("default", unique_name, wait=2)
        assert [m["body"] for m in taken] == ["to the api"]
        admin.delete_message("default", unique_name, taken[0]["receipt"])
        admin.update_queue("default", unique_name, {"visibility_timeout_seconds": 13})
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"] == {
        "VisibilityTimeout": "13"}


async def test_an_enclave_queue_is_an_sqs_queue(sqs, stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=3, retention_hours=5)
    url = sqs.get_queue_url(QueueName=unique_name)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["VisibilityTimeout"], attributes["MessageRetentionPeriod"]) == ("3", str(5 * 3600))
    with stack.admin() as admin:
        admin.send("default", unique_name, "from the api")
    async with connect(creds) as queue:
        await queue.put(b"\xff\xfe not text")  # from a NATS client: bytes that are not UTF-8
        sqs.send_message(QueueUrl=url, MessageBody="from sqs")
        bodies = []
        for _ in range(5):
            for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                         MessageAttributeNames=["All"]).get("Messages", []):
                if m["Body"] == "from sqs":
                    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
                    continue
                mark = m.get("MessageAttributes", {}).get("Enclave.BodyEncoding", {}).get("StringValue")
                bodies.append(base64.b64decode(m["Body"]) if mark == "base64" else m["Body"].encode())
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            if len(bodies) == 2:
                break
        assert sorted(bodies) == [b"from the api", b"\xff\xfe not text"]
        message = await queue.get(timeout_s=5)
        assert message is not None and message.body in ("from sqs", b"from sqs")
        await message.ack()


async def test_a_nats_client_s_message_with_attributes_sqs_cannot_read_is_received_without_them(sqs, stack, unique_name):
    """The attributes header of a message stored by any NATS client is that client's to write: one that
    is not ours, or nested deeper than a JSON parser goes (which raised past the endpoint: 500 at every
    receive, for every SQS consumer of the queue), is received with no attributes."""
    creds = make_queue(stack, unique_name)
    url = sqs.get_queue_url(QueueName=unique_name)["QueueUrl"]
    await publish_as_an_app(creds, ["[" * 5000 + "]" * 5000, "not json", '{"a": 1}'],
                            lambda attributes: {"Sqs-Message-Attributes": attributes})
    got = {}
    for _ in range(5):
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                     MessageAttributeNames=["All"]).get("Messages", []):
            got[m["Body"]] = m.get("MessageAttributes")
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        if len(got) == 3:
            break
    assert got == {"[" * 5000 + "]" * 5000: None, "not json": None, '{"a": 1}': None}


async def test_a_nats_client_s_message_with_a_status_header_is_received(sqs, stack, unique_name):
    """``Status`` is an ordinary header name a NATS client may give its message; the endpoint's pull
    used to take such a message for the broker's end of the pull, lease it and return nothing."""
    creds = make_queue(stack, unique_name)
    url = sqs.get_queue_url(QueueName=unique_name)["QueueUrl"]
    await publish_as_an_app(creds, ["404", "408", "plain"],
                            lambda body: {} if body == "plain" else {"Status": body, "Description": "mine"})
    got = []
    for _ in range(5):
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            got.append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        if len(got) == 3:
            break
    assert sorted(got) == ["404", "408", "plain"]


def test_a_request_body_nested_too_deeply_is_a_serialization_error(access_key, endpoint):
    body = b'{"QueueNamePrefix": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    request = AWSRequest(method="POST", url=endpoint, data=body, headers={
        "X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"})
    SigV4Auth(Credentials(access_key["access_key_id"], access_key["secret_access_key"]), "sqs", "us-east-1").add_auth(request)
    prepared = request.prepare()
    answer = httpx.post(prepared.url, content=body, headers=dict(prepared.headers))
    assert answer.status_code == 400
    assert answer.json()["__type"].endswith("SerializationException")


def _raw(access_key, endpoint, action, body: bytes, protocol="json"):
    """A request signed as an SDK would, its members as given (an SDK checks their types first)."""
    if protocol == "json":
        headers = {"X-Amz-Target": f"AmazonSQS.{action}", "Content-Type": "application/x-amz-json-1.0"}
    else:
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        body = f"Action={action}&Version=2012-11-05&".encode() + body
    request = AWSRequest(method="POST", url=endpoint, data=body, headers=headers)
    SigV4Auth(Credentials(access_key["access_key_id"], access_key["secret_access_key"]), "sqs", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return httpx.post(prepared.url, content=body, headers=dict(prepared.headers))


@pytest.mark.parametrize(("action", "body"), [
    ("ListQueues", b'{"QueueNamePrefix": 5}'),
    ("GetQueueAttributes", b'{"QueueUrl": "x", "AttributeNames": 5}'),
    ("ReceiveMessage", b'{"QueueUrl": "x", "AttributeNames": true}'),
    ("ReceiveMessage", b'{"QueueUrl": "x", "MessageSystemAttributeNames": 1}'),
    ("SendMessage", b'{"QueueUrl": "x", "MessageBody": {"a": 1}}'),
    ("SendMessageBatch", b'{"QueueUrl": "x", "Entries": [{"Id": 1, "MessageBody": "a"}]}'),
    ("ReceiveMessage", b'{"QueueUrl": "x", "MaxNumberOfMessages": 2.5}'),
])
def test_a_member_of_the_wrong_type_is_an_invalid_parameter_naming_it(access_key, endpoint, action, body):
    answer = _raw(access_key, endpoint, action, body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["__type"].endswith("InvalidParameterValue")
    assert "Value for parameter" in answer.json()["message"]


@pytest.mark.parametrize(("action", "form"), [
    ("ListQueues", b"QueueNamePrefix.1=x"),
    ("SetQueueAttributes", b"QueueUrl=x&Attribute.1.Name.x=1&Attribute.1.Value=2"),
    ("TagQueue", b"QueueUrl=x&Tag.1.Key.x=a&Tag.1.Value=b"),
    ("SendMessage", b"QueueUrl=x&MessageBody=a&MessageAttribute.1.Name.a=b"),
])
def test_a_query_member_of_the_wrong_shape_is_an_invalid_parameter(access_key, endpoint, action, form):
    answer = _raw(access_key, endpoint, action, form, protocol="query")
    assert answer.status_code == 400, answer.text
    assert "<Code>InvalidParameterValue</Code>" in answer.text


def test_a_dead_letter_names_its_source_queue_arn(sqs):
    dlq = sqs.create_queue(QueueName="arn-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source = sqs.create_queue(QueueName="arn-source", Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})})["QueueUrl"]
    source_arn = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.send_message(QueueUrl=source, MessageBody="poison")
    sqs.send_message(QueueUrl=dlq, MessageBody="sent straight to the DLQ")
    [taken] = sqs.receive_message(QueueUrl=source, WaitTimeSeconds=5)["Messages"]
    sqs.change_message_visibility(QueueUrl=source, ReceiptHandle=taken["ReceiptHandle"], VisibilityTimeout=0)
    found = {}
    for _ in range(40):
        for m in sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                     MessageSystemAttributeNames=["All"]).get("Messages", []):
            found[m["Body"]] = m.get("Attributes", {}).get("DeadLetterQueueSourceArn")
            sqs.delete_message(QueueUrl=dlq, ReceiptHandle=m["ReceiptHandle"])
        if len(found) == 2:
            break
    assert found == {"poison": source_arn, "sent straight to the DLQ": None}


def test_move_tasks_of_a_missing_queue_are_resource_not_found(sqs):
    missing = "arn:aws:sqs:us-east-1:default:no-such-queue"
    with pytest.raises(sqs.exceptions.ResourceNotFoundException):
        sqs.start_message_move_task(SourceArn=missing)
    with pytest.raises(sqs.exceptions.ResourceNotFoundException):
        sqs.list_message_move_tasks(SourceArn=missing)


def test_a_redrive_policy_naming_a_missing_queue_says_so_in_sqs_words(sqs):
    missing = "arn:aws:sqs:us-east-1:default:no-such-dlq"
    with pytest.raises(sqs.exceptions.ClientError) as caught:
        sqs.create_queue(QueueName="names-missing-dlq", Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": missing, "maxReceiveCount": "3"})})
    message = caught.value.response["Error"]["Message"]
    assert message.startswith("Value for parameter RedrivePolicy is invalid. Reason: its deadLetterTargetArn "), message


def test_a_visibility_extended_before_a_restart_still_holds_its_handle(enclave_stack_factory, tmp_path):
    """The usual heartbeat (ChangeMessageVisibility past the receive's timeout), then Enclave
    restarts: the handle still changes and deletes its message, which is not delivered again."""
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    key = create_key(first)
    client = boto_client(first.api_url + "/sqs", key["access_key_id"], key["secret_access_key"])
    url = client.create_queue(QueueName="beats", Attributes={"VisibilityTimeout": "2"})["QueueUrl"]
    client.send_message(QueueUrl=url, MessageBody="work")
    [message] = client.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    handle = message["ReceiptHandle"]
    client.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=60)
    assert first.stop() == 0

    second = enclave_stack_factory(home=home)
    client = boto_client(second.api_url + "/sqs", key["access_key_id"], key["secret_access_key"])
    url = client.get_queue_url(QueueName="beats")["QueueUrl"]
    time.sleep(2.5)  # past the receive's own 2 s: only the stored extension keeps the handle live
    client.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=30)
    client.delete_message(QueueUrl=url, ReceiptHandle=handle)
    counts = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")


def test_a_handle_of_a_later_receive_than_a_stored_visibility_change_deletes_after_a_restart(
        enclave_stack_factory, tmp_path):
    """A visibility change at one receive is stored; the message comes back and is received again
    (which stores nothing). After a restart the stored lease of the earlier receive was read as the
    new handle's: its delete answered done and deleted nothing, and the message came back."""
    home = tmp_path / "home"
    first = enclave_stack_factory(home=home)
    key = create_key(first)
    client = boto_client(first.api_url + "/sqs", key["access_key_id"], key["secret_access_key"])
    url = client.create_queue(QueueName="again")["QueueUrl"]
    client.send_message(QueueUrl=url, MessageBody="work")
    [message] = client.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    client.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=1)
    [again] = until(lambda: client.receive_message(QueueUrl=url, WaitTimeSeconds=2, VisibilityTimeout=300,
                                                   AttributeNames=["ApproximateReceiveCount"]).get("Messages"))
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert first.stop() == 0

    second = enclave_stack_factory(home=home)
    client = boto_client(second.api_url + "/sqs", key["access_key_id"], key["secret_access_key"])
    url = client.get_queue_url(QueueName="again")["QueueUrl"]
    client.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    counts = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")
    with pytest.raises(client.exceptions.ClientError, match="does not exist"):  # gone, not "not in flight"
        client.change_message_visibility(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"], VisibilityTimeout=5)


def test_a_visibility_past_12_hours_after_the_receive_is_refused(sqs, unique_name):
    url = sqs.create_queue(QueueName=unique_name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="long")
    [message] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, VisibilityTimeout=60)["Messages"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=43000)
    with pytest.raises(sqs.exceptions.ClientError, match="Total VisibilityTimeout for the message is beyond the limit"):
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=43200)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


@pytest.mark.parametrize(("action", "form"), [
    ("ReceiveMessage", b"QueueUrl={url}&AttributeNames=&MessageAttributeNames="),  # botocore's empty lists
    ("ReceiveMessage", b"QueueUrl={url}&AttributeName=&MessageAttributeName="),    # the Node SDK's
    ("GetQueueAttributes", b"QueueUrl={url}&AttributeNames="),
])
def test_an_empty_list_sent_as_a_bare_query_key_is_empty(access_key, endpoint, sqs, unique_name, action, form):
    url = sqs.create_queue(QueueName=unique_name)["QueueUrl"]
    answer = _raw(access_key, endpoint, action, form.replace(b"{url}", url.encode()), protocol="query")
    assert answer.status_code == 200, answer.text


def test_an_empty_batch_as_a_bare_query_key_is_an_empty_batch(access_key, endpoint, sqs, unique_name):
    url = sqs.create_queue(QueueName=unique_name)["QueueUrl"]
    answer = _raw(access_key, endpoint, "SendMessageBatch", b"QueueUrl=%s&Entries=" % url.encode(), protocol="query")
    assert answer.status_code == 400 and "<Code>AWS.SimpleQueueService.EmptyBatchRequest</Code>" in answer.text, \
        answer.text


def test_json_answers_leave_out_empty_lists_and_take_nulls_as_absent(access_key, endpoint, sqs, unique_name):
    url = sqs.create_queue(QueueName=unique_name)["QueueUrl"]
    empty = _raw(access_key, endpoint, "ReceiveMessage",
                 json.dumps({"QueueUrl": url, "WaitTimeSeconds": 0, "AttributeNames": None,
                             "MessageAttributeNames": None}).encode())
    assert (empty.status_code, empty.json()) == (200, {})
    none = _raw(access_key, endpoint, "ListQueues", json.dumps({"QueueNamePrefix": f"{unique_name}-none"}).encode())
    assert none.json() == {}
    batch = _raw(access_key, endpoint, "SendMessageBatch", json.dumps({"QueueUrl": url, "Entries": [
        {"Id": "a", "MessageBody": "x", "MessageAttributes": None}]}).encode())
    assert batch.status_code == 200 and "Failed" not in batch.json() and len(batch.json()["Successful"]) == 1
