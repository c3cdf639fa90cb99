"""Provenance of dead letters: proof that the control plane, not an app, wrote a letter's
``Enclave-Source-*`` headers, and dedupe ids for the control plane's own copies that no app can
guess.

An app may publish anything to its own queue, headers included, and a queue may be another's
dead-letter queue. So the headers that name where a dead letter came from (and so where a retry
sends it) are trusted only with an ``Enclave-Provenance`` MAC over them, the letter's body and
the dead-letter queue it was stored on, under a key derived from the master key that only the
control process holds. A letter without a valid MAC is read as a plain message: no source, no
receive count, no error; a retry of it needs an explicit destination.

The mover's and the redrive's ``Nats-Msg-Id`` are MACs too: an app that could predict one could
publish it first, and the broker would then drop the real copy as a duplicate while the mover
deleted the original.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping

from .. import envelope
from .secrets import MasterKey

COPY_KINDS = ("dlq", "redrive", "release")  #: the kinds of the control plane's copy ids (``<kind>:<32 hex>``)
COPY_DIGEST = 32  #: hex digits of a copy id's MAC
PURPOSE = "dead-letter-provenance"
VERSION = "v1"
#: the headers a MAC vouches for, in the order they are signed
FIELDS = (envelope.SOURCE_QUEUE, envelope.SOURCE_PROJECT, envelope.SOURCE_SEQUENCE, envelope.RECEIVE_COUNT,
          envelope.FIRST_ENQUEUED, envelope.DEAD_LETTERED_AT, envelope.LAST_ERROR)


class Provenance:
    """Signs the dead letters the mover writes and vouches for them when they are read."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("the provenance key must be at least 32 bytes")
        self._key = key

    def __repr__(self) -> str:
        return "Provenance(<hidden>)"

    @classmethod
    def from_master(cls, master: MasterKey) -> Provenance:
        return cls(master.derive(PURPOSE))

    def _digest(self, *parts: str | bytes) -> bytes:
        text = json.dumps([p if isinstance(p, str) else hashlib.sha256(p).hexdigest() for p in parts])
        return hmac.new(self._key, text.encode(), hashlib.sha256).digest()

    def _mac(self, dlq_id: str, headers: Mapping[str, str], body: bytes) -> str:
        values = [headers.get(name, "") for name in FIELDS]
        digest = self._digest(VERSION, dlq_id, *values, body)
        return f"{VERSION}:{base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"

    def sign(self, dlq_id: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        """``headers`` with the MAC that vouches for their provenance fields on ``dlq_id``'s queue."""
        return {**headers, envelope.PROVENANCE: self._mac(dlq_id, headers, body)}

    def vouched(self, dlq_id: str, headers: Mapping[str, str], body: bytes) -> dict[str, str]:
        """``headers`` as read from ``dlq_id``'s queue: the provenance fields kept only if the MAC
        holds for them, this body and this queue; otherwise dropped (an app wrote them)."""
        given = headers.get(envelope.PROVENANCE, "")
        if given and hmac.compare_digest(given.encode(), self._mac(dlq_id, headers, body).encode()):
            return dict(headers)
        return {k: v for k, v in headers.items() if k not in FIELDS and k != envelope.PROVENANCE}

    def _id(self, kind: str, *parts: str) -> str:
        return f"{kind}:{self._digest(kind, *parts).hex()[:COPY_DIGEST]}"

    def move_id(self, source_id: str, sequence: int) -> str:
        """The ``Nats-Msg-Id`` of the mover's copy of message ``sequence`` of queue ``source_id``."""
        return self._id("dlq", source_id, str(sequence))

    def redrive_id(self, dlq_id: str, sequence: int, headers: Mapping[str, str]) -> str:
        """The ``Nats-Msg-Id`` of a redrive's copy of letter ``sequence`` of dead-letter queue
        ``dlq_id`` (``headers`` as vouched for): a letter the mover wrote is named by where it came
        from, so a replay of it on the dead-letter queue is the same copy; any other by its place."""
        source = headers.get(envelope.SOURCE_SEQUENCE)
        if source:
            origin = (headers.get(envelope.SOURCE_PROJECT, ""), headers.get(envelope.SOURCE_QUEUE, ""), source)
            return self._id("redrive", dlq_id, *origin)
        return self._id("redrive", dlq_id, str(sequence))


    def release_id(self, queue_id: str, sequence: int) -> str:
        """The ``Nats-Msg-Id`` of a release's copy of message ``sequence`` of queue ``queue_id``: two
        releases of one stored message (a cancelled receive's, and another's after its lease ran out)
        store one copy."""
        return self._id("release", queue_id, str(sequence))


def is_copy_id(msg_id: str) -> bool:
    """Whether a ``Nats-Msg-Id`` is one the control plane gave a copy of its own (a dead letter, a
    redriven message), not a dedupe key a sender chose."""
    kind, colon, digest = msg_id.partition(":")
    return bool(colon) and kind in COPY_KINDS and len(digest) == COPY_DIGEST
