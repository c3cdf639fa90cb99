"""Messages as SQS sees them, as pure functions: the rules of a body and of message attributes, their
MD5 digests (which every SDK checks), and how attributes travel in the stored message's headers.

Attributes are stored as one header, ``Sqs-Message-Attributes``: compact JSON in ASCII
(``{"name": {"DataType": …, "StringValue" | "BinaryValue": …}}``, binary values in base64), so
a NATS consumer of the same queue can read them too. SQS's size rule (the body and its attributes
within MaximumMessageSize) is checked on the body plus that header as stored, which keeps room for
the headers a dead letter gains.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import struct
import uuid
from decimal import Decimal
from typing import Any, Optional

from ..envelope import parse_json
from .errors import SqsError, invalid_parameter

ATTRIBUTES_HEADER = "Sqs-Message-Attributes"
MESSAGE_ID_HEADER = "Sqs-Message-Id"
SENDER_HEADER = "Sqs-Sender-Id"
TRACE_HEADER = "Sqs-Trace-Header"

MAX_ATTRIBUTES = 10
MAX_ATTRIBUTE_NAME = 256
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_TYPE = re.compile(r"(String|Number|Binary)(\..+)?", re.DOTALL)
#: the characters SQS accepts in a body or string attribute (XML 1.0's)
_INVALID = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,6})?")
MAX_NUMBER_DIGITS = 38  #: significant digits of a Number attribute
MIN_NUMBER_EXPONENT, MAX_NUMBER_EXPONENT = -128, 126  #: its size, as powers of ten


def check_body(body: Any) -> bytes:
    """A MessageBody's bytes; MissingParameter for none, InvalidMessageContents for characters SQS refuses."""
    if not isinstance(body, str) or body == "":
        raise SqsError("MissingParameter", "The request must contain the parameter MessageBody.")
    bad = _INVALID.search(body)
    if bad:
        raise SqsError.modelled("InvalidMessageContents", f"Invalid binary character '#x{ord(bad.group()):X}' was found "
                                                          "in the message body, the set of allowed characters is #x9 "
                                                          "| #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 "
                                                          "to #x10FFFF")
    return body.encode()


def _binary(value: Any, where: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise invalid_parameter(f"The message attribute '{where}' has a BinaryValue that is not base64.") from None


def check_attributes(attributes: Any, kind: str = "message attribute") -> dict[str, dict[str, Any]]:
    """Message attributes as stored: ``{name: {"DataType", "StringValue" | "BinaryValue" (bytes)}}``.
    InvalidParameterValue naming the attribute and the rule it breaks."""
    if not attributes:
        return {}
    if not isinstance(attributes, dict):
        raise invalid_parameter("MessageAttributes must be a map of names to attribute values.")
    if len(attributes) > MAX_ATTRIBUTES:
        raise invalid_parameter(f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum "
                                f"[{MAX_ATTRIBUTES}].")
    checked: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name.startswith(".") or name.endswith(".") \
                or ".." in name or name.lower().startswith(("aws.", "amazon.")):
            raise invalid_parameter(f"The {kind} name '{str(name)[:100]}' is invalid: names are 1-256 letters, digits, "
                                    "'_', '-' and '.', with no leading, trailing or doubled '.', and do not start "
                                    "with 'AWS.' or 'Amazon.'.")
        if not isinstance(value, dict):
            raise invalid_parameter(f"The {kind} '{name}' must have a DataType and a value.")
        dtype = value.get("DataType")
        if not isinstance(dtype, str) or not dtype:
            raise SqsError("MissingParameter", f"The {kind} '{name}' must contain a non-empty attribute type.")
        match = _TYPE.fullmatch(dtype)
        if not match or len(dtype) > MAX_ATTRIBUTE_NAME or _INVALID.search(dtype):
            raise invalid_parameter(f"The type of {kind} '{name}' is invalid: it must be String, Number or Binary, "
                                    "optionally followed by '.' and a label.")
        if match.group(1) == "Binary":
            if value.get("BinaryValue") in (None, ""):
                raise invalid_parameter(f"The {kind} '{name}' with type 'Binary' must have a BinaryValue.")
            checked[name] = {"DataType": dtype, "BinaryValue": _binary(value["BinaryValue"], name)}
            continue
        text = value.get("StringValue")
        if not isinstance(text, str) or text == "":
            raise invalid_parameter(f"The {kind} '{name}' with type '{match.group(1)}' must have a non-empty "
                                    "StringValue.")
        if _INVALID.search(text):
            raise invalid_parameter(f"The {kind} '{name}' holds a character SQS does not allow.")
        if match.group(1) == "Number":
            _check_number(text, kind, name)
        checked[name] = {"DataType": dtype, "StringValue": text}
    return checked


def _check_number(text: str, kind: str, name: str) -> None:
    """SQS's rule for a Number: at most 38 significant digits, from 10^-128 to 10^126 in size."""
    if not _NUMBER.fullmatch(text.strip()):
        raise invalid_parameter(f"Can't cast the value of {kind} '{name}' to a number.")
    number = Decimal(text.strip())  # exact: no context rounds it
    digits = "".join(map(str, number.as_tuple().digits)).strip("0")
    if digits and (len(digits) > MAX_NUMBER_DIGITS
                   or not MIN_NUMBER_EXPONENT <= number.adjusted() <= MAX_NUMBER_EXPONENT):
        raise invalid_parameter(f"The value of {kind} '{name}' is not a number SQS takes: at most "
                                f"{MAX_NUMBER_DIGITS} significant digits, from 10^{MIN_NUMBER_EXPONENT} to "
                                f"10^{MAX_NUMBER_EXPONENT}.")


def attributes_md5(attributes: dict[str, dict[str, Any]]) -> Optional[str]:
    """MD5OfMessageAttributes (and of system attributes), as SQS computes it: per attribute in name
    order, the name, the type, a transport byte (1 string, 2 binary) and the value, each length-prefixed."""
    if not attributes:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        for part in (name.encode(), value["DataType"].encode()):
            digest.update(struct.pack(">I", len(part)) + part)
        if "BinaryValue" in value:
            data, transport = value["BinaryValue"], b"\x02"
        else:
            data, transport = value["StringValue"].encode(), b"\x01"
        digest.update(transport + struct.pack(">I", len(data)) + data)
    return digest.hexdigest()


def body_md5(body: bytes) -> str:
    return hashlib.md5(body, usedforsecurity=False).hexdigest()


def encode_attributes(attributes: dict[str, dict[str, Any]]) -> str:
    """The ``Sqs-Message-Attributes`` header value (printable ASCII: a NATS header value)."""
    stored = {name: ({"DataType": v["DataType"], "BinaryValue": base64.b64encode(v["BinaryValue"]).decode()}
                     if "BinaryValue" in v else v) for name, v in attributes.items()}
    return json.dumps(stored, separators=(",", ":"), ensure_ascii=True)


def decode_attributes(header: Optional[str]) -> dict[str, dict[str, Any]]:
    """The attributes a stored message carries (none if the header is missing or not ours). The
    header is checked by the rules of a send (``check_attributes``): a NATS client can write one
    that no send would (a type or text JSON escapes into a lone surrogate), and its MD5 then failed
    every receive that drew the message."""
    if not header:
        return {}
    try:
        return check_attributes(parse_json(header))
    except (SqsError, ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        return {}


def selected(attributes: dict[str, dict[str, Any]], names: Optional[list[Any]]) -> dict[str, dict[str, Any]]:
    """The attributes a ReceiveMessage asked for: ``All`` or ``.*``, exact names, and ``prefix.*``."""
    if not names or not attributes:
        return {}
    asked = [str(n) for n in names]
    if "All" in asked or ".*" in asked:
        return dict(attributes)
    prefixes = tuple(n[:-1] for n in asked if n.endswith(".*"))
    return {k: v for k, v in attributes.items() if k in asked or (prefixes and k.startswith(prefixes))}


def message_id(headers: dict[str, str], queue_id: str, enclave_id: int) -> str:
    """The MessageId: the one the SQS send gave it, else one derived from the queue and the message's
    Enclave id (a message sent by a NATS client has the same id at every receive)."""
    given = headers.get(MESSAGE_ID_HEADER)
    if given:
        return given
    return str(uuid.UUID(bytes=hashlib.sha256(f"{queue_id}:{enclave_id}".encode()).digest()[:16], version=4))


def body_text(data: bytes) -> tuple[str, bool]:
    """A stored body as an SQS Body: its text, or (for bytes that are not UTF-8, from a NATS client)
    their base64 and True."""
    try:
        return data.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), True
