"""Every queue's stream and consumers in a few requests: the broker's server-wide JSZ, page by page.

The depth sampler and the reconciler's resync used to ask the broker about each queue in turn (an
account JSZ a queue; STREAM.INFO and CONSUMER.INFO through that account's pooled connection), so
their idle cost grew with the queues. ``$SYS.REQ.SERVER.PING.JSZ`` with account, stream, consumer
and config detail answers for PAGE accounts at once (DESIGN.md: 302 accounts in 18 ms). A queue
the snapshot does not show (created since, or on a cluster held by another server, whose answer
came second) is read on its own by the caller, as before.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ..broker.connection import REQUEST_TIMEOUT, BrokerConnection, leaders_view
from ..errors import BrokerUnavailable
from ..names import stream_name

PAGE = 256  #: accounts one JSZ answer carries (the server's own default limit is 1024)
QUERY = {"accounts": True, "streams": True, "consumer": True, "config": True}


class Snapshot:
    """The broker's JetStream state of every account, as one moment's JSZ answers showed it."""

    def __init__(self, conn: BrokerConnection, accounts: dict[str, dict[str, Any]]) -> None:
        self.conn = conn
        self.accounts = accounts  #: account public key -> its JSZ account detail

    @classmethod
    async def read(cls, conn: BrokerConnection) -> Snapshot:
        """Every account's detail, PAGE at a time; BrokerUnavailable if the broker does not answer."""
        # on a cluster every server answers with its own view, in its own order: each account as
        # its leaders see it, from every page of every server
        views: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        offset = 0
        while True:
            body = json.dumps({**QUERY, "offset": offset, "limit": PAGE}).encode()
            try:
                answers = await conn.system_gather("$SYS.REQ.SERVER.PING.JSZ", body, timeout=REQUEST_TIMEOUT)
            except Exception as exc:
                raise BrokerUnavailable(f"The broker did not answer JSZ: {exc!r}") from exc
            if answers[0].get("error"):
                raise BrokerUnavailable(f"The broker refused JSZ: {answers[0]['error']}")
            longest, known = 0, len(views)
            for answer in answers:
                page = (answer.get("data") or {}).get("account_details") or []
                longest = max(longest, len(page))
                server = str((answer.get("server") or {}).get("name") or "")
                for account in page:  # "id" is the account's public key ("name" its JWT's name)
                    views.setdefault(account.get("id") or account.get("name"), []).append((server, account))
            if longest < PAGE or len(views) == known:  # the last page, or a server ignoring offset
                return cls(conn, {key: leaders_view(seen) for key, seen in views.items()})
            offset += PAGE

    def stream(self, queue_id: str) -> Optional[dict[str, Any]]:
        """The queue's stream as JSZ shows it (``config``, ``state``, ``consumer_detail``), or None."""
        account = self.accounts.get(self.conn.account_key(queue_id))
        for stream in (account or {}).get("stream_detail") or []:
            if stream.get("name") == stream_name(queue_id):
                return stream
        return None

    async def account_jsz(self, queue_id: str) -> dict[str, Any]:
        """``BrokerConnection.account_jsz`` answered from the snapshot, or asked if it lacks the queue."""
        stream = self.stream(queue_id)
        if stream is None or not stream.get("consumer_detail"):
            return await self.conn.account_jsz(queue_id)
        return {"stream_detail": [stream]}
