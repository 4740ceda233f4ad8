"""The remote client against a fake flaky OpenAI-compatible server on 127.0.0.1: retries
(429 with Retry-After on a fake clock, 503, resets before the first byte), a reset
mid-stream (partial answer kept, never resent), a malformed chunk, a server that never
answers, and the URL rules."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.engine.providers.fakeserver import FakeServer
from wren.engine.inference.backends.remote import (
    OpenAIClient,
    RemoteError,
    RemoteInterrupted,
    RemoteProtocolError,
    RemoteTimeout,
    RemoteTLSError,
    Transport,
    check_base_url,
    retry_after_seconds,
)
from wren.engine.inference.sampling import SamplingParams

PARAMS = SamplingParams(temperature=0.0, max_tokens=50)
CHAT = [{"role": "user", "content": "hi"}]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def time(self) -> float:
        return self.now


@pytest.fixture
def server():
    s = FakeServer().start()
    yield s
    s.stop()


def _client(server, clock: FakeClock | None = None, **kw) -> OpenAIClient:
    clock = clock or FakeClock()
    t = Transport(sleep=clock.sleep, clock=clock.time, jitter=lambda: 0.0, **kw)
    return OpenAIClient(server.base_url, "sk-test", transport=t)


async def _answer(client) -> tuple[str, list]:
    chunks = [c async for c in client.stream_chat("fake-chat", CHAT, PARAMS)]
    return "".join(c.text for c in chunks), chunks


def test_streams_an_answer_with_usage_key_and_idempotency_header(server):
    async def main():
        client = _client(server)
        try:
            return await _answer(client)
        finally:
            await client.aclose()

    text, chunks = asyncio.run(main())
    assert text == "Hello from the remote side."
    assert chunks[-1].prompt_tokens == 11 and chunks[-1].completion_tokens == 5
    (seen,) = server.chats()
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert len(seen.headers["idempotency-key"]) >= 32
    assert seen.body["stream"] is True and seen.body["messages"] == CHAT and seen.body["max_tokens"] == 50


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_429_retry_after_is_honoured_on_the_fake_clock(server):
    server.script = [("status", 429, {"Retry-After": "7"}), ("status", 429, {"Retry-After": "2"})]
    clock = FakeClock()

    async def main():
        client = _client(server, clock)
        try:
            return await _answer(client)
        finally:
            await client.aclose()

    started = time.perf_counter()
    text, _ = asyncio.run(main())
    assert text == "Hello from the remote side."
    assert clock.sleeps == [7.0, 2.0]  # exactly what the server asked, no real waiting
    assert time.perf_counter() - started < 5
    keys = {s.headers["idempotency-key"] for s in server.chats()}
    assert len(server.chats()) == 3 and len(keys) == 1  # the same request, retried


def test_503_and_resets_before_the_first_byte_are_retried_with_backoff(server):
    server.script = [("status", 503, {}), ("reset",), ("reset",)]
    clock = FakeClock()

    async def main():
        client = _client(server, clock, backoff=0.5)
        try:
            return await _answer(client)
        finally:
            await client.aclose()

    text, _ = asyncio.run(main())
    assert text == "Hello from the remote side."
    assert len(server.chats()) == 4
    # jitter 0 gives the lower half of each doubling window: 0.25, 0.5, 1.0
    assert clock.sleeps == [0.25, 0.5, 1.0]


def test_jitter_spreads_the_backoff_within_its_window():
    t = Transport(backoff=1.0, jitter=lambda: 1.0)
    assert t.backoff_for(3, None) == 8.0
    assert Transport(backoff=1.0, jitter=lambda: 0.0).backoff_for(3, None) == 4.0
    assert Transport(max_backoff=5.0, jitter=lambda: 1.0).backoff_for(10, None) == 5.0


def test_retries_give_up_with_the_servers_message(server):
    server.default = ("status", 503, {})

    async def main():
        client = _client(server, retries=2)
        try:
            await _answer(client)
        finally:
            await client.aclose()

    with pytest.raises(RemoteError, match="HTTP 503: fake status 503"):
        asyncio.run(main())
    assert len(server.chats()) == 3


def test_reset_mid_stream_keeps_the_partial_answer_and_sends_nothing_again(server):
    server.script = [("cut", "one two three four five", 2)]
    got: list[str] = []

    async def main():
        client = _client(server)
        try:
            async for chunk in client.stream_chat("fake-chat", CHAT, PARAMS):
                got.append(chunk.text)
        finally:
            await client.aclose()

    with pytest.raises(RemoteInterrupted, match="broke mid-answer"):
        asyncio.run(main())
    assert "".join(got) == "one two "
    assert len(server.chats()) == 1  # never resent


def test_malformed_chunk_is_a_clear_error(server):
    server.script = [("malformed", "alpha beta gamma")]

    async def main():
        client = _client(server)
        try:
            await _answer(client)
        finally:
            await client.aclose()

    with pytest.raises(RemoteProtocolError, match="malformed stream chunk"):
        asyncio.run(main())
    assert len(server.chats()) == 1


@pytest.mark.serial  # a wall-clock bound: runs with the machine to itself (make test)
def test_a_server_that_never_answers_fails_within_the_chunk_timeout(server):
    server.script = [("hang",)]

    async def main():
        client = _client(server, chunk_timeout=0.5)
        try:
            await _answer(client)
        finally:
            await client.aclose()

    started = time.perf_counter()
    with pytest.raises(RemoteTimeout, match="sent nothing for 0.5 s"):
        asyncio.run(main())
    assert time.perf_counter() - started < 3
    assert len(server.chats()) == 1  # a silent server may be working: not resent


def test_refused_connection_is_retried_then_named():
    async def main():
        clock = FakeClock()
        client = OpenAIClient("http://127.0.0.1:9/v1", None,
                              transport=Transport(sleep=clock.sleep, retries=2, jitter=lambda: 0.0))
        try:
            await _answer(client)
        finally:
            await client.aclose()
        return clock

    with pytest.raises(RemoteError, match="could not connect to http://127.0.0.1:9/v1"):
        asyncio.run(main())


def test_certificate_failure_is_named_and_not_retried(tmp_path):
    """A TLS server whose certificate no one trusts: a self-signed one made here."""
    ssl = pytest.importorskip("ssl")
    import datetime
    import socket
    import threading

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            try:
                context.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()

    threading.Thread(target=serve, daemon=True).start()

    async def main():
        client = OpenAIClient(f"https://localhost:{port}/v1", "k", transport=Transport(retries=3))
        try:
            await _answer(client)
        finally:
            await client.aclose()

    try:
        with pytest.raises(RemoteTLSError, match="certificate of https://localhost:.* could not be verified"):
            asyncio.run(main())
    finally:
        listener.close()
    assert len(accepted) == 1


def test_base_url_rules():
    assert check_base_url("https://api.example.com/v1/") == "https://api.example.com/v1"
    assert check_base_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert check_base_url("http://localhost:11434/v1") == "http://localhost:11434/v1"
    assert check_base_url("http://[::1]:8080/v1") == "http://[::1]:8080/v1"
    with pytest.raises(ValueError, match="plain http:// to another machine"):
        check_base_url("http://gpu-box.lan:8000/v1")
    assert check_base_url("http://gpu-box.lan:8000/v1", allow_http=True).startswith("http://gpu-box")
    with pytest.raises(ValueError, match="not an http"):
        check_base_url("ftp://example.com")
    with pytest.raises(ValueError, match="empty"):
        check_base_url("  ")
    # a port out of range, or not a number, is said here (it crashed `providers test` later)
    for url, port in (("http://127.0.0.1:99999/v1", "'99999'"), ("http://127.0.0.1:abc/v1", "'abc'"),
                      ("http://127.0.0.1:0/v1", "0")):
        with pytest.raises(ValueError, match=f"has the port {port}; a port is a whole number from 1 to 65535"):
            check_base_url(url)
    # a password in the URL would be stored, listed and said in errors in plain text
    with pytest.raises(ValueError, match="user name or password") as refused:
        check_base_url("http://alice:s3cretPW@127.0.0.1:8000/v1")
    assert "s3cretPW" not in str(refused.value) and "alice" not in str(refused.value)


def test_retry_after_forms():
    assert retry_after_seconds("12", 0.0) == 12.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", 1445412470.0) == 10.0
    assert retry_after_seconds("soon", 0.0) is None
    assert retry_after_seconds(None, 0.0) is None


def test_models_list_and_context_window(server):
    from wren.engine.inference.backends.remote import context_from_info

    async def main():
        client = _client(server)
        try:
            return await client.list_models()
        finally:
            await client.aclose()

    models = asyncio.run(main())
    assert [m["id"] for m in models] == ["fake-chat"]
    assert context_from_info(models[0]) == 4096
    assert context_from_info({"id": "x", "meta": {"n_ctx_train": 2048}}) == 2048
    assert context_from_info({"id": "x"}) is None


def test_chat_body_sends_what_a_server_reads_and_keeps_the_rest_here():
    from wren.engine.inference.backends.remote import chat_body

    call = [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]
    messages = [{"role": "assistant", "content": "", "tool_calls": call, "id": 7, "meta": {"x": 1}},
                {"role": "tool", "content": "3", "tool_call_id": "c1"}]
    body = chat_body("m", messages, SamplingParams(temperature=0.2, max_tokens=9, stop=("END",), seed=4))
    assert body["messages"] == [{"role": "assistant", "content": "", "tool_calls": call},
                                {"role": "tool", "content": "3", "tool_call_id": "c1"}]
    assert (body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (0.2, 9, ["END"], 4)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
