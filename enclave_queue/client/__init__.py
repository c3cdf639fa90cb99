"""The data-plane SDK. ``async with await connect(creds) as queue`` — see queue.py for what each
verb does on the broker, and sync.py for the blocking wrapper."""

from .credentials import Credentials
from .inspecting import DeadLetter
from .message import Message, PeekedMessage
from .queue import Queue, connect
from .sync import SyncMessage, SyncQueue, connect_sync

__all__ = ["Credentials", "DeadLetter", "Message", "PeekedMessage", "Queue", "SyncMessage", "SyncQueue", "connect",
           "connect_sync"]
