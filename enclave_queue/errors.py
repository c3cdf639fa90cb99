"""The one error tree of Enclave Queues, rendered three ways.

Every layer raises these; the HTTP API turns them into JSON problems, the CLI into
``error: <sentence>`` on stderr and an exit code, and the SDK raises them as they are::

    EnclaveError                 (base; HTTP 500 / exit 1)
      + SpecError                -> HTTP 422 / exit 2   a setting out of range, a bad name
      + NotFound                 -> HTTP 404 / exit 4   no such queue, secret or message
      + Conflict                 -> HTTP 409 / exit 5   a taken name, a queue still in use
      |   + QueueFull            -> HTTP 409 / exit 8   the queue holds max_messages or max_bytes already
      + Unauthorized             -> HTTP 401 / exit 7   missing or wrong API token
      + Forbidden                -> HTTP 403 / exit 7   the token may not do this
      + PermissionDenied         -> (SDK)     exit 7    the broker refused this queue user
      + MessageTooLarge          -> HTTP 413 / exit 2   a body over max_message_bytes
      + StorageFull              -> HTTP 507 / exit 9   no room in the broker's store (reservations, a full disk)
      + BrokerUnavailable        -> HTTP 503 / exit 3   the broker cannot be reached
      |   + MaybeStored          -> (SDK)     exit 3    a put unconfirmed: it may have been stored
      + Timeout                  -> HTTP 504 / exit 6   waited too long for a state

``QueueFull`` is a 409 (the queue's current state refuses the message; consuming or raising
``max_messages`` resolves it), not a 5xx: nothing is wrong with the server, and clients and
proxies retry 5xx answers on their own, which a full queue must not invite. A client tells it
from a plain ``Conflict`` by the problem's title.

Messages are one sentence that names the object, for example
``Queue 'emails' does not exist in project 'default'.`` A SpecError about one field is built by
``field_error``, which gives the sentence and the field's entry in ``errors`` alike.
"""

from __future__ import annotations

from typing import Any, Optional


class EnclaveError(Exception):
    """Base of every error the project raises on purpose."""

    status: int = 500
    exit_code: int = 1
    title: str = "Internal error"

    def __init__(self, message: str, *, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: per-field details for SpecError: [{"field": ..., "message": ...}]
        self.errors = errors or []

    def __str__(self) -> str:
        return self.message


class SpecError(EnclaveError):
    status, exit_code, title = 422, 2, "Invalid specification"


def field_error(field: str, message: str, sentence: Optional[str] = None) -> SpecError:
    """The SpecError of one bad field: ``errors`` names it with ``message`` ("must be an integer
    from 1 to 100 (got 0)"), and the sentence is ``<field> <message>.`` unless ``sentence`` says
    it otherwise."""
    return SpecError(sentence or f"{field} {message}.", errors=[{"field": field, "message": message}])


def out_of_range(field: str, rule: str, got: str) -> SpecError:
    """The SpecError of a field whose value breaks its ``rule``: ``<field> must be <rule> (got
    <got>).`` (``got``: the value as the sentence shows it, e.g. its repr)."""
    return field_error(field, f"must be {rule} (got {got})")


class NotFound(EnclaveError):
    status, exit_code, title = 404, 4, "Not found"


class Conflict(EnclaveError):
    status, exit_code, title = 409, 5, "Conflict"


class QueueFull(Conflict):
    """The queue already holds ``max_messages``; the broker refused the message (not retried)."""

    status, exit_code, title = 409, 8, "Queue full"


class Unauthorized(EnclaveError):
    status, exit_code, title = 401, 7, "Unauthorized"


class Forbidden(EnclaveError):
    status, exit_code, title = 403, 7, "Forbidden"


class PermissionDenied(EnclaveError):
    """The broker refused an operation for this queue's user (a permissions violation)."""

    status, exit_code, title = 403, 7, "Permission denied"


class MessageTooLarge(EnclaveError):
    status, exit_code, title = 413, 2, "Message too large"


class StorageFull(EnclaveError):
    """The broker's store cannot take this: a queue whose max_bytes does not fit in what the
    other queues and the control state leave unreserved, a message put while the broker's disk is
    full (``publish_refused``), or ``enclave up`` on a filesystem without room to start."""

    status, exit_code, title = 507, 9, "Insufficient storage"


class BrokerUnavailable(EnclaveError):
    status, exit_code, title = 503, 3, "Broker unavailable"


class Timeout(EnclaveError):
    status, exit_code, title = 504, 6, "Timeout"


#: errors that share a status with another, told apart by their problem's title
BY_TITLE: dict[str, type[EnclaveError]] = {cls.title: cls for cls in (QueueFull,)}

#: every concrete error by its HTTP status, so a client can rebuild the right class
BY_STATUS: dict[int, type[EnclaveError]] = {
    cls.status: cls
    for cls in (SpecError, NotFound, Conflict, Unauthorized, Forbidden, MessageTooLarge, StorageFull, BrokerUnavailable,
                Timeout)
}


def from_problem(status: int, problem: dict[str, Any]) -> EnclaveError:
    """Rebuild an EnclaveError from an HTTP JSON problem (the inverse of api/problems.py)."""
    cls = BY_TITLE.get(str(problem.get("title")))
    if cls is None or cls.status != status:
        cls = BY_STATUS.get(status, EnclaveError)
    detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
    return cls(detail, errors=problem.get("errors"))


#: err_codes of a publish the broker refused (nats-server 2.15.1)
TOO_LARGE = 10054  #: over the stream's max_msg_size
QUEUE_FULL = 10077  #: the stream is at max_msgs (discard new)
ACCOUNT_FULL = 10002  #: the queue's account is at its JetStream max_file (the queue's max_bytes)
SCHEDULES_DISABLED = 10188  #: a delayed message to a stream without allow_msg_schedules (a queue with max_messages)

#: the rule of a put's delay (envelope.check_delay), here so that the CLI, which may import only
#: errors and spec of the shared modules, says it as the API does
MAX_DELAY = 7 * 86400  #: seconds a put may be delayed
DELAY_RULE = f"a number of seconds from 0 to {MAX_DELAY} (7 days)"
#: the broker's store is out of room: JetStream's "insufficient resources" (its store past
#: max_file_store), which the control plane also answers for the broker while its disk is full
#: (broker/storage.py: the broker itself sends no answer at all to a publish it failed to write)
INSUFFICIENT_RESOURCES = 10023
STORAGE_EXCEEDED = 10047  #: "insufficient storage resources available" (the store's reservations)


def publish_refused(error: dict[str, Any], queue: str, max_messages: Optional[int] = None,
                    max_bytes: Optional[int] = None) -> EnclaveError:
    """The error for a PubAck's ``error``, wherever a message is published into a queue (SDK,
    messages by hand, redrive, the dead-letter mover). ``queue`` names it in the sentence
    (``'emails' in project 'shop'``); ``max_messages``, when known, is said with QueueFull."""
    code, description = error.get("err_code"), error.get("description")
    if code in (INSUFFICIENT_RESOURCES, STORAGE_EXCEEDED) or "no space left" in str(description):
        return StorageFull(f"The broker's disk is full; the message to queue {queue} was not stored. Puts are "
                           "taken again by themselves once space is freed on it.")
    if code == TOO_LARGE:
        return MessageTooLarge(f"The message is larger than queue {queue} accepts (max_message_bytes).")
    if code == QUEUE_FULL:
        limit = "max_messages" if max_messages is None else f"max_messages {max_messages}"
        return QueueFull(f"Queue {queue} is full ({limit}); the message was not stored.")
    if code == ACCOUNT_FULL:
        limit = "max_bytes" if max_bytes is None else f"max_bytes {max_bytes}"
        return QueueFull(f"Queue {queue} is full ({limit}: the bytes it stores); the message was not stored.")
    if code == SCHEDULES_DISABLED:
        rule = "must be 0 on a queue with max_messages (a limit that refuses new messages rules out delays)"
        return field_error("delay_s", rule, f"delay_s {rule}: queue {queue} has one; the message was not stored.")
    return EnclaveError(f"The broker refused the message to queue {queue}: {description}.")


class MaybeStored(BrokerUnavailable):
    """A put the broker never confirmed, though it may have stored it (the connection was lost, or
    no answer came in time). ``dedupe_key`` is the key it was sent with (the caller's, or one the
    SDK made): putting it again with that key, within the queue's dedupe window, cannot store it twice."""

    def __init__(self, message: str, *, dedupe_key: Optional[str] = None) -> None:
        super().__init__(message)
        self.dedupe_key = dedupe_key
