"""The three actions that connect beyond this machine, each for real: a model pull (a fake
hub), a remote provider's answer (a fake OpenAI server) and an HTTP MCP server (the test
server). With the lock on, pointed at a TEST-NET address, each is refused at once with the
lock's words and nothing else changes; with the lock off, pointed at loopback servers, each
is in the ledger with its part and action."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.engine.mcp.conftest import http_server, manager  # noqa: F401 - fixtures
from tests.engine.network.conftest import entries
from tests.engine.providers.fakeserver import FakeServer
from tests.fakehub import FakeHub, use_fake_hub
from wren.engine.events import Failed
from wren.engine.network import ledger
from wren.engine.network.lock import OfflineLocked
from wren.engine.network.purpose import Part, acting
from wren.engine.tools.mcp_config import server_from_entry

pytestmark = pytest.mark.timeout(180)
FAR = "192.0.2.1"  # TEST-NET-1: never routed
LOCK_WORDS = "Wren's offline lock is on"


def _only_refusals_to_far(part: str) -> None:
    found = entries()
    assert found, "the refusal is recorded"
    assert all((e.outcome, e.host, e.part) == ("refused", FAR, part) for e in found), found


# -- a model pull ------------------------------------------------------------------------------

def test_locked_a_model_pull_is_refused_by_name_and_nothing_is_fetched_or_made(locked, tmp_path, monkeypatch):
    from wren.engine.modelhub import ModelRegistry, pull

    monkeypatch.setenv("HF_ENDPOINT", f"http://{FAR}:9")
    registry = ModelRegistry(tmp_path / "models")
    with pytest.raises(OfflineLocked) as refused:
        pull.resolve("acme/tiny-GGUF")
    said = str(refused.value)
    assert LOCK_WORDS in said and f"refused to connect to {FAR}:9" in said
    assert "model download: model pull of acme/tiny-GGUF" in said
    assert list((tmp_path / "models").iterdir()) == [] and registry.list() == []
    _only_refusals_to_far("model download")


def test_unlocked_a_model_pull_is_in_the_ledger_as_a_model_download(guarded, tmp_path, monkeypatch):
    from wren.engine.errors import WrenError
    from wren.engine.modelhub import ModelRegistry, pull

    with FakeHub() as hub:
        use_fake_hub(hub, monkeypatch, tmp_path / "hf-home")
        hub.add_file("acme/junk-GGUF", "junk.Q8_0.gguf", b"not a gguf" * 1000)
        plan = pull.resolve("acme/junk-GGUF:junk.Q8_0.gguf")
        with pytest.raises(WrenError):  # its header is checked after the first bytes, and refused
            pull.pull(ModelRegistry(tmp_path / "models"), plan)
        port = int(hub.url.rsplit(":", 1)[1])
    connects = [e for e in entries() if e.kind == "connect"]
    assert len(connects) >= 2  # the model's listing, then the file's first bytes
    assert {(e.part, e.action, e.host, e.port, e.loopback) for e in connects} == {
        ("model download", "model pull of acme/junk-GGUF", "127.0.0.1", port, True)}


# -- a remote provider -------------------------------------------------------------------------

async def _answer(engine, model: str) -> list:
    await engine.models.load(model)
    conv = await engine.conversations.create()
    return [e async for e in engine.chat.send(conv.id, "What is up?")]


def test_locked_a_remote_providers_answer_fails_saying_the_lock_refused_it(locked, make_engine):
    async def main():
        engine = make_engine("a local answer")
        await engine.providers.add("far", f"http://{FAR}:9/v1", models=("chat",), allow_http=True, discover=False)
        try:
            events = await _answer(engine, "far/chat")
            providers = [p.name for p in await engine.providers.list()]
        finally:
            await engine.close()
        return events, providers

    events, providers = asyncio.run(main())
    [failed] = [e for e in events if isinstance(e, Failed)]
    assert failed.error.startswith(LOCK_WORDS) and f"refused to connect to {FAR}:9" in failed.error
    assert "remote provider: an answer from the remote model far/chat" in failed.error
    assert providers == ["far"]  # the provider and its settings stay as they were
    _only_refusals_to_far("remote provider")
    # refused once each, at once: reading its model list on load, then the answer (no retries of a refusal)
    assert [e.action for e in entries()] == ["loading the remote model far/chat",
                                              "an answer from the remote model far/chat"]


def test_unlocked_a_remote_providers_answer_is_in_the_ledger_with_its_bytes(guarded, make_engine):
    server = FakeServer().start()
    port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])

    async def main():
        engine = make_engine("a local answer")
        # its context window given: no model listing first, so the answer opens the connection
        await engine.providers.add("fake", server.base_url, models=("fake-chat",), context_length=4096)
        try:
            return await _answer(engine, "fake/fake-chat")
        finally:
            await engine.close()

    try:
        events = asyncio.run(main())
    finally:
        server.stop()
    assert not [e for e in events if isinstance(e, Failed)]
    remote = [e for e in entries() if e.kind == "connect" and e.port == port]
    assert remote and {(e.part, e.action, e.loopback) for e in remote} == {
        ("remote provider", "an answer from the remote model fake/fake-chat", True)}
    assert all(e.sent and e.received for e in remote)  # the request went out, the answer came back
    assert "What is up?" not in (entries_text := repr(entries())) and "Hello" not in entries_text


def test_unlocked_an_attempt_beyond_loopback_is_recorded_before_it_connects(guarded):
    with acting(Part.REMOTE_PROVIDER, "an answer from the remote model far/chat"), pytest.raises(OSError):
        socket.create_connection((FAR, 9), timeout=0.3)  # unreachable or timed out: never answered
    [attempt] = [e for e in entries() if e.kind == "connect"]
    assert (attempt.host, attempt.port, attempt.loopback, attempt.outcome) == (FAR, 9, False, "allowed")
    assert attempt.part == "remote provider" and not attempt.received


# -- an MCP server over HTTP -------------------------------------------------------------------

def test_locked_an_http_mcp_server_is_refused_by_name_and_stays_configured(locked, manager):  # noqa: F811
    asyncio.run(manager.add(server_from_entry("far", {"url": f"http://{FAR}:9/mcp"})))
    content, is_error = asyncio.run(manager.call("far__add", {"a": 1, "b": 2}))
    assert is_error and LOCK_WORDS in content and f"refused to connect to {FAR}:9" in content
    assert "MCP server: MCP server 'far'" in content
    assert list(manager.configs()) == ["far"]
    _only_refusals_to_far("MCP server")


@pytest.mark.slow
def test_unlocked_an_http_mcp_server_is_in_the_ledger(guarded, manager, http_server):  # noqa: F811
    ledger.clear()  # the fixture's own check that the server listens
    asyncio.run(manager.add(server_from_entry("web", {"url": http_server})))
    assert asyncio.run(manager.call("web__add", {"a": 20, "b": 22})) == ("42.0", False)
    port = int(http_server.split(":")[2].split("/")[0])
    mcp = [e for e in entries() if e.kind == "connect" and e.port == port]
    assert mcp and {(e.part, e.action, e.loopback) for e in mcp} == {("MCP server", "MCP server 'web'", True)}


def test_unlocked_a_provider_request_no_caller_named_is_still_the_remote_providers(guarded):
    from wren.engine.inference.backends.remote import OpenAIClient

    server = FakeServer().start()

    async def main():  # what `wren providers test` does first
        client = OpenAIClient(server.base_url)
        try:
            return await client.list_models()
        finally:
            await client.aclose()

    try:
        asyncio.run(main())
    finally:
        server.stop()
    [entry] = [e for e in entries() if e.kind == "connect"]
    assert (entry.part, entry.action) == ("remote provider", f"a request to {server.base_url}/models")
