"""SQS's two wire protocols, read into one shape and written back from it.

- AWS JSON 1.0: ``POST`` with ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON body in the members'
  own names; answers ``application/x-amz-json-1.0``; errors ``{"__type", "message"}`` with the
  query protocol's code in ``x-amzn-query-error`` (errors.py). What current SDKs send.
- Query: ``Action=<Action>`` form-encoded in a ``POST`` body (or a ``GET`` query), lists and maps
  flattened (``Attribute.1.Name``, ``SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType``);
  answers ``text/xml`` (``<ActionResponse><ActionResult>…``). What older SDKs and tools send.

Requests of either protocol become the JSON protocol's members (``query_params``), and actions.py
answers in them; ``render_query`` writes them as the query protocol's XML.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from ..envelope import parse_json
from .errors import SqsError

JSON_TYPE = "application/x-amz-json-1.0"
XML_TYPE = "text/xml"
XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
TARGET_PREFIX = "AmazonSQS."

#: the query protocol's flattened lists: name in the form -> the JSON member
LISTS = {
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
}
#: flattened maps: name in the form -> (the JSON member, the key's name, the value's name)
MAPS = {
    "Attribute": ("Attributes", "Name", "Value"),
    "Tag": ("Tags", "Key", "Value"),
    "MessageAttribute": ("MessageAttributes", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value"),
}
#: in answers: a list member -> the element each item is written as (flattened)
RESULT_LISTS = {"QueueUrls": "QueueUrl", "queueUrls": "QueueUrl", "Messages": "Message",
                "Failed": "BatchResultErrorEntry", "Results": "ListMessageMoveTasksResultEntry"}
#: in answers: a map member -> (element, key element, value element)
RESULT_MAPS = {"Attributes": ("Attribute", "Name", "Value"), "Tags": ("Tag", "Key", "Value"),
               "MessageAttributes": ("MessageAttribute", "Name", "Value")}


def json_params(body: bytes) -> dict[str, Any]:
    """A JSON protocol request's members; InvalidParameterValue (SerializationException) for a body
    that is not a JSON object."""
    if not body.strip():
        return {}
    try:
        params = parse_json(body)
    except (ValueError, UnicodeDecodeError):
        params = None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body is not a JSON object.")
    return params


def _tree(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for key, value in pairs:
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = value
    return root


def _indexed(node: Any) -> list[Any]:
    if not isinstance(node, dict):
        return [node]
    items = [(int(k), v) for k, v in node.items() if k.isdigit()]
    return [v for _, v in sorted(items)]


def _convert(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in MAPS:
            member, key_name, value_name = MAPS[key]
            entries = out.setdefault(member, {})
            for item in _indexed(value):
                if isinstance(item, dict) and key_name in item:
                    if not isinstance(item[key_name], str):  # Attribute.1.Name.x=1
                        raise _shape_error(f"{key}.{key_name}", "a string")
                    inner = item.get(value_name)
                    entries[item[key_name]] = _convert(inner) if isinstance(inner, dict) else inner
        elif key in LISTS:  # an empty list as a bare key (AttributeName=): empty
            out[LISTS[key]] = [] if value == "" else [_convert(item) if isinstance(item, dict) else item
                                                      for item in _indexed(value)]
        elif isinstance(value, dict):
            out[key] = _convert(value)
        else:
            out[key] = value
    return out


#: the type of each member of SQS's requests (and of a batch entry's), by name: what
#: ``check_shapes`` holds a request to before any action reads it
STRINGS = frozenset({"QueueUrl", "QueueName", "QueueNamePrefix", "NextToken", "MessageBody", "MessageDeduplicationId",
                     "MessageGroupId", "ReceiptHandle", "ReceiveRequestAttemptId", "QueueOwnerAWSAccountId",
                     "SourceArn", "DestinationArn", "TaskHandle", "Id", "Label"})
NUMBERS = frozenset({"MaxResults", "DelaySeconds", "MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds",
                     "MaxNumberOfMessagesPerSecond"})
STRING_LISTS = frozenset({"AttributeNames", "MessageSystemAttributeNames", "MessageAttributeNames", "TagKeys",
                          "AWSAccountIds", "Actions"})
STRING_MAPS = frozenset({"Attributes", "Tags", "tags"})
VALUE_MAPS = frozenset({"MessageAttributes", "MessageSystemAttributes"})
ENTRY_LISTS = frozenset({"Entries"})


def _shape_error(name: str, rule: str) -> SqsError:
    return SqsError("InvalidParameterValue", f"Value for parameter {name} is invalid. Reason: must be {rule}.")


def check_shapes(params: dict[str, Any], where: str = "") -> None:
    """InvalidParameterValue naming the member whose value is not of its type (a number where a
    string goes, ``QueueNamePrefix.1=x`` in a query): an action reads only what fits. What SDKs
    send for nothing is taken as nothing, first: a JSON ``null`` member is left out, and an empty
    list or map written as an empty query value (``AttributeNames=``, botocore's) is empty."""
    for name in [name for name, value in params.items() if value is None]:
        del params[name]
    for name, value in list(params.items()):
        if value == "" and name in STRING_LISTS | ENTRY_LISTS:
            params[name] = []
        elif value == "" and name in STRING_MAPS | VALUE_MAPS:
            params[name] = {}
    for name, value in params.items():
        shown = f"{where}{name}"
        if name in STRINGS and not isinstance(value, str):
            raise _shape_error(shown, "a string")
        if name in NUMBERS and (isinstance(value, bool) or not isinstance(value, (int, str)) and not (
                isinstance(value, float) and value.is_integer())):
            raise _shape_error(shown, "an integer")
        if name in STRING_LISTS and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise _shape_error(shown, "a list of strings")
        if name in STRING_MAPS and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            raise _shape_error(shown, "a map of strings to strings")
        if name in VALUE_MAPS and not (isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())):
            raise _shape_error(shown, "a map of names to values, each with its DataType")
        if name in ENTRY_LISTS:
            if not (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
                raise _shape_error(shown, "a list of entries")
            for index, entry in enumerate(value, 1):
                check_shapes(entry, f"{shown}.{index}.")


#: the list members SQS leaves out of a JSON answer when they are empty (an empty receive is
#: ``{}``: ``aws sqs receive-message`` then prints nothing, and scripts test for that; JS code
#: tests ``if (Messages)``, which an empty list passes)
OMITTED_EMPTY = frozenset({"Messages", "QueueUrls", "Failed", "queueUrls"})


def without_empty(result: dict[str, Any]) -> dict[str, Any]:
    """A JSON answer as SQS writes it: the members OMITTED_EMPTY left out when empty."""
    return {key: value for key, value in result.items() if not (key in OMITTED_EMPTY and value == [])}


def query_params(form: str) -> tuple[str, dict[str, Any]]:
    """A query protocol request's action and its members in the JSON protocol's shape."""
    pairs = parse_qsl(form, keep_blank_values=True)
    action = next((v for k, v in pairs if k == "Action"), "")
    kept = [(k, v) for k, v in pairs if k not in ("Action", "Version") and not k.startswith("X-Amz-")]
    params = _convert(_tree(kept))
    if "Tags" in params and action == "CreateQueue":
        params["tags"] = params.pop("Tags")
    return action, params


#: the actions whose answer has no result element (every other's has one, empty or not: the SDKs
#: read the element itself)
NO_RESULT = frozenset({"DeleteMessage", "ChangeMessageVisibility", "DeleteQueue", "PurgeQueue", "SetQueueAttributes",
                       "TagQueue", "UntagQueue", "AddPermission", "RemovePermission"})
#: what XML escapes beyond ``&<>``: a carriage return written as itself is read back as a line feed
#: (XML's end-of-line handling), so a body with one would arrive changed and fail its MD5
XML_ENTITIES = {"\r": "&#xD;"}


def _text(value: Any) -> str:
    return escape(str(value), XML_ENTITIES)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return _text(value)


def _element(name: str, value: Any, item_names: dict[str, str]) -> str:
    if value is None:
        return ""
    if name in RESULT_MAPS and isinstance(value, dict):
        element, key_name, value_name = RESULT_MAPS[name]
        return "".join(f"<{element}><{key_name}>{_text(k)}</{key_name}>"
                       f"{_element(value_name, v, item_names)}</{element}>" for k, v in value.items())
    if isinstance(value, list):
        element = item_names.get(name) or RESULT_LISTS.get(name, name)
        return "".join(_element(element, item, item_names) for item in value)
    if isinstance(value, dict):
        inner = "".join(_element(k, v, item_names) for k, v in value.items())
        return f"<{name}>{inner}</{name}>"
    return f"<{name}>{_scalar(value)}</{name}>"


def render_query(action: str, result: dict[str, Any], request_id: str) -> bytes:
    """The query protocol's answer to ``action``: its result members as XML."""
    items = {"Successful": f"{action}ResultEntry"}
    inner = "".join(_element(k, v, items) for k, v in result.items())
    body = "" if action in NO_RESULT and not inner else f"<{action}Result>{inner}</{action}Result>"
    return (f'<?xml version="1.0"?><{action}Response xmlns="{XMLNS}">{body}'
            f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>").encode()


def render_query_error(error: SqsError, request_id: str) -> bytes:
    return (f'<?xml version="1.0"?><ErrorResponse xmlns="{XMLNS}"><Error><Type>{error.fault}</Type>'
            f"<Code>{_text(error.code)}</Code><Message>{_text(error.message)}</Message><Detail/></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>").encode()


def render_json_error(error: SqsError) -> bytes:
    return json.dumps({"__type": error.json_type, "message": error.message}).encode()


def query_error_header(error: SqsError) -> str:
    """``x-amzn-query-error``: how a JSON client learns the query protocol's code."""
    return f"{error.code};{error.fault}"
