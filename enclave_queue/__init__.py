"""Enclave Queues: managed queues over NATS JetStream.

Apps use the data-plane SDK (``connect``); operators and tools use the admin client of the
HTTP API (``AdminClient``); every error is one of ``errors.py``'s.
"""

from .admin import AdminClient
from .client import Credentials, Message, Queue, SyncMessage, SyncQueue, connect, connect_sync
from .errors import (
    BrokerUnavailable,
    Conflict,
    EnclaveError,
    Forbidden,
    MessageTooLarge,
    NotFound,
    PermissionDenied,
    SpecError,
    Timeout,
    Unauthorized,
)
from .spec import QueueSpec

__all__ = [
    "AdminClient",
    "BrokerUnavailable",
    "Conflict",
    "Credentials",
    "EnclaveError",
    "Forbidden",
    "Message",
    "MessageTooLarge",
    "NotFound",
    "PermissionDenied",
    "Queue",
    "QueueSpec",
    "SpecError",
    "SyncMessage",
    "SyncQueue",
    "Timeout",
    "Unauthorized",
    "connect",
    "connect_sync",
]
