"""A client that stops reading its stream loses its slot after the write timeout: a real
socket (a small receive buffer, never read) against a real server limited to one answer
at a time; once the timeout has passed, the next request gets its answer, not a 429, and
the stalled connection is dropped."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx

from wren.engine.server.app import ServerOptions

LONG = " ".join(f"w{i % 97}" for i in range(8000))


def run(coro):
    return asyncio.run(coro)


def _stall(port: int, key: str) -> socket.socket:
    """A streamed chat completion whose client reads nothing (its buffers fill, the
    server's writes block)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"messages": [{"role": "user", "content": "go"}], "stream": True, "max_tokens": 6000,
                       "logprobs": True, "top_logprobs": 20}).encode()
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def _dropped(sock: socket.socket, within: float) -> bool:
    """Whether the server closed the connection: reading what it had sent ends (EOF or reset)."""
    sock.settimeout(within)
    try:
        while sock.recv(1 << 20):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_a_client_that_stops_reading_loses_its_slot_after_the_write_timeout(serving):
    async def main():
        options = ServerOptions(max_queue=1, write_timeout=1.0)
        async with serving(LONG, context_length=100_000, options=options) as s:
            port = int(s.url.rsplit(":", 1)[1])
            sock = await asyncio.to_thread(_stall, port, s.key)
            try:
                statuses = []
                started = time.monotonic()
                async with httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=30) as c:
                    while time.monotonic() - started < 25:
                        answer = await c.post("/v1/chat/completions", json={
                            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
                        statuses.append(answer.status_code)
                        if answer.status_code == 200:
                            break
                        await asyncio.sleep(0.25)
                freed_after = time.monotonic() - started
                dropped = await asyncio.to_thread(_dropped, sock, 5.0)
                return statuses, freed_after, dropped, s.server.web.limiter.admitted, s.engine.answering()
            finally:
                sock.close()

    statuses, freed_after, dropped, admitted, answering = run(main())
    assert statuses[0] == 429  # the stalled stream holds the only slot at first
    assert statuses[-1] == 200, statuses[-5:]
    assert freed_after < 12
    assert dropped
    assert admitted == 0 and not answering
