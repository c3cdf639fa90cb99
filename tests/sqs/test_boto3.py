"""boto3 (AWS JSON 1.0, Signature Version 4) against the SQS endpoint of a real stack: queues with
attributes, messages with attributes (their MD5s checked against moto's SQS model), long polls, visibility,
batches that fail entry by entry, a redrive policy whose message dies into the DLQ and a move task
that brings it back, purge, tags, listing, and the refusals with the codes SDKs expect."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from typing import Any
from urllib.parse import quote, urlencode
from xml.etree import ElementTree

import botocore.exceptions
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto.sqs.models import Message as MotoMessage

from tests.helpers import make_queue, publish_as_an_app

from .conftest import REGION, until


def error_of(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The ``Error`` of the ClientError the call raises (and its HTTP status)."""
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        call(*args, **kwargs)
    response = caught.value.response
    return {**response["Error"], "status": response["ResponseMetadata"]["HTTPStatusCode"]}


def md5_of(attributes: dict[str, Any]) -> str:
    """MD5OfMessageAttributes as moto's SQS model computes it."""
    reference = MotoMessage("id", "body")
    reference.message_attributes = attributes
    return reference.attribute_md5


def new_queue(sqs: Any, name: str, **attributes: str) -> str:
    return sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]


def test_a_queue_with_attributes_and_a_message_with_attributes(sqs, stack, unique_name):
    url = sqs.create_queue(QueueName=unique_name, Attributes={
        "VisibilityTimeout": "7", "MessageRetentionPeriod": "7200", "MaximumMessageSize": "2048",
        "ReceiveMessageWaitTimeSeconds": "1", "DelaySeconds": "0"})["QueueUrl"]
    assert url == f"{stack.api_url}/sqs/default/{unique_name}"
    assert sqs.get_queue_url(QueueName=unique_name)["QueueUrl"] == url
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {k: got[k] for k in ("VisibilityTimeout", "MessageRetentionPeriod", "MaximumMessageSize",
                                "ReceiveMessageWaitTimeSeconds", "DelaySeconds", "ApproximateNumberOfMessages")} == {
        "VisibilityTimeout": "7", "MessageRetentionPeriod": "7200", "MaximumMessageSize": "2048",
        "ReceiveMessageWaitTimeSeconds": "1", "DelaySeconds": "0", "ApproximateNumberOfMessages": "0"}
    assert got["QueueArn"] == f"arn:aws:sqs:{REGION}:default:{unique_name}"
    assert abs(int(got["CreatedTimestamp"]) - time.time()) < 600

    attributes = {"kind": {"DataType": "String", "StringValue": "greeting ✓"},
                  "n": {"DataType": "Number.int", "StringValue": "42"},
                  "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"}}
    sent = sqs.send_message(QueueUrl=url, MessageBody="héllo", MessageAttributes=attributes)
    assert sent["MD5OfMessageBody"] == hashlib.md5("héllo".encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == md5_of(attributes)

    received = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, MessageAttributeNames=["All"],
                                   MessageSystemAttributeNames=["All"])["Messages"]
    assert len(received) == 1
    message = received[0]
    assert (message["Body"], message["MessageId"]) == ("héllo", sent["MessageId"])
    assert message["MessageAttributes"] == attributes
    assert (message["MD5OfBody"], message["MD5OfMessageAttributes"]) == (sent["MD5OfMessageBody"], md5_of(attributes))
    assert message["Attributes"]["ApproximateReceiveCount"] == "1"
    assert abs(int(message["Attributes"]["SentTimestamp"]) / 1000 - time.time()) < 600
    assert "ApproximateFirstReceiveTimestamp" in message["Attributes"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    again = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, MessageAttributeNames=["kind"],
                                AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    assert again["MessageAttributes"] == {"kind": attributes["kind"]}
    assert again["MD5OfMessageAttributes"] == md5_of({"kind": attributes["kind"]})  # of what is returned
    assert again["Attributes"] == {"ApproximateReceiveCount": "2"}
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []

    sqs.delete_queue(QueueUrl=url)
    assert error_of(sqs.get_queue_url, QueueName=unique_name)["Code"] == "AWS.SimpleQueueService.NonExistentQueue"


def test_a_long_poll_returns_a_message_sent_while_it_waits(sqs, unique_name):
    url = new_queue(sqs, unique_name)
    found: list[Any] = []
    waiting = threading.Thread(target=lambda: found.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=8)))
    waiting.start()
    time.sleep(0.5)
    sqs.send_message(QueueUrl=url, MessageBody="late")
    waiting.join(15)
    assert [m["Body"] for m in found[0]["Messages"]] == ["late"]


def test_the_queue_s_receive_wait_is_a_long_poll_too(sqs, unique_name):
    url = new_queue(sqs, unique_name, ReceiveMessageWaitTimeSeconds="8")
    found: list[Any] = []
    waiting = threading.Thread(target=lambda: found.append(sqs.receive_message(QueueUrl=url)))  # no WaitTimeSeconds
    waiting.start()
    time.sleep(0.5)
    sqs.send_message(QueueUrl=url, MessageBody="late")
    waiting.join(15)
    assert [m["Body"] for m in found[0]["Messages"]] == ["late"]


def test_a_deduplication_id_stores_a_message_once(sqs, unique_name):
    url = new_queue(sqs, unique_name)
    for body in ("first", "second"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageDeduplicationId="order-42")
    sqs.send_message(QueueUrl=url, MessageBody="other", MessageDeduplicationId="order-43")
    bodies = [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]]
    assert sorted(bodies) == ["first", "other"]
    refused = error_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageDeduplicationId="has space")
    assert refused["Code"] == "InvalidParameterValue" and "MessageDeduplicationId" in refused["Message"]


def test_the_query_protocol_over_get_signed_by_botocore(access_key, endpoint, unique_name, sqs):
    url = new_queue(sqs, unique_name)
    query = urlencode({"Action": "ListQueues", "Version": "2012-11-05", "QueueNamePrefix": unique_name},
                      quote_via=quote)
    request = AWSRequest(method="GET", url=f"{endpoint}?{query}")
    SigV4Auth(Credentials(access_key["access_key_id"], access_key["secret_access_key"]), "sqs", REGION).add_auth(request)
    answer = httpx.get(request.url, headers=dict(request.headers), timeout=10)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/xml")
    ns = {"s": "http://queue.amazonaws.com/doc/2012-11-05/"}
    assert ElementTree.fromstring(answer.text).findtext("s:ListQueuesResult/s:QueueUrl", namespaces=ns) == url
    unsigned = httpx.get(f"{endpoint}?{query}", timeout=10)
    assert unsigned.status_code == 403
    assert ElementTree.fromstring(unsigned.text).findtext("s:Error/s:Code", namespaces=ns) == "MissingAuthenticationToken"


def test_visibility_timeout_redelivers_and_a_stale_handle_changes_nothing(sqs, unique_name):
    url = new_queue(sqs, unique_name, VisibilityTimeout="1")
    sqs.send_message(QueueUrl=url, MessageBody="work")
    first = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    second = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    assert (second["Body"], second["Attributes"]["ApproximateReceiveCount"]) == ("work", "2")
    refused = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=first["ReceiptHandle"],
                       VisibilityTimeout=30)
    assert refused["Code"] == "AWS.SimpleQueueService.MessageNotInflight"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])  # succeeds, deletes nothing (as SQS)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0)
    third = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2, AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"], VisibilityTimeout=20)
    time.sleep(1.5)  # past the queue's own 1 s: the longer lease holds it
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages",
                                                                          "ApproximateNumberOfMessagesNotVisible"])
    assert attributes["Attributes"] == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_a_receive_s_visibility_timeout_and_a_delayed_message(sqs, unique_name):
    url = new_queue(sqs, unique_name, VisibilityTimeout="30", DelaySeconds="1")
    sqs.send_message(QueueUrl=url, MessageBody="delayed by the queue")
    delayed = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert delayed["Attributes"]["ApproximateNumberOfMessagesDelayed"] == "1"
    taken = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, VisibilityTimeout=1)["Messages"]
    assert [m["Body"] for m in taken] == ["delayed by the queue"]
    back = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert back[0]["Attributes"]["ApproximateReceiveCount"] == "2"  # its own 1 s, not the queue's 30 s


def test_batches_fail_entry_by_entry(sqs, unique_name):
    url = new_queue(sqs, unique_name, MaximumMessageSize="1024")
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "ok-1", "MessageBody": "one"},
        {"Id": "ok-2", "MessageBody": "two", "MessageAttributes": {"a": {"DataType": "String", "StringValue": "b"}}},
        {"Id": "too-big", "MessageBody": "x" * 1025},
        {"Id": "not-a-number", "MessageBody": "n", "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "x"}}},
        {"Id": "bad-char", "MessageBody": "bell \x07"},
        {"Id": "fifo", "MessageBody": "g", "MessageGroupId": "g1"},
    ])
    assert sorted(e["Id"] for e in answer["Successful"]) == ["ok-1", "ok-2"]
    assert {e["Id"]: (e["Code"], e["SenderFault"]) for e in answer["Failed"]} == {
        "too-big": ("InvalidParameterValue", True), "not-a-number": ("InvalidParameterValue", True),
        "bad-char": ("InvalidMessageContents", True), "fifo": ("InvalidParameterValue", True)}
    messages = []
    for _ in range(5):
        messages += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        if len(messages) == 2:
            break
    assert sorted(m["Body"] for m in messages) == ["one", "two"]
    changed = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "c1", "ReceiptHandle": messages[0]["ReceiptHandle"], "VisibilityTimeout": 60},
        {"Id": "c2", "ReceiptHandle": "forged", "VisibilityTimeout": 60}])
    assert [e["Id"] for e in changed["Successful"]] == ["c1"]
    assert [(e["Id"], e["Code"]) for e in changed["Failed"]] == [("c2", "ReceiptHandleIsInvalid")]
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)] + [
        {"Id": "forged", "ReceiptHandle": "bm90LWEtcmVjZWlwdA"}])
    assert sorted(e["Id"] for e in deleted["Successful"]) == ["d0", "d1"]
    assert [(e["Id"], e["Code"]) for e in deleted["Failed"]] == [("forged", "ReceiptHandleIsInvalid")]

    for entries, code in (([], "AWS.SimpleQueueService.EmptyBatchRequest"),
                          ([{"Id": f"e{i}", "MessageBody": "m"} for i in range(11)],
                           "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
                          ([{"Id": "same", "MessageBody": "m"}] * 2, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
                          ([{"Id": "no spaces", "MessageBody": "m"}], "AWS.SimpleQueueService.InvalidBatchEntryId")):
        assert error_of(sqs.send_message_batch, QueueUrl=url, Entries=entries)["Code"] == code


def test_a_redrive_policy_dead_letters_and_a_move_task_brings_it_back(sqs, unique_name):
    dlq = new_queue(sqs, f"{unique_name}-dlq")
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}
    url = new_queue(sqs, unique_name, VisibilityTimeout="1", RedrivePolicy=json.dumps(policy))
    read = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"])
    assert read == policy
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [url]

    sqs.send_message(QueueUrl=url, MessageBody="poison")
    for attempt in ("1", "2"):
        taken = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])
        assert taken["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == attempt  # never deleted

    def dead() -> list[str]:
        return [m["Body"] for m in sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, VisibilityTimeout=0)
                .get("Messages", [])]

    assert until(dead, timeout=20) == ["poison"]
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []
    (letter,) = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, VisibilityTimeout=0,
                                    MessageSystemAttributeNames=["All"])["Messages"]
    assert "MessageDeduplicationId" not in letter["Attributes"]  # the mover's copy id is not the sender's key

    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    assert handle

    def finished() -> Any:
        task = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
        return task if task["Status"] == "COMPLETED" else None

    task = until(finished, timeout=20)
    assert (task["ApproximateNumberOfMessagesMoved"], task["SourceArn"]) == (1, dlq_arn)
    back = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in back] == [("poison", "1")]
    refused = error_of(sqs.cancel_message_move_task, TaskHandle=handle)
    assert refused["Code"] == "AWS.SimpleQueueService.UnsupportedOperation"  # it has finished

    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert "RedrivePolicy" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]


def test_purge_removes_waiting_in_flight_and_delayed_messages(sqs, unique_name):
    url = new_queue(sqs, unique_name)
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)])
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=600)
    (taken,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
    sqs.purge_queue(QueueUrl=url)
    refused = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=taken["ReceiptHandle"],
                       VisibilityTimeout=30)
    assert (refused["Code"], refused["status"]) == ("InvalidParameterValue", 400)
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert [counts[f"ApproximateNumberOfMessages{k}"] for k in ("", "NotVisible", "Delayed")] == ["0", "0", "0"]
    sqs.send_message(QueueUrl=url, MessageBody="after")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]] == ["after"]


def test_tags_listing_and_a_repeated_create(sqs, stack, unique_name):
    urls = [sqs.create_queue(QueueName=f"{unique_name}-{i}", tags={"team": "q", "n": str(i)})["QueueUrl"]
            for i in range(3)]
    assert sqs.list_queue_tags(QueueUrl=urls[0])["Tags"] == {"team": "q", "n": "0"}
    sqs.tag_queue(QueueUrl=urls[0], Tags={"env": "test"})
    sqs.untag_queue(QueueUrl=urls[0], TagKeys=["n"])
    assert sqs.list_queue_tags(QueueUrl=urls[0])["Tags"] == {"team": "q", "env": "test"}

    page = sqs.list_queues(QueueNamePrefix=unique_name, MaxResults=2)
    assert page["QueueUrls"] == urls[:2] and page["NextToken"]
    rest = sqs.list_queues(QueueNamePrefix=unique_name, MaxResults=2, NextToken=page["NextToken"])
    assert rest["QueueUrls"] == urls[2:] and "NextToken" not in rest
    for junk in ("%%%", page["NextToken"] + "%", "!" + page["NextToken"]):  # base64 skipped what it did not know
        assert error_of(sqs.list_queues, QueueNamePrefix=unique_name, MaxResults=2, NextToken=junk)[
            "Code"] == "InvalidParameterValue"

    assert sqs.create_queue(QueueName=f"{unique_name}-0")["QueueUrl"] == urls[0]  # same attributes: its URL
    differing = error_of(sqs.create_queue, QueueName=f"{unique_name}-0", Attributes={"VisibilityTimeout": "9"})
    assert differing["Code"] == "QueueAlreadyExists" and "VisibilityTimeout" in differing["Message"]


@pytest.mark.parametrize(("attributes", "code", "fragment"), [
    ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue", "from 0 to 43200"),
    ({"VisibilityTimeout": "0"}, "InvalidAttributeValue", "at least 1 s"),
    ({"MessageRetentionPeriod": "59"}, "InvalidAttributeValue", "from 60 to 1209600"),
    ({"DelaySeconds": "901"}, "InvalidAttributeValue", "from 0 to 900"),
    ({"MaximumMessageSize": "abc"}, "InvalidAttributeValue", "from 1024 to 1048576"),
    ({"RedrivePolicy": '{"maxReceiveCount": 3}'}, "InvalidAttributeValue", "deadLetterTargetArn"),
    # numbers int() would take or turn: a fraction cut off, an infinity it cannot convert at all
    # (Infinity is no JSON: the policy is refused as a whole)
    *(({"RedrivePolicy": json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:default:elsewhere",
                                     "maxReceiveCount": count})}, "InvalidAttributeValue", fragment)
      for count, fragment in ((2.5, "maxReceiveCount must be"), (float("inf"), "must be a JSON object"),
                              ("1_0", "maxReceiveCount must be"))),
    ({"VisibilityTimeout": "1_0"}, "InvalidAttributeValue", "from 0 to 43200"),
    ({"NoSuchAttribute": "1"}, "InvalidAttributeName", "NoSuchAttribute"),
    ({"ContentBasedDeduplication": "true"}, "InvalidAttributeName", "ContentBasedDeduplication"),
    ({"FifoQueue": "true"}, "InvalidAttributeValue", "FIFO queues are not supported"),
    ({"Policy": "{}"}, "InvalidAttributeValue", "does not support"),
])
def test_attribute_refusals(sqs, unique_name, attributes, code, fragment):
    error = error_of(sqs.create_queue, QueueName=unique_name, Attributes=attributes)
    assert (error["Code"], error["status"]) == (code, 400)
    assert fragment in error["Message"]
    assert error_of(sqs.get_queue_url, QueueName=unique_name)["Code"] == "AWS.SimpleQueueService.NonExistentQueue"


def test_refusals_with_the_codes_sdks_expect(sqs, make_client, access_key, stack, unique_name):
    wrong = make_client({**access_key, "secret_access_key": access_key["secret_access_key"] + "x"})
    assert error_of(wrong.list_queues) | {"Message": ""} == {
        "Code": "SignatureDoesNotMatch", "Message": "", "status": 403, "Type": "Sender",
        "QueryErrorCode": "SignatureDoesNotMatch"}
    unknown = make_client({**access_key, "access_key_id": "EQAKAAAAAAAAAAAAAAAA"})
    assert error_of(unknown.list_queues)["Code"] == "InvalidClientTokenId"
    elsewhere = make_client(access_key, region="eu-west-1")
    assert "region" in error_of(elsewhere.list_queues)["Message"]

    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=f"{stack.api_url}/sqs/default/{unique_name}", MessageBody="x")
    for name, fragment in (("Mixed_Case", "lowercase"), (f"{unique_name}.fifo", "FIFO")):
        error = error_of(sqs.create_queue, QueueName=name)
        assert error["Code"] == "InvalidParameterValue" and fragment in error["Message"]
    url = new_queue(sqs, unique_name, MaximumMessageSize="1024")
    assert error_of(sqs.send_message, QueueUrl=url, MessageBody="x" * 1025)["Code"] == "InvalidParameterValue"
    assert error_of(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=11)["Code"] == "InvalidParameterValue"
    assert error_of(sqs.receive_message, QueueUrl=url, WaitTimeSeconds=21)["Code"] == "InvalidParameterValue"
    assert error_of(sqs.delete_message, QueueUrl=url, ReceiptHandle="forged")["Code"] == "ReceiptHandleIsInvalid"
    assert error_of(sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["Nope"])["Code"] == "InvalidAttributeName"
    assert error_of(sqs.add_permission, QueueUrl=url, Label="l", AWSAccountIds=["1"], Actions=["SendMessage"])[
        "Code"] == "AWS.SimpleQueueService.UnsupportedOperation"


def test_a_running_move_task_is_listed_and_cancelled(sqs, unique_name):
    source = new_queue(sqs, unique_name)
    new_queue(sqs, f"{unique_name}-to")
    arn = f"arn:aws:sqs:{REGION}:default:{unique_name}"
    sqs.send_message_batch(QueueUrl=source, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(6)])
    handle = sqs.start_message_move_task(SourceArn=arn, DestinationArn=f"{arn}-to",
                                         MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    running = sqs.list_message_move_tasks(SourceArn=arn)["Results"][0]
    assert (running["Status"], running["TaskHandle"], running["DestinationArn"], running["MaxNumberOfMessagesPerSecond"]) == (
        "RUNNING", handle, f"{arn}-to", 1)
    again = error_of(sqs.start_message_move_task, SourceArn=arn, DestinationArn=f"{arn}-to")
    assert again["Code"] == "AWS.SimpleQueueService.UnsupportedOperation"  # one task at a time
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 0 <= moved < 6
    cancelled = sqs.list_message_move_tasks(SourceArn=arn)["Results"][0]
    assert (cancelled["Status"], cancelled["ApproximateNumberOfMessagesMoved"]) == ("CANCELLED", moved)
    assert "TaskHandle" not in cancelled
    not_a_dlq = error_of(sqs.start_message_move_task, SourceArn=arn)
    assert not_a_dlq["Code"] == "InvalidParameterValue" and "dead-letter queue" in not_a_dlq["Message"]


def test_a_deleted_message_s_visibility_cannot_be_changed(sqs, unique_name):
    """As SQS: the handle is valid, but its message does not exist any more (a nak of it would be
    confirmed all the same, so the endpoint looks)."""
    url = new_queue(sqs, unique_name)
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "a"}, {"Id": "b", "MessageBody": "b"}])
    taken = []
    for _ in range(5):
        taken += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        if len(taken) == 2:
            break
    sqs.delete_message(QueueUrl=url, ReceiptHandle=taken[0]["ReceiptHandle"])
    refused = error_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=taken[0]["ReceiptHandle"],
                       VisibilityTimeout=60)
    assert refused["Code"] == "InvalidParameterValue" and "does not exist" in refused["Message"]
    changed = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "gone", "ReceiptHandle": taken[0]["ReceiptHandle"], "VisibilityTimeout": 60},
        {"Id": "held", "ReceiptHandle": taken[1]["ReceiptHandle"], "VisibilityTimeout": 60}])
    assert [e["Id"] for e in changed["Successful"]] == ["held"]
    assert [(e["Id"], e["Code"]) for e in changed["Failed"]] == [("gone", "InvalidParameterValue")]


def test_a_batch_of_a_mebibyte_fits_however_it_is_encoded_and_a_larger_request_is_an_sqs_error(sqs, unique_name):
    """SQS takes 1 MiB of messages in a batch; JSON escapes each "é" (2 bytes) as 6, so such a batch
    is 3 MiB on the wire. A request past the endpoint's limit is refused unread, as SQS's error."""
    url = new_queue(sqs, unique_name)
    body = "é" * 131_000  # 262,000 bytes, under the default MaximumMessageSize
    answer = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": body} for i in range(4)])
    assert len(answer["Successful"]) == 4
    too_long = error_of(sqs.send_message_batch, QueueUrl=url,
                        Entries=[{"Id": str(i), "MessageBody": body} for i in range(5)])
    assert (too_long["Code"], too_long["status"]) == ("AWS.SimpleQueueService.BatchRequestTooLong", 400)
    unread = error_of(sqs.send_message_batch, QueueUrl=url,
                      Entries=[{"Id": str(i), "MessageBody": "x" * 900_000} for i in range(10)])
    assert (unread["Code"], unread["status"]) == ("AWS.SimpleQueueService.BatchRequestTooLong", 400)
    refused = error_of(sqs.send_message, QueueUrl=url, MessageBody="é" * 1_500_000)
    assert (refused["Code"], refused["status"]) == ("InvalidParameterValue", 400)


def test_a_receive_waiting_on_a_queue_that_is_deleted_ends_without_a_server_error(sqs, unique_name):
    url = new_queue(sqs, unique_name)
    outcome: dict[str, Any] = {}

    def receive() -> None:
        try:
            outcome["messages"] = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10).get("Messages", [])
        except botocore.exceptions.ClientError as exc:
            outcome["error"] = exc.response["Error"]["Code"]

    waiting = threading.Thread(target=receive)
    waiting.start()
    time.sleep(1)
    sqs.delete_queue(QueueUrl=url)
    waiting.join(20)
    assert outcome in ({"messages": []}, {"error": "AWS.SimpleQueueService.NonExistentQueue"})



@pytest.mark.parametrize("label", ["\ud800", "\x00"], ids=["lone-surrogate", "nul"])
def test_an_attribute_type_with_a_character_sqs_refuses_is_refused_and_nothing_is_stored(sqs, unique_name, label):
    """A type's label was not checked: the send answered 500 (its MD5 could not be taken) after the
    message was stored, so boto3's retries stored it three times, and every receive that drew it
    failed while the other messages it took stayed hidden."""
    url = new_queue(sqs, unique_name)
    error = error_of(sqs.send_message, QueueUrl=url, MessageBody="x",
                     MessageAttributes={"a": {"DataType": f"String.{label}", "StringValue": "v"}})
    assert (error["Code"], error["status"]) == ("InvalidParameterValue", 400)
    assert "type of message attribute 'a'" in error["Message"]
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "0"


def test_attributes_a_nats_client_wrote_that_no_send_would_are_left_off_its_receive(sqs, stack, unique_name):
    creds = make_queue(stack, unique_name)
    hostile = json.dumps({"a": {"DataType": "String.\ud800", "StringValue": "v"}})  # JSON escapes it
    asyncio.run(publish_as_an_app(creds, ["odd"], lambda body: {"Sqs-Message-Attributes": hostile}))
    url = sqs.get_queue_url(QueueName=unique_name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="fine", MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}})
    taken = until(lambda: sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                              MessageAttributeNames=["All"]).get("Messages"))
    while len(taken) < 2:
        taken += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                     MessageAttributeNames=["All"]).get("Messages", [])
    by_body = {m["Body"]: m for m in taken}
    assert "MessageAttributes" not in by_body["odd"]
    assert by_body["fine"]["MessageAttributes"] == {"k": {"DataType": "String", "StringValue": "v"}}


@pytest.mark.parametrize("tags", [{"k\ud800": "v"}, {"k": "v\ud800"}, {"k": "<b>"}], ids=["key", "value", "markup"])
def test_a_tag_holds_only_what_aws_allows_in_one(sqs, unique_name, tags):
    url = new_queue(sqs, unique_name)
    error = error_of(sqs.tag_queue, QueueUrl=url, Tags=tags)
    assert (error["Code"], error["status"]) == ("InvalidParameterValue", 400)
    assert "letters, digits, spaces" in error["Message"]
    assert sqs.list_queue_tags(QueueUrl=url).get("Tags", {}) == {}
