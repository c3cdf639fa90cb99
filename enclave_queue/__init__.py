"""Enclave Queues: managed queues over NATS JetStream.

Apps use the data-plane SDK (``connect``); operators and tools use the admin client of the
HTTP API (``AdminClient``); every error is one of ``errors.py``'s.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import (
    BrokerUnavailable,
    Conflict,
    EnclaveError,
    Forbidden,
    MaybeStored,
    MessageTooLarge,
    NotFound,
    PermissionDenied,
    QueueFull,
    SpecError,
    StorageFull,
    Timeout,
    Unauthorized,
)

if TYPE_CHECKING:
    from .admin import AdminClient
    from .client import Credentials, Message, Queue, SyncMessage, SyncQueue, connect, connect_sync
    from .spec import QueueSpec

#: imported when first used, so that a tool needing one part (the CLI, the OpenTofu provider)
#: does not pay for loading the others (nats-py, httpx, pydantic)
_LAZY = {"AdminClient": ".admin", "QueueSpec": ".spec",
         **dict.fromkeys(["Credentials", "Message", "Queue", "SyncMessage", "SyncQueue", "connect", "connect_sync"],
                         ".client")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AdminClient",
    "BrokerUnavailable",
    "Conflict",
    "Credentials",
    "EnclaveError",
    "Forbidden",
    "MaybeStored",
    "Message",
    "MessageTooLarge",
    "NotFound",
    "PermissionDenied",
    "Queue",
    "QueueFull",
    "QueueSpec",
    "SpecError",
    "StorageFull",
    "SyncMessage",
    "SyncQueue",
    "Timeout",
    "Unauthorized",
    "connect",
    "connect_sync",
]
