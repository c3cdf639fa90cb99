"""Queue attributes: SQS's names and ranges onto Enclave's settings and back, as pure functions.

=================================  ==========================================  =====================================
SQS attribute                      Enclave                                     differs from AWS
=================================  ==========================================  =====================================
VisibilityTimeout 0–43200          visibility_timeout_seconds 1–43200          0 refused: a lease is at least 1 s
MessageRetentionPeriod 60–1209600  retention_hours 1–336                       rounded up to whole hours
MaximumMessageSize 1024–1048576    max_message_bytes                           the same
RedrivePolicy                      dead_letter_queue + max_receives 1–1000     the DLQ is in the same project
DelaySeconds 0–900                 the SQS record (a send's default delay)
ReceiveMessageWaitTimeSeconds 0–20 the SQS record (a receive's default wait)
=================================  ==========================================  =====================================

A queue's ARN is ``arn:aws:sqs:<region>:<project>:<name>`` and its URL ``<endpoint>/<project>/<name>``:
the project stands where AWS has the account id. FIFO queues are refused (``FifoQueue`` true, a
``.fifo`` name, the FIFO-only attributes); so are attributes Enclave would accept without honouring
(``Policy``, KMS keys, server-side encryption).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Optional
from urllib.parse import urlsplit

from ..envelope import parse_json, whole_number
from ..spec import LIMITS, NAME_RULE, PROJECT_PATTERN, QUEUE_NAME_PATTERN
from .errors import SqsError, invalid_attribute_name, invalid_attribute_value, invalid_parameter, queue_missing

MAX_DELAY_SECONDS = 900
MAX_WAIT_SECONDS = 20
MAX_RECEIVE_COUNT = 1000

#: settable attributes and their SQS ranges (RedrivePolicy, FifoQueue and SqsManagedSseEnabled apart)
RANGES: dict[str, tuple[int, int]] = {
    "VisibilityTimeout": (0, 43200),
    "MessageRetentionPeriod": (60, 1209600),
    "MaximumMessageSize": (1024, 1048576),
    "DelaySeconds": (0, MAX_DELAY_SECONDS),
    "ReceiveMessageWaitTimeSeconds": (0, MAX_WAIT_SECONDS),
}
SETTABLE = frozenset({*RANGES, "RedrivePolicy", "FifoQueue", "SqsManagedSseEnabled"})
#: what GetQueueAttributes answers besides the settable ones
READ_ONLY = frozenset({"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                       "ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"})
DEPTH = {"ApproximateNumberOfMessages": "waiting", "ApproximateNumberOfMessagesNotVisible": "in_flight",
         "ApproximateNumberOfMessagesDelayed": "delayed"}
#: AWS's attributes Enclave does not honour: refused when set, left out when read
UNSUPPORTED = frozenset({"Policy", "RedriveAllowPolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"})
#: attributes of FIFO queues only: unknown on a standard queue, as AWS answers
FIFO_ONLY = frozenset({"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"})
KNOWN = SETTABLE | READ_ONLY | UNSUPPORTED | FIFO_ONLY

FIFO_REFUSED = ("FIFO queues are not supported: Enclave queues are standard queues (at-least-once, best-effort "
                "order)")
NAME_REFUSAL = f"Enclave queue names are {NAME_RULE} (AWS also allows capitals, '_' and up to 80 characters)"


def arn(region: str, project: str, name: str) -> str:
    return f"arn:aws:sqs:{region}:{project}:{name}"


def parse_arn(text: Any, field: str) -> tuple[str, str]:
    """(project, name) of a queue ARN; InvalidParameterValue naming ``field`` if it is none."""
    parts = text.split(":") if isinstance(text, str) else []
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not parts[4] or not parts[5]:
        raise invalid_parameter(f"Value {str(text)[:100]!r} for parameter {field} is invalid. Reason: it must be a "
                                "queue ARN, arn:aws:sqs:<region>:<project>:<queue name>.")
    return parts[4], parts[5]


def queue_url(base: str, project: str, name: str) -> str:
    return f"{base}/{project}/{name}"


def parse_queue_url(url: Any) -> tuple[str, str]:
    """(project, name) of a queue URL (any host: the last two path segments); QueueDoesNotExist for
    a URL that names no queue Enclave could have."""
    if not isinstance(url, str) or not url:
        raise invalid_parameter("Value for parameter QueueUrl is invalid. Reason: it must be the queue's URL.")
    path = urlsplit(url).path if "://" in url else url
    segments = [s for s in path.split("/") if s]
    if len(segments) < 2:
        raise invalid_parameter(f"Value {url[:200]!r} for parameter QueueUrl is invalid. Reason: a queue URL ends in "
                                "/<project>/<queue name>.")
    project, name = segments[-2], segments[-1]
    check_names(project, name)
    return project, name


def check_names(project: str, name: str) -> None:
    """QueueDoesNotExist for a project or queue name that no queue can have."""
    if not (PROJECT_PATTERN.fullmatch(project) and QUEUE_NAME_PATTERN.fullmatch(name)):
        raise queue_missing(project[:64], name[:100])


def check_new_name(name: Any) -> str:
    """A CreateQueue's QueueName, if Enclave can make a queue of it; InvalidParameterValue otherwise."""
    if not isinstance(name, str) or not name:
        raise SqsError("MissingParameter", "The request must contain the parameter QueueName.")
    if name.endswith(".fifo"):
        raise invalid_parameter(f"Can not create queue {name[:100]!r}: {FIFO_REFUSED}.")
    if not QUEUE_NAME_PATTERN.fullmatch(name):
        raise invalid_parameter(f"Can not create queue {name[:100]!r}: {NAME_REFUSAL}.")
    return name


def _integer(name: str, value: Any) -> int:
    low, high = RANGES[name]
    number = whole_number(value)
    if number is None or not low <= number <= high:
        raise invalid_attribute_value(name, f"an integer from {low} to {high}", value)
    return number


def _flag(name: str, value: Any) -> bool:
    text = str(value).lower()
    if text not in ("true", "false"):
        raise invalid_attribute_value(name, "true or false", value)
    return text == "true"


def parse_redrive_policy(value: Any, project: str, name: str) -> tuple[Optional[str], int]:
    """(dead_letter_queue, max_receives) of a RedrivePolicy; an empty one removes both."""
    if value in ("", "{}"):
        return None, 0
    try:
        policy = parse_json(value) if isinstance(value, str) else None
    except ValueError:
        policy = None
    rule = ('a JSON object {"deadLetterTargetArn": "<queue ARN>", "maxReceiveCount": 1-1000}')
    if not isinstance(policy, dict) or "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
        raise invalid_attribute_value("RedrivePolicy", rule, value)
    count = policy["maxReceiveCount"]
    receives = whole_number(count)
    if receives is None or not 1 <= receives <= MAX_RECEIVE_COUNT:
        raise invalid_attribute_value("RedrivePolicy", f"{rule}: maxReceiveCount must be from 1 to "
                                      f"{MAX_RECEIVE_COUNT}", count)
    dlq_project, dlq = parse_arn(policy["deadLetterTargetArn"], "RedrivePolicy.deadLetterTargetArn")
    if dlq_project != project:
        raise invalid_parameter(f"Value for parameter RedrivePolicy is invalid. Reason: the dead-letter queue must be in "
                                f"the queue's own project '{project}', not '{dlq_project[:64]}'.")
    if dlq == name:
        raise invalid_parameter("Value for parameter RedrivePolicy is invalid. Reason: a queue cannot be its own "
                                "dead-letter queue.")
    return dlq, receives


def parse_attributes(attributes: Any, project: str, name: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The Enclave settings (QueueSpec / QueuePatch fields) and the SQS-only fields (SqsQueueRecord)
    that ``attributes`` sets. InvalidAttributeName for a name SQS does not know (or that cannot be
    set), InvalidAttributeValue for a value out of its range."""
    if attributes is None:
        return {}, {}
    if not isinstance(attributes, dict):
        raise invalid_parameter("Attributes must be a map of attribute names to values.")
    spec: dict[str, Any] = {}
    own: dict[str, int] = {}
    for key, value in attributes.items():
        if key not in KNOWN or key in FIFO_ONLY:
            raise invalid_attribute_name(key, "Attribute")
        if key in READ_ONLY:
            raise invalid_attribute_name(key, "settable attribute (it is read-only)")
        if key in UNSUPPORTED:
            raise invalid_attribute_value(key, "left out: Enclave does not support it", value)
        if key == "FifoQueue":
            if _flag(key, value):
                raise invalid_attribute_value(key, f"false: {FIFO_REFUSED}", value)
        elif key == "SqsManagedSseEnabled":
            if _flag(key, value):
                raise invalid_attribute_value(key, "false: Enclave does not encrypt messages at rest", value)
        elif key == "VisibilityTimeout":
            seconds = _integer(key, value)
            if seconds < LIMITS["visibility_timeout_seconds"][0]:
                raise invalid_attribute_value(key, "an integer from 1 to 43200 on Enclave (a lease is at least 1 s)",
                                              value)
            spec["visibility_timeout_seconds"] = seconds
        elif key == "MessageRetentionPeriod":
            spec["retention_hours"] = math.ceil(_integer(key, value) / 3600)
        elif key == "MaximumMessageSize":
            spec["max_message_bytes"] = _integer(key, value)
        elif key == "DelaySeconds":
            own["delay_seconds"] = _integer(key, value)
        elif key == "ReceiveMessageWaitTimeSeconds":
            own["receive_wait_seconds"] = _integer(key, value)
        elif key == "RedrivePolicy":
            spec["dead_letter_queue"], spec["max_receives"] = parse_redrive_policy(value, project, name)
    return spec, own


def wanted(names: Optional[Iterable[Any]]) -> set[str]:
    """The attribute names a GetQueueAttributes asks for (``All``: every one); InvalidAttributeName
    for a name SQS does not know."""
    asked = set()
    for name in names or ():
        if name == "All":
            return set(SETTABLE | READ_ONLY)
        if not isinstance(name, str) or name not in KNOWN:
            raise invalid_attribute_name(str(name)[:100], "Attribute")
        asked.add(name)
    return asked


def _epoch_seconds(when: datetime) -> str:
    return str(int(when.timestamp()))


def queue_attributes(names: set[str], *, queue: Any, created_at: datetime, modified_at: datetime, region: str,
                     delay_seconds: int, receive_wait_seconds: int, depth: Optional[dict[str, Any]]) -> dict[str, str]:
    """The attributes ``names`` of a queue (``queue``: the service's view of it; ``depth``: its
    waiting / in_flight / delayed counts, when asked for)."""
    values: dict[str, str] = {
        "VisibilityTimeout": str(queue.visibility_timeout_seconds),
        "MessageRetentionPeriod": str(queue.retention_hours * 3600),
        "MaximumMessageSize": str(queue.max_message_bytes),
        "DelaySeconds": str(delay_seconds),
        "ReceiveMessageWaitTimeSeconds": str(receive_wait_seconds),
        "QueueArn": arn(region, queue.project, queue.name),
        "CreatedTimestamp": _epoch_seconds(created_at),
        "LastModifiedTimestamp": _epoch_seconds(modified_at),
        "SqsManagedSseEnabled": "false",
    }
    if queue.dead_letter_queue and queue.max_receives:
        values["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": arn(region, queue.project, queue.dead_letter_queue),
                                              "maxReceiveCount": queue.max_receives}, separators=(",", ":"))
    if depth is not None:
        values.update({name: str(depth[field]) for name, field in DEPTH.items()})
    return {name: values[name] for name in sorted(names) if name in values}


def differing(given: dict[str, Any], own: dict[str, int], queue: Any, record_own: dict[str, int]) -> Optional[str]:
    """The first attribute whose value in a repeated CreateQueue differs from the queue's, if any."""
    names = {"visibility_timeout_seconds": "VisibilityTimeout", "retention_hours": "MessageRetentionPeriod",
             "max_message_bytes": "MaximumMessageSize", "dead_letter_queue": "RedrivePolicy",
             "max_receives": "RedrivePolicy"}
    for field, value in given.items():
        if getattr(queue, field) != value:
            return names.get(field, field)
    for field, value in own.items():
        if record_own.get(field, 0) != value:
            return {"delay_seconds": "DelaySeconds", "receive_wait_seconds": "ReceiveMessageWaitTimeSeconds"}[field]
    return None
