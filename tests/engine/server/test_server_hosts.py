"""The Host check against DNS rebinding: bound to loopback, `wren serve` answers loopback
names only (with any port); `--allow-host` adds names; an address it was bound to is
accepted too. Refusals come before the key check, as a 421 that says what to do."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from wren.engine.server.app import ServerOptions
from wren.engine.server.hosts import HostPolicy, host_name


def run(coro):
    return asyncio.run(coro)


async def _get(s, host: str, *, key: bool = True) -> httpx.Response:
    async with httpx.AsyncClient(base_url=s.url, timeout=15) as c:
        request = c.build_request("GET", "/v1/models", headers=s.headers if key else {})
        request.headers["Host"] = host
        return await c.send(request)


def _without_host(port: int, key: str) -> bytes:
    """An HTTP/1.0 request with no Host header at all, as old command-line tools send."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET /v1/models HTTP/1.0\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        data = b""
        while part := sock.recv(65536):
            data += part
        return data


def test_a_foreign_host_is_refused_and_loopback_names_are_answered(serving):
    good = ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "[::1]:{port}", "127.0.0.2", "app.localhost:{port}"]
    bad = ["evil.example.com", "evil.example.com:{port}", "localhost.evil.example.com", "127.0.0.1.nip.io",
           "192.168.1.20:{port}", "[2001:db8::1]:{port}"]

    async def main():
        async with serving() as s:
            port = s.url.rsplit(":", 1)[1]
            return ([await _get(s, h.format(port=port)) for h in good], [await _get(s, h.format(port=port)) for h in bad],
                    await _get(s, "evil.example.com", key=False), await asyncio.to_thread(_without_host, int(port), s.key))

    good_answers, bad_answers, keyless, hostless = run(main())
    assert hostless.startswith(b"HTTP/1.1 200"), hostless[:100]  # browsers always send Host
    assert [r.status_code for r in good_answers] == [200] * len(good)
    assert [r.status_code for r in bad_answers] == [421] * len(bad)
    error = bad_answers[0].json()["error"]
    assert error["code"] == "invalid_host" and "evil.example.com" in error["message"]
    assert "--allow-host" in error["message"]
    assert keyless.status_code == 421  # before the key: a rebinding page cannot even probe it


def test_allow_host_adds_names_and_a_star_accepts_any(serving):
    async def main():
        async with serving(options=ServerOptions(allow_hosts=("wren.lan",))) as s:
            named = [await _get(s, h) for h in ("wren.lan:8765", "WREN.LAN", "other.lan")]
        async with serving(options=ServerOptions(allow_hosts=("*",))) as s:
            anything = await _get(s, "evil.example.com")
        return named, anything

    named, anything = run(main())
    assert [r.status_code for r in named] == [200, 200, 421]
    assert anything.status_code == 200


@pytest.mark.parametrize(("bound", "host", "accepted"), [
    ("192.168.1.20", "192.168.1.20:8765", True),
    ("192.168.1.20", "localhost:8765", True),
    ("192.168.1.20", "evil.example.com", False),
    ("192.168.1.20", "10.0.0.5", False),
    ("0.0.0.0", "10.0.0.5:8765", True),  # all addresses: any IP literal (rebinding needs a name)
    ("0.0.0.0", "evil.example.com", False),
    ("::", "[fe80::1]:8765", True),
    ("::1", "[::1]:8765", True),
    ("::1", "evil.example.com", False),
])
def test_an_address_the_server_is_bound_to_is_accepted(bound, host, accepted):
    assert HostPolicy(bound).accepts(host) is accepted


def test_host_names_are_read_without_port_or_case():
    assert host_name("LocalHost:8765") == "localhost"
    assert host_name("[::1]:8765") == "::1"
    assert host_name("example.com.") == "example.com"
