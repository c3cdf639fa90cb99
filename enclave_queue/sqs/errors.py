"""SQS's own errors, as AWS names them, and the one mapping from Enclave's error tree onto them.

An ``SqsError`` carries what both wire protocols need: the query protocol's code
(``AWS.SimpleQueueService.NonExistentQueue``), the JSON protocol's shape name (``QueueDoesNotExist``,
sent as ``__type`` with the query code in ``x-amzn-query-error``, which is how every current SDK
maps it back onto its modelled exception), the HTTP status and whether the sender is at fault.
protocol.py renders it; actions.py raises it, or lets ``from_enclave`` translate an EnclaveError.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors

from ..errors import (
    BrokerUnavailable,
    Conflict,
    EnclaveError,
    Forbidden,
    MessageTooLarge,
    NotFound,
    QueueFull,
    SpecError,
    StorageFull,
    Timeout,
    Unauthorized,
)

#: what a broker that does not answer raises inside an action
BROKER_ERRORS = (TimeoutError, nats.errors.Error, nats.js.errors.Error)

#: the JSON ``__type`` prefix of SQS's modelled errors, and of the errors every AWS service shares
SQS_NAMESPACE = "com.amazonaws.sqs#"
COMMON_NAMESPACE = "com.amazon.coral.service#"

#: modelled errors: shape name (the JSON ``__type``) -> the query protocol's code
MODELLED = {
    "QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue",
    "QueueNameExists": "QueueAlreadyExists",
    "QueueDeletedRecently": "AWS.SimpleQueueService.QueueDeletedRecently",
    "PurgeQueueInProgress": "AWS.SimpleQueueService.PurgeQueueInProgress",
    "BatchEntryIdsNotDistinct": "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "EmptyBatchRequest": "AWS.SimpleQueueService.EmptyBatchRequest",
    "InvalidBatchEntryId": "AWS.SimpleQueueService.InvalidBatchEntryId",
    "TooManyEntriesInBatchRequest": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "BatchRequestTooLong": "AWS.SimpleQueueService.BatchRequestTooLong",
    "MessageNotInflight": "AWS.SimpleQueueService.MessageNotInflight",
    "UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
    "ReceiptHandleIsInvalid": "ReceiptHandleIsInvalid",
    "InvalidAttributeName": "InvalidAttributeName",
    "InvalidAttributeValue": "InvalidAttributeValue",
    "InvalidMessageContents": "InvalidMessageContents",
    "InvalidIdFormat": "InvalidIdFormat",
    "OverLimit": "OverLimit",
    "ResourceNotFoundException": "ResourceNotFoundException",
    "RequestThrottled": "RequestThrottled",
    "InvalidAddress": "InvalidAddress",
    "InvalidSecurity": "InvalidSecurity",
}


class SqsError(Exception):
    """An error answered the way SQS answers it. ``code`` is the name the SDKs show (the query
    code: boto3's ``Error.Code``); ``shape`` the modelled exception, if the error is one."""

    def __init__(self, code: str, message: str, status: int = 400, *, sender: bool = True,
                 shape: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.sender = sender
        self.shape = shape

    @classmethod
    def modelled(cls, shape: str, message: str, status: int = 400) -> SqsError:
        return cls(MODELLED[shape], message, status, shape=shape)

    @property
    def json_type(self) -> str:
        """The JSON protocol's ``__type``."""
        return f"{SQS_NAMESPACE}{self.shape}" if self.shape else f"{COMMON_NAMESPACE}{self.code}"

    @property
    def fault(self) -> str:
        return "Sender" if self.sender else "Receiver"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def invalid_parameter(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing_parameter(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def invalid_attribute_value(name: str, rule: str, got: object) -> SqsError:
    return SqsError.modelled("InvalidAttributeValue", f"Invalid value for the parameter {name}: it must be {rule} "
                                                      f"(got {got!r}).")


def invalid_attribute_name(name: str, kind: str = "attribute") -> SqsError:
    return SqsError.modelled("InvalidAttributeName", f"Unknown {kind} {name}.")


def queue_missing(project: str, name: str) -> SqsError:
    return SqsError.modelled("QueueDoesNotExist", f"The specified queue does not exist: queue '{name}' in project "
                                                  f"'{project}'.")


def access_denied(message: str) -> SqsError:
    return SqsError("AccessDenied", message, 403)


def from_enclave(exc: EnclaveError) -> SqsError:
    """The SQS error for one of Enclave's (its sentence kept as the message)."""
    message = exc.message
    if isinstance(exc, NotFound):
        return SqsError.modelled("QueueDoesNotExist", message)
    if isinstance(exc, SpecError) and message.startswith("dead_letter_queue "):  # Enclave's name for it
        return invalid_parameter("Value for parameter RedrivePolicy is invalid. Reason: its deadLetterTargetArn "
                                 + message.removeprefix("dead_letter_queue "))
    if isinstance(exc, (SpecError, MessageTooLarge)):
        return invalid_parameter(message)
    if isinstance(exc, (QueueFull, StorageFull)):  # not to be retried as it is: a 403, as SQS's limits
        return SqsError.modelled("OverLimit", message, 403)
    if isinstance(exc, Conflict):  # a name still being deleted, a queue not ready yet, a DLQ in use
        if "still being deleted" in message:
            return SqsError.modelled("QueueDeletedRecently", message)
        return SqsError("ServiceUnavailable", message, 503, sender=False) if "not ready yet" in message \
            else invalid_parameter(message)
    if isinstance(exc, (Unauthorized, Forbidden)):
        return access_denied(message)
    if isinstance(exc, (BrokerUnavailable, Timeout)):
        return SqsError("ServiceUnavailable", message, 503, sender=False)
    return SqsError("InternalFailure", message, 500, sender=False)
