"""What password logins may cost the control plane (the auth callout's checks), bounded.

A password check is a bcrypt hash, about 4 ms of CPU at BCRYPT_COST. Measured before these
bounds: 200 logins at once with one queue's username and wrong passwords made another queue's
logins wait 1–1.5 s, and refused some of them; a password over bcrypt's 72 bytes logged a
traceback per login. So:

- a login that cannot be one of Enclave's (a username or password not of the form Enclave
  makes: ``new_account_id``, ``generate_password``) is refused with no check;
- the current password is compared with its sealed copy in the store (accounts.py
  ``_is_current``: an AES-GCM open, no hash), always: a flood of wrong passwords for a username,
  which is the queue's id and no secret, once kept the right one out;
- the hash checks of the passwords still in a rotation's grace are limited to FAILS failed ones a
  username each FAIL_WINDOW seconds; past that those logins are refused unchecked until the
  window has passed;
- a password that logged in lately is known by its SHA-256 and passes with no hash check while
  its version still logs in, so an app whose username is being flooded still gets in. The
  passwords are 256 random bits, so the digest is no easier to turn back than a bcrypt hash;
  it is kept in memory only.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from typing import Optional

#: what ``new_account_id`` and ``generate_password`` make
USERNAME_FORM = re.compile(r"q[a-z2-7]{16}")
PASSWORD_FORM = re.compile(r"[A-Za-z0-9_-]{43}")
FAILS = 10  #: failed checks a username may cost each FAIL_WINDOW
FAIL_WINDOW = 1.0  #: seconds
KNOWN_PER_USER = 4  #: passwords remembered a username (a rotation's grace has two, or a few more)
KNOWN_USERS = 20_000  #: usernames remembered, the least recent forgotten first


def _digest(password: str) -> bytes:
    return hashlib.sha256(password.encode()).digest()


class Logins:
    """The bounds above, for one control process (on a cluster each node keeps its own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._fails: dict[str, deque[float]] = {}
        self._known: OrderedDict[str, dict[bytes, int]] = OrderedDict()

    @staticmethod
    def well_formed(username: str, password: str) -> bool:
        return bool(USERNAME_FORM.fullmatch(username) and PASSWORD_FORM.fullmatch(password))

    def known(self, username: str, password: str, live: Collection[int]) -> Optional[int]:
        """The version ``password`` logged in as lately, if that version still logs in."""
        version = self._known.get(username, {}).get(_digest(password))
        return version if version is not None and version in live else None

    def throttled(self, username: str) -> bool:
        """Whether ``username`` has used up its failed checks for now."""
        fails = self._fails.get(username)
        if not fails:
            return False
        while fails and fails[0] <= self._clock() - FAIL_WINDOW:
            fails.popleft()
        if not fails:
            del self._fails[username]
        return len(fails) >= FAILS

    def checked(self, username: str, password: str, version: Optional[int]) -> None:
        """Record a hash check's outcome: a failure counts, a success is remembered."""
        if version is None:
            self._fails.setdefault(username, deque()).append(self._clock())
            return
        known = self._known.pop(username, {})
        known[_digest(password)] = version
        while len(known) > KNOWN_PER_USER:
            del known[next(iter(known))]
        self._known[username] = known
        while len(self._known) > KNOWN_USERS:
            self._known.popitem(last=False)
