"""The HTTP server's connections are bounded (server/connections.py): one that sends no whole
request head in time is closed, and past MAX_CONNECTIONS a new one is closed at once, so idle
sockets can no longer use up the process's descriptors nor pin memory, and the API answers."""

import asyncio
import socket
from urllib.parse import urlparse

import httpx

from enclave_queue.server import connections


def _open(url: str, first: bytes = b"") -> socket.socket:
    parsed = urlparse(url)
    sock = socket.create_connection((parsed.hostname, parsed.port), timeout=5)
    if first:
        sock.sendall(first)
    return sock


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


async def test_a_connection_that_sends_no_whole_head_in_time_is_closed(runtime, monkeypatch):
    monkeypatch.setattr(connections, "HEAD_TIMEOUT", 0.5)
    silent = _open(runtime.api_url)
    trickle = _open(runtime.api_url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa")
    try:
        assert await asyncio.to_thread(_closed_by_server, silent, 5)
        assert await asyncio.to_thread(_closed_by_server, trickle, 5)
        async with httpx.AsyncClient(base_url=runtime.api_url) as http:  # a keep-alive client: served
            for _ in range(3):
                assert (await http.get("/healthz")).status_code == 200
                await asyncio.sleep(0.2)
    finally:
        silent.close()
        trickle.close()


async def test_connections_past_the_bound_are_closed_at_once_and_the_api_answers(runtime, monkeypatch):
    monkeypatch.setattr(connections, "MAX_CONNECTIONS", 20)
    held = [_open(runtime.api_url) for _ in range(20)]
    try:
        await asyncio.sleep(0.3)
        extra = _open(runtime.api_url)
        assert await asyncio.to_thread(_closed_by_server, extra, 5)
        extra.close()
        for sock in held[:5]:
            sock.close()
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient(base_url=runtime.api_url) as http:
            assert (await http.get("/healthz")).status_code == 200
    finally:
        for sock in held:
            sock.close()


async def test_a_refused_connection_leaves_nothing_in_the_log(runtime, monkeypatch, caplog):
    monkeypatch.setattr(connections, "MAX_CONNECTIONS", 2)
    held = [_open(runtime.api_url) for _ in range(2)]
    try:
        await asyncio.sleep(0.2)
        extra = [_open(runtime.api_url) for _ in range(5)]
        for sock in extra:
            assert await asyncio.to_thread(_closed_by_server, sock, 5)
            sock.close()
        await asyncio.sleep(0.2)
    finally:
        for sock in held:
            sock.close()
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING") and "callback" in r.getMessage()]
    assert not [r for r in caplog.records if r.exc_info]
