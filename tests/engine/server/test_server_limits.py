"""Big requests cannot take the server down: the body limit is enforced while the body
arrives (Content-Length first, a running count for chunked bodies), a prompt far longer
than the model's context is refused before it is scanned or tokenized, and the event loop
keeps answering other requests meanwhile. Real uvicorn on a free port, raw sockets."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time

import httpx
import pytest

from wren.engine.server.app import ServerOptions
from wren.engine.server.body import DEFAULT_MAX_BODY

MB = 1024 * 1024


def run(coro):
    return asyncio.run(coro)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The process's largest resident size while the block runs, sampled every 5 ms."""

    def __enter__(self):
        self.base = self.peak = _rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.base


def _head(port: int, key: str, extra: str) -> bytes:
    return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\n{extra}\r\n").encode()


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        part = sock.recv(65536)
        if not part:
            break
        data += part
    return data


def _port(s) -> int:
    return int(s.url.rsplit(":", 1)[1])


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_declared_length_over_the_limit_is_a_413_before_any_body_is_read(serving):
    def declare(port: int, key: str) -> tuple[bytes, float]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            started = time.monotonic()
            sock.sendall(_head(port, key, f"Content-Length: {50 * MB}\r\n"))  # and not one byte of it
            return _answer(sock), time.monotonic() - started

    async def main():
        async with serving() as s:
            return await asyncio.to_thread(declare, _port(s), s.key)

    answer, took = run(main())
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == "request_too_large" and f"{DEFAULT_MAX_BODY:,}" in error["message"]
    assert took < 2


def test_a_chunked_body_is_cut_off_at_the_limit_with_memory_bounded(serving):
    chunk = b"a" * (256 * 1024)
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"

    def upload(port: int, key: str) -> tuple[bytes, int]:
        sent = 0
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_head(port, key, "Transfer-Encoding: chunked\r\n") + b'5\r\n{"pro\r\n')
            try:
                while sent < 50 * MB:
                    sock.sendall(frame)
                    sent += len(chunk)
            except OSError:  # the server answered and closed: the rest is not wanted
                pass
            else:
                sock.sendall(b"0\r\n\r\n")
            return _answer(sock), sent

    async def main():
        async with serving(options=ServerOptions(max_body=4 * MB)) as s:
            with PeakRss() as rss:
                answer, sent = await asyncio.to_thread(upload, _port(s), s.key)
            return answer, sent, rss.growth

    answer, sent, growth = run(main())
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"4,194,304 bytes" in answer
    assert sent < 25 * MB  # refused long before the client's 50 MB were through (socket buffers hold some)
    assert growth < 40 * MB, f"the server grew by {growth / MB:.0f} MB"


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_an_overlong_prompt_is_refused_before_tokenizing_while_the_loop_answers_others(serving):
    prompt = "The quick brown fox jumps over the lazy dog. " * (6 * MB // 45)  # 6 MB: under the body limit

    async def main():
        async with serving() as s, httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=15) as c:
            big = asyncio.ensure_future(c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 4}))
            chat = asyncio.ensure_future(c.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": prompt[: 2 * MB]}]}))
            waits = []
            while not (big.done() and chat.done()):
                started = time.monotonic()
                listed = await c.get("/v1/models")
                assert listed.status_code == 200
                waits.append(time.monotonic() - started)
                await asyncio.sleep(0.02)
            return await big, await chat, waits, s.engine.scripted.loaded[0].prompts

    big, chat, waits, prompts = run(main())
    for answer, param in ((big, "prompt"), (chat, "messages")):
        assert answer.status_code == 400, answer.text[:300]
        error = answer.json()["error"]
        assert error["param"] == param and error["code"] == "context_length_exceeded"
        assert "4,096 tokens" in error["message"]
    assert prompts == []  # nothing reached the model
    assert max(waits) < 0.5, f"GET /v1/models waited {max(waits):.2f} s"


def test_the_body_limit_is_configurable_and_small_bodies_still_pass(serving):
    async def main():
        async with (serving("ok", options=ServerOptions(max_body=64 * 1024)) as s,
                    httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=15) as c):
            over = await c.post("/v1/completions", json={"prompt": "x" * 70_000})
            fine = await c.post("/v1/completions", json={"prompt": "hello", "max_tokens": 4})
            return over, fine

    over, fine = run(main())
    assert over.status_code == 413 and "65,536 bytes" in over.json()["error"]["message"]
    assert fine.status_code == 200


def test_the_limits_are_set_on_the_command_line_and_nonsense_is_refused(monkeypatch, capsys):
    from wren.engine.terminal.main import main
    from wren.engine.terminal.serve import _size

    assert (_size("8M"), _size("512k"), _size("1048576"), _size("2MB")) == (8 * MB, 512 * 1024, MB, 2 * MB)
    monkeypatch.setenv("WREN_API_KEY", "e" * 32)
    with pytest.raises(SystemExit):
        main(["serve", "--max-body", "lots"])
    assert "invalid size value: 'lots'" in capsys.readouterr().err
    assert main(["serve", "--max-body", "100"]) == 2
    assert "at least 1024 bytes" in capsys.readouterr().err
    assert main(["serve", "--write-timeout", "0"]) == 2
    assert "write timeout must be a positive number" in capsys.readouterr().err


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_big_prompt_within_the_bound_is_tokenized_off_the_loop(serving):
    """A guard, not a fix: a 1M-character prompt (under the character bound of a 32k-token
    model) is scanned and tokenized on worker threads, so GET /v1/models answers at once
    meanwhile; the prompt then gets the token-count 400."""
    prompt = "The quick brown fox jumps over the lazy dog. " * (1_000_000 // 45)

    async def main():
        async with (serving("ok", context_length=32768) as s,
                    httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=60) as c):
            big = asyncio.ensure_future(c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2}))
            waits = []
            while not big.done():
                started = time.monotonic()
                assert (await c.get("/v1/models")).status_code == 200
                waits.append(time.monotonic() - started)
                await asyncio.sleep(0.02)
            return await big, waits

    big, waits = run(main())
    assert big.status_code == 400 and big.json()["error"]["code"] == "context_length_exceeded"
    assert "tokens" in big.json()["error"]["message"] and len(waits) > 5
    assert max(waits) < 0.5, f"GET /v1/models waited {max(waits):.2f} s"
