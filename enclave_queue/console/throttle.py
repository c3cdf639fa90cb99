"""The sign-in limit: at most ``MAX_FAILURES`` failed sign-ins per client address in
``WINDOW`` seconds; beyond that, sign-in answers 429 with ``Retry-After`` until the oldest
failure is out of the window, without looking at the token.

Pure and in memory (a restart forgets it, like the sessions). An IPv6 client counts by its
/64 network, which one host can fill at will; at most ``MAX_ADDRESSES`` addresses are
remembered, the least recently failing forgotten first, so no one can grow it without limit.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_FAILURES = 10  #: failed sign-ins allowed per address within WINDOW
WINDOW = 60.0  #: seconds
MAX_ADDRESSES = 10_000  #: addresses remembered at once


def address_key(host: str) -> str:
    """What a client is counted by: its IPv4 address, its IPv6 /64 network, or the text as given."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host[:64]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class FailureLimiter:
    """Failed attempts per key in a sliding window."""

    def __init__(self, max_failures: int = MAX_FAILURES, window: float = WINDOW,
                 max_keys: int = MAX_ADDRESSES, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window = window
        self.max_keys = max_keys
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def _recent(self, key: str) -> deque[float]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        horizon = self._clock() - self.window
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def retry_after(self, key: str) -> float:
        """0 if ``key`` may try now, else the seconds until it may."""
        times = self._recent(key)
        if len(times) < self.max_failures:
            return 0.0
        return max(times[0] + self.window - self._clock(), 0.001)

    def failed(self, key: str) -> None:
        times = self._recent(key)
        if not times:
            times = self._failures[key] = deque(maxlen=self.max_failures)
        times.append(self._clock())
        self._failures.move_to_end(key)
        while len(self._failures) > self.max_keys:
            self._failures.popitem(last=False)

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)
