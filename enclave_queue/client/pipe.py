"""Many publishes to one subject with one reply subject, written into the connection's outgoing
buffer a chunk at a time instead of one ``nc.publish`` each: the pipelined ``send_batch``
(batching.py) on a broker that syncs on an interval, where the client's CPU sets the pace.

It writes the bytes ``nc.publish`` writes and makes its checks, into nats-py's own buffer
(``_pending``, ``_pending_data_size``, ``_flush_pending``), so a chunk handed over while the
connection is down waits for the reconnect as a published message does. nats-py has no way to
publish many at once; these internals are nats-py 2.16.0's (pyproject pins it), and
tests/integration/test_pipe.py checks the bytes against what ``nc.publish`` writes.
"""

from __future__ import annotations

import re
from typing import Optional

import nats.errors
from nats.aio.client import Client

PIPE_CHUNK = 200  #: messages handed to the connection's writer at a time
PIPE_CHUNK_BYTES = 64 * 1024  #: bytes of commands that hand a chunk over before PIPE_CHUNK messages


class Pipe:
    """Publishes to one subject with one reply subject: ``add`` each message, ``flush`` when
    ``full`` and before waiting on their replies.

    ``nc.publish`` checks both subjects, builds the command (and its header block) and looks at the
    writer for every message: about 2 µs of the 9–10 the pipelined send_batch spent on a 256-byte
    message on the 2-core machine of docs/benchmarks.md, nats-py's handling of the PubAck being
    most of the rest. Here the subjects are checked once, a command is one formatting, a header
    block (``envelope.encode`` gives one of a few Content-Types) is built once, and the writer is
    looked at once a chunk."""

    __slots__ = ("_nc", "_pub", "_hpub", "_max_payload", "_blocks", "_chunk", "_size", "_payload")

    def __init__(self, nc: Client, subject: str, reply: str) -> None:
        if not subject or not reply or any(c in subject or c in reply for c in " \t\r\n"):
            raise nats.errors.BadSubjectError  # as nc.publish would, once rather than every message
        self._nc = nc
        self._pub = f"PUB {subject} {reply} ".encode()
        self._hpub = f"HPUB {subject} {reply} ".encode()
        self._max_payload = nc.max_payload
        self._blocks: dict[tuple[tuple[str, str], ...], bytes] = {}  #: header blocks by the headers' items
        self._chunk: list[bytes] = []  #: commands not handed to the connection yet
        self._size = 0  #: their bytes
        self._payload = 0  #: their bodies' bytes (nats-py's out_bytes)

    def add(self, data: bytes, headers: Optional[dict[str, str]]) -> None:
        """Add one message to the chunk; ``full`` says when to hand it over."""
        if len(data) > self._max_payload:
            raise nats.errors.MaxPayloadError
        if headers is None:
            command = b"%b%d\r\n%b\r\n" % (self._pub, len(data), data)
        else:
            key = tuple(headers.items())
            block = self._blocks.get(key)
            if block is None:
                block = self._blocks[key] = _header_block(headers)
            command = b"%b%d %d\r\n%b%b\r\n" % (self._hpub, len(block), len(block) + len(data), block, data)
        self._chunk.append(command)
        self._size += len(command)
        self._payload += len(data)

    @property
    def full(self) -> bool:
        return len(self._chunk) >= PIPE_CHUNK or self._size >= PIPE_CHUNK_BYTES

    async def flush(self) -> None:
        """Hand the chunk to the connection, as ``nc.publish`` hands each message: refused on a
        closed or draining connection, buffered while it reconnects (up to its pending size), and
        the writer woken unless it is already due to run. It writes once the loop runs."""
        nc = self._nc
        if not self._chunk:
            return
        if nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if nc.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        limit = nc._max_pending_size
        if not nc.is_connected and (limit <= 0 or nc._pending_data_size + self._size > limit):
            raise nats.errors.OutboundBufferLimitError
        nc._pending.extend(self._chunk)
        nc._pending_data_size += self._size
        nc.stats["out_msgs"] += len(self._chunk)
        nc.stats["out_bytes"] += self._payload
        self._chunk, self._size, self._payload = [], 0, 0
        if 0 < limit < nc._pending_data_size:
            await nc._flush_pending(force_flush=True)
        elif nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()


def _header_block(headers: dict[str, str]) -> bytes:
    """A headers dict as nats-py 2.16 writes it on the wire (``Client._send_publish``)."""
    lines = [b"NATS/1.0\r\n"]
    for key, value in headers.items():
        key = key.strip()
        if not key:
            continue
        if not _HEADER_KEY.fullmatch(key):
            raise nats.errors.BadHeaderError(key)
        lines.append(f"{key}: {value.strip().translate(_NEWLINES)}\r\n".encode())
    return b"".join(lines) + b"\r\n"


_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  #: an RFC 7230 token, nats-py's rule for a header name
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})  #: nats-py keeps a header value on one line
