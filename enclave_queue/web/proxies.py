"""Who is asking, and over what: the client's address and whether the request came over HTTPS,
honouring ``X-Forwarded-For`` and ``X-Forwarded-Proto`` only from the proxies an operator
trusts.

``ENCLAVE_TRUSTED_PROXIES`` is a comma-separated list of addresses or networks
(``127.0.0.1, 10.0.0.0/8, ::1``); the default is none, so the forwarded headers are ignored.
The console uses the scheme for its cookies' ``Secure`` flag and ``__Host-`` prefix
(cookies.py) and the address for its sign-in limit (console/throttle.py). The app holds one
(``app.state.proxies``: web/plane.py).

This reads the ASGI scope as the server fills it in: ``client`` is the TCP peer and ``scheme``
the transport's. A request that carries ``X-Forwarded-Proto`` is judged by that header and the
peer alone, because an ASGI server may already have copied the header into ``scheme`` (uvicorn
does for loopback peers unless started with ``proxy_headers=False``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

from ..errors import SpecError

ENV = "ENCLAVE_TRUSTED_PROXIES"
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


def _address(text: str) -> Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]:
    try:
        return ipaddress.ip_address(text.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


class TrustedProxies:
    """The proxies whose forwarded headers are believed (none by default)."""

    def __init__(self, networks: Iterable[Network] = ()) -> None:
        self.networks = tuple(networks)

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        """From ``ENCLAVE_TRUSTED_PROXIES``' form; SpecError naming the variable for a bad entry."""
        networks = []
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise SpecError(f"{ENV} must be a comma-separated list of IP addresses or networks "
                                f"(got {entry!r}).") from None
        return cls(networks)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> TrustedProxies:
        return cls.parse((os.environ if env is None else env).get(ENV, ""))

    def trusts(self, host: Optional[str]) -> bool:
        address = _address(host) if host else None
        return address is not None and any(address in network for network in self.networks)

    @staticmethod
    def _header(scope: Mapping[str, Any], name: bytes) -> Optional[str]:
        values = [value.decode("latin-1") for key, value in scope.get("headers", ()) if key == name]
        return ", ".join(values) if values else None

    @staticmethod
    def _peer(scope: Mapping[str, Any]) -> Optional[str]:
        client = scope.get("client")
        return str(client[0]) if client else None

    def is_https(self, scope: Mapping[str, Any]) -> bool:
        """Whether the client's request came over HTTPS: the last ``X-Forwarded-Proto`` when the
        peer is a trusted proxy; otherwise the transport (and never a forwarded header)."""
        forwarded = self._header(scope, b"x-forwarded-proto")
        if forwarded is not None:
            return self.trusts(self._peer(scope)) and forwarded.split(",")[-1].strip().lower() == "https"
        return scope.get("scheme") == "https"

    def client_host(self, scope: Mapping[str, Any]) -> str:
        """The client's address: the peer's, or behind trusted proxies the last address in
        ``X-Forwarded-For`` that is not one of them (each proxy appends the one it saw)."""
        peer = self._peer(scope) or "unknown"
        forwarded = self._header(scope, b"x-forwarded-for")
        if forwarded is None or not self.trusts(peer):
            return peer
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop[:64]
        return hops[0][:64] if hops else peer
