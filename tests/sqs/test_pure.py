"""The pure parts of the SQS endpoint, against implementations no one here wrote: botocore's SigV4
signer for the signature check, moto's SQS model for the message-attribute MD5, and the query
protocol's flattened parameters and XML answers."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode
from xml.etree import ElementTree

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto.sqs.models import Message as MotoMessage

from enclave_queue.sqs import sigv4, wire
from enclave_queue.sqs.errors import SqsError
from enclave_queue.sqs.messages import attributes_md5, check_attributes

KEY, SECRET = "EQAKAAAAAAAAAAAAAAAA", "s3cr3t/with+chars=="


def signed(method: str, url: str, body: bytes, headers: dict[str, str], region: str = "us-east-1") -> AWSRequest:
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(KEY, SECRET), "sqs", region).add_auth(request)
    return request


def verify(request: AWSRequest, secret: str = SECRET, *, body: bytes | None = None,
           regions: frozenset[str] = frozenset({"us-east-1"}), now: datetime | None = None) -> None:
    prepared = request.prepare()
    sent = [*prepared.headers.items(), ("Host", "127.0.0.1:7780")]  # what the HTTP client adds
    headers = {k.lower(): v for k, v in sent}
    auth = sigv4.parse_authorization(headers["authorization"])
    amz_date, when = sigv4.request_date(headers)
    sigv4.check_scope(auth, when, amz_date, regions, now)
    split = prepared.url.split("?", 1)
    path = "/" + split[0].split("/", 3)[3] if split[0].count("/") >= 3 else "/"
    data = prepared.body if body is None else body
    data = data.encode() if isinstance(data, str) else (data or b"")
    sigv4.verify(auth, secret, amz_date, method=prepared.method, raw_path=path,
                 raw_query=split[1] if len(split) > 1 else "", headers=sent,
                 payload_digest=sigv4.payload_hash(headers, data))


JSON_POST = ("POST", "http://127.0.0.1:7780/sqs", b'{"QueueName": "emails"}',
             {"X-Amz-Target": "AmazonSQS.CreateQueue", "Content-Type": "application/x-amz-json-1.0"})
FORM_POST = ("POST", "http://127.0.0.1:7780/sqs/default/emails",
             urlencode({"Action": "SendMessage", "MessageBody": "a b+c&d=é"}).encode(),
             {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
QUERY_GET = ("GET", "http://127.0.0.1:7780/sqs?" + urlencode({"Action": "ListQueues", "QueueNamePrefix": "a b~c/é"},
                                                            quote_via=quote),
             b"", {})


@pytest.mark.parametrize("case", [JSON_POST, FORM_POST, QUERY_GET], ids=["json", "form", "get"])
def test_botocore_s_signature_is_accepted(case):
    verify(signed(*case))


@pytest.mark.parametrize("case", [JSON_POST, FORM_POST], ids=["json", "form"])
def test_a_changed_body_or_secret_is_refused(case):
    request = signed(*case)
    for kwargs in ({"secret": SECRET + "x"}, {"body": case[2] + b" "}):
        with pytest.raises(SqsError) as refused:
            verify(request, **kwargs)
        assert (refused.value.code, refused.value.status) == ("SignatureDoesNotMatch", 403)


def test_scope_and_clock_are_checked():
    request = signed(*JSON_POST, region="eu-west-1")
    with pytest.raises(SqsError, match="scoped to a valid region, not 'eu-west-1'"):
        verify(request)
    verify(request, regions=frozenset({"*"}))
    later = datetime.now(UTC) + timedelta(minutes=16)
    with pytest.raises(SqsError, match="Signature expired") as expired:
        verify(signed(*JSON_POST), now=later)
    assert expired.value.code == "SignatureDoesNotMatch"
    with pytest.raises(SqsError, match="not yet current"):
        verify(signed(*JSON_POST), now=datetime.now(UTC) - timedelta(minutes=16))


@pytest.mark.parametrize(("header", "code"), [
    (None, "MissingAuthenticationToken"), ("Bearer enq_x", "IncompleteSignature"),
    ("AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request, SignedHeaders=host", "IncompleteSignature"),
    ("AWS4-HMAC-SHA256 Credential=a/b, SignedHeaders=host, Signature=00", "IncompleteSignature"),
])
def test_malformed_authorization_headers(header, code):
    with pytest.raises(SqsError) as refused:
        sigv4.parse_authorization(header)
    assert refused.value.code == code


def test_message_attribute_md5_is_sqs_s_own():
    given = {"b": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00\xff").decode()},
             "a.s": {"DataType": "String.custom", "StringValue": "héllo"},
             "n": {"DataType": "Number", "StringValue": "-1.5e3"}}
    reference = MotoMessage("id", "body")
    reference.message_attributes = {**given, "b": {"DataType": "Binary", "BinaryValue": b"\x00\xff"}}
    assert attributes_md5(check_attributes(given)) == reference.attribute_md5


@pytest.mark.parametrize(("attributes", "fragment"), [
    ({"AWS.x": {"DataType": "String", "StringValue": "v"}}, "do not start with 'AWS.'"),
    ({"a..b": {"DataType": "String", "StringValue": "v"}}, "doubled"),
    ({"a": {"DataType": "Float", "StringValue": "1"}}, "String, Number or Binary"),
    ({"a": {"DataType": "Number", "StringValue": "one"}}, "to a number"),
    ({"a": {"DataType": "String", "StringValue": ""}}, "non-empty StringValue"),
    ({f"k{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}, "exceeds the allowed maximum [10]"),
])
def test_message_attribute_rules(attributes, fragment):
    with pytest.raises(SqsError, match=fragment.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        check_attributes(attributes)


def test_the_query_protocol_s_flattened_parameters():
    form = urlencode({
        "Action": "SendMessageBatch", "Version": "2012-11-05", "QueueUrl": "http://h/sqs/default/q",
        "SendMessageBatchRequestEntry.2.Id": "b", "SendMessageBatchRequestEntry.2.MessageBody": "two",
        "SendMessageBatchRequestEntry.1.Id": "a", "SendMessageBatchRequestEntry.1.MessageBody": "one",
        "SendMessageBatchRequestEntry.1.DelaySeconds": "3",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name": "k",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType": "String",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue": "v",
    })
    assert wire.query_params(form) == ("SendMessageBatch", {"QueueUrl": "http://h/sqs/default/q", "Entries": [
        {"Id": "a", "MessageBody": "one", "DelaySeconds": "3",
         "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
        {"Id": "b", "MessageBody": "two"}]})
    assert wire.query_params(urlencode({"Action": "CreateQueue", "QueueName": "q", "Attribute.1.Name": "DelaySeconds",
                                        "Attribute.1.Value": "5", "Tag.1.Key": "team", "Tag.1.Value": "x"})) == (
        "CreateQueue", {"QueueName": "q", "Attributes": {"DelaySeconds": "5"}, "tags": {"team": "x"}})


def test_query_answers_are_sqs_s_xml():
    xml = wire.render_query("ReceiveMessage", {"Messages": [{
        "MessageId": "m", "Body": "<b>&", "Attributes": {"ApproximateReceiveCount": "1"},
        "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}}]}, "rid")
    root = ElementTree.fromstring(xml)
    ns = {"s": wire.XMLNS}
    message = root.find("s:ReceiveMessageResult/s:Message", ns)
    assert message.findtext("s:Body", namespaces=ns) == "<b>&"
    assert message.findtext("s:Attribute/s:Name", namespaces=ns) == "ApproximateReceiveCount"
    assert message.findtext("s:MessageAttribute/s:Value/s:StringValue", namespaces=ns) == "v"
    assert root.findtext("s:ResponseMetadata/s:RequestId", namespaces=ns) == "rid"
    error = ElementTree.fromstring(wire.render_query_error(SqsError.modelled("QueueDoesNotExist", "gone"), "rid"))
    assert error.findtext("s:Error/s:Code", namespaces=ns) == "AWS.SimpleQueueService.NonExistentQueue"
    assert error.findtext("s:Error/s:Type", namespaces=ns) == "Sender"


def test_a_query_answer_has_its_result_element_even_when_empty():
    """The SDKs read the result element itself: one left out of an empty answer failed them
    (botocore's KeyError, the Node SDK's TypeError); actions without a result have none."""
    ns = {"s": wire.XMLNS}
    for action in ("GetQueueAttributes", "ListQueueTags", "ReceiveMessage", "ListQueues"):
        root = ElementTree.fromstring(wire.render_query(action, {}, "rid"))
        assert root.find(f"s:{action}Result", ns) is not None, action
    root = ElementTree.fromstring(wire.render_query("DeleteMessage", {}, "rid"))
    assert [child.tag for child in root] == [f"{{{wire.XMLNS}}}ResponseMetadata"]


def test_a_carriage_return_comes_back_from_the_query_protocol_s_xml_as_it_was_sent():
    """XML reads a carriage return written as itself as a line feed: it is written as a reference."""
    ns = {"s": wire.XMLNS}
    body, value = "a\rb\r\nc\n", "x\ry"
    xml = wire.render_query("ReceiveMessage", {"Messages": [{
        "Body": body, "MessageAttributes": {"k": {"DataType": "String", "StringValue": value}}}]}, "rid")
    message = ElementTree.fromstring(xml).find("s:ReceiveMessageResult/s:Message", ns)
    assert message.findtext("s:Body", namespaces=ns) == body
    assert message.findtext("s:MessageAttribute/s:Value/s:StringValue", namespaces=ns) == value


@pytest.mark.parametrize("number", ["0", "-0.000", "1e126", "1e-128", "1" * 38, "1" * 38 + "000", "0." + "0" * 127 + "1",
                                    ".5", "+3.", "12345678901234567890123456789012345678.000"])
def test_numbers_sqs_takes(number):
    assert check_attributes({"n": {"DataType": "Number", "StringValue": number}})["n"]["StringValue"] == number


@pytest.mark.parametrize("number", ["1e127", "1e-129", "1" * 39, "1e999999", "1e9999999", "١٢", "1_0", "0x10", "NaN", "inf"])
def test_numbers_sqs_refuses(number):
    with pytest.raises(SqsError) as refused:
        check_attributes({"n": {"DataType": "Number", "StringValue": number}})
    assert refused.value.code == "InvalidParameterValue" and "'n'" in refused.value.message
