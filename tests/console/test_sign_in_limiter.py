"""The pure parts of the console's defences: the sign-in limiter (throttle.py) and who is asking
over what (proxies.py), on a clock and scopes of the test's own."""

from __future__ import annotations

import pytest

from enclave_queue.console.throttle import MAX_FAILURES, WINDOW, FailureLimiter, address_key
from enclave_queue.errors import SpecError
from enclave_queue.web.proxies import TrustedProxies
from enclave_queue.web.sessions import same_token


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_the_limit_is_per_address_and_slides_with_the_window(clock):
    limiter = FailureLimiter(clock=clock)
    for _ in range(MAX_FAILURES - 1):
        limiter.failed("203.0.113.7")
        clock.now += 1
    assert limiter.retry_after("203.0.113.7") == 0
    limiter.failed("203.0.113.7")
    assert limiter.retry_after("203.0.113.7") == pytest.approx(WINDOW - (MAX_FAILURES - 1))
    assert limiter.retry_after("203.0.113.8") == 0  # another address is unaffected
    clock.now += WINDOW - (MAX_FAILURES - 1)  # the first failure leaves the window
    assert limiter.retry_after("203.0.113.7") == 0
    limiter.failed("203.0.113.7")
    assert limiter.retry_after("203.0.113.7") > 0


def test_a_success_clears_the_address(clock):
    limiter = FailureLimiter(clock=clock)
    for _ in range(MAX_FAILURES - 1):
        limiter.failed("198.51.100.1")
    limiter.succeeded("198.51.100.1")
    limiter.failed("198.51.100.1")
    assert limiter.retry_after("198.51.100.1") == 0


def test_it_remembers_a_bounded_number_of_addresses(clock):
    limiter = FailureLimiter(max_keys=100, clock=clock)
    for i in range(20_000):
        limiter.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(limiter) == 100
    clock.now += WINDOW + 1
    limiter.retry_after("10.0.78.31")  # the last one: forgotten once its failures are old
    assert len(limiter) == 99


def test_an_address_blocked_recently_stays_blocked_while_others_come_and_go(clock):
    limiter = FailureLimiter(max_keys=100, clock=clock)
    for _ in range(MAX_FAILURES):
        limiter.failed("192.0.2.1")
    for i in range(50):
        limiter.failed(f"10.0.0.{i}")
    assert limiter.retry_after("192.0.2.1") > 0


@pytest.mark.parametrize(("host", "key"), [
    ("203.0.113.7", "203.0.113.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),  # the same /64: one host can use them all
    ("::ffff:203.0.113.7", "203.0.113.7"),
    ("testclient", "testclient"),
])
def test_addresses_are_counted_by_ipv4_address_or_ipv6_64(host, key):
    assert address_key(host) == key


def scope(peer: str, scheme: str = "http", **headers: str) -> dict:
    raw = [(name.replace("_", "-").lower().encode(), value.encode()) for name, value in headers.items()]
    return {"type": "http", "client": (peer, 40000), "scheme": scheme, "headers": raw}


def test_nothing_is_trusted_by_default():
    proxies = TrustedProxies.from_env({})
    forwarded = scope("127.0.0.1", "https", x_forwarded_proto="https", x_forwarded_for="203.0.113.7")
    assert not proxies.is_https(forwarded)  # the scheme may be a copy of the untrusted header
    assert proxies.client_host(forwarded) == "127.0.0.1"
    assert proxies.is_https(scope("127.0.0.1", "https"))  # TLS of its own


def test_a_trusted_proxy_says_the_scheme_and_the_client():
    proxies = TrustedProxies.parse("127.0.0.1, 10.0.0.0/8, ::1")
    assert proxies.is_https(scope("10.1.2.3", x_forwarded_proto="https"))
    assert not proxies.is_https(scope("10.1.2.3", "https", x_forwarded_proto="http"))
    assert not proxies.is_https(scope("192.0.2.9", x_forwarded_proto="https"))
    assert proxies.is_https(scope("::1", x_forwarded_proto="HTTPS"))
    # each proxy appends the address it saw: the last one not a proxy is the client
    chain = scope("127.0.0.1", x_forwarded_for="198.51.100.1, 203.0.113.7, 10.0.0.5")
    assert proxies.client_host(chain) == "203.0.113.7"
    assert proxies.client_host(scope("192.0.2.9", x_forwarded_for="203.0.113.7")) == "192.0.2.9"


def test_a_bad_trusted_proxies_entry_names_the_variable():
    with pytest.raises(SpecError, match="ENCLAVE_TRUSTED_PROXIES must be a comma-separated list"):
        TrustedProxies.parse("127.0.0.1, localhost")


@pytest.mark.parametrize("given", ["", "ü", "\udcff", "x" * 100])
def test_a_csrf_value_is_compared_without_errors(given):
    assert same_token(given, "abc") is False
    assert same_token("abc", "abc") is True
