"""One-time notices a console form leaves for the page it redirects to (post, redirect, get): a
password rotation's version and until when the old password logs in, shown once by the queue's
Credentials tab; a queue created or its settings saved (its Settings tab); a queue deleted (the
queues page). A reload of that page neither posts the form again nor shows the notice twice, and
no link can make a page show one (they were query parameters once: any link could plant "Queue
'…' is being deleted." with any text).

Pure and in memory, like the sessions (web/sessions.py): a notice is kept per session and page,
never holds a secret (the page's script fetches the new password through the API, with the CSRF
header), and at most ``MAX_NOTICES`` are kept, the oldest forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Optional

MAX_NOTICES = 10_000  #: notices kept at once (one a session and page)


class Notices:
    """The notice waiting for each (session, page)."""

    def __init__(self, max_notices: int = MAX_NOTICES) -> None:
        self.max_notices = max_notices
        self._waiting: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()

    def leave(self, session_id: str, page: str, notice: dict[str, Any]) -> None:
        """Keep ``notice`` for the next view of ``page`` in the session (replacing an older one)."""
        key = (session_id, page)
        self._waiting.pop(key, None)
        self._waiting[key] = notice
        while len(self._waiting) > self.max_notices:
            self._waiting.popitem(last=False)

    def take(self, session_id: str, page: str) -> Optional[dict[str, Any]]:
        """The notice left for ``page`` in the session, once; None if there is none."""
        return self._waiting.pop((session_id, page), None)
