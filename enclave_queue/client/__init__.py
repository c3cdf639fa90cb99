"""The data-plane SDK: ``async with connect(creds) as queue``, then ``queue.put``, ``queue.get`` and
``message.ack``; sync.py is the blocking wrapper.

Layers, each importing only those below it: queue.py (the ``Queue`` facade, ``connect``, and what
each verb does on the broker) over sending.py, batching.py, receiving.py and inspecting.py (the
verbs), over message.py (a received message), pulls.py, acks.py and settings.py, over session.py
(the connection; connecting.py opens it), over credentials.py. Of the rest of the package it uses
only names, envelope, errors and spec.
"""

from .credentials import Credentials
from .inspecting import DeadLetter
from .message import Message, PeekedMessage
from .queue import Queue, connect
from .sync import SyncMessage, SyncQueue, connect_sync

__all__ = ["Credentials", "DeadLetter", "Message", "PeekedMessage", "Queue", "SyncMessage", "SyncQueue", "connect",
           "connect_sync"]
