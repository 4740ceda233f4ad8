"""A remote provider's model answering conversations through the Engine: chosen as
"provider/model", listed beside local models, its context window from the server, the
safety policy's `remote` destination applied before anything leaves (the fake server never
receives the secret), an interrupted stream stored as such, usage counted locally when the
server sends none."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.engine.providers.fakeserver import FakeServer
from wren.engine.errors import WrenError
from wren.engine.events import Delta, Failed, FailureKind, Finished, FinishReason, SafetyNotice, Started, Usage
from wren.engine.records import MessageStatus

SECRET = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1eF3hJ5kL7nP9rS1"


def write_policy(home: Path, text: str) -> None:
    (home / "safety").mkdir(exist_ok=True)
    (home / "safety" / "policy.toml").write_text(text)


@pytest.fixture
def server():
    s = FakeServer().start()
    yield s
    s.stop()


async def collect(stream):
    return [e async for e in stream]


async def _remote_engine(make_engine, server, **provider):
    engine = make_engine("a local answer")
    await engine.providers.add("fake", server.base_url, models=("fake-chat",), **provider)
    return engine


def test_remote_model_answers_a_conversation(make_engine, server):
    async def main():
        engine = await _remote_engine(make_engine, server)
        listed = [m.name for m in await engine.models.list()]
        status = await engine.models.load("fake/fake-chat")
        destination = engine.destination()
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "What is up?"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return listed, status, destination, events, msgs

    listed, status, destination, events, msgs = asyncio.run(main())
    assert "tiny" in listed and "fake/fake-chat" in listed
    assert status.backend == "remote" and status.context_length == 4096  # the server's max_model_len
    assert destination == "remote"
    assert isinstance(events[0], Started) and events[0].backend == "remote"
    text = "".join(e.text for e in events if isinstance(e, Delta))
    assert text == "Hello from the remote side."
    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert (usage.prompt_tokens, usage.completion_tokens) == (11, 5)  # the server's own counts
    assert events[-1].reason is FinishReason.STOP
    assert msgs[-1].content == text and msgs[-1].status is MessageStatus.COMPLETE
    (chat,) = server.chats()
    assert chat.body["model"] == "fake-chat"
    assert chat.body["messages"][-1] == {"role": "user", "content": "What is up?"}
    assert "authorization" not in chat.headers  # a provider without a key sends none


def test_a_secret_is_redacted_before_it_leaves(make_engine, server, wren_home):
    write_policy(wren_home, '[actions]\n"secret.openai_key" = { local = "allow", remote = "redact" }\n')

    async def main():
        engine = await _remote_engine(make_engine, server)
        conv = await engine.conversations.create()
        # Said to the local model, where the policy allows it: kept as typed.
        await collect(engine.chat.send(conv.id, f"remember {SECRET} please"))
        await engine.models.load("fake/fake-chat")
        events = await collect(engine.chat.send(conv.id, f"and this one {SECRET} too"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = asyncio.run(main())
    assert any(isinstance(e, SafetyNotice) for e in events)
    assert SECRET in msgs[0].content  # the local turn kept it
    (chat,) = server.chats()
    sent = str(chat.body)
    assert SECRET not in sent  # neither the new message nor the history carried it out
    assert "[REDACTED:secret.openai_key]" in sent
    assert sent.count("[REDACTED:secret.openai_key]") == 2


def test_a_blocked_secret_sends_nothing(make_engine, server, wren_home):
    write_policy(wren_home, '[actions]\n"secret.openai_key" = { local = "allow", remote = "block" }\n')

    async def main():
        engine = await _remote_engine(make_engine, server)
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, f"my key {SECRET}"))
        await engine.close()
        return events

    events = asyncio.run(main())
    assert events[-1] == Finished(FinishReason.BLOCKED)
    assert server.chats() == []


def test_reset_mid_stream_stores_the_partial_answer_interrupted(make_engine, server):
    server.script = [("cut", "one two three four five", 3)]

    async def main():
        engine = await _remote_engine(make_engine, server)
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "count"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = asyncio.run(main())
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "one two three "
    (failed,) = [e for e in events if isinstance(e, Failed)]
    assert "broke mid-answer" in failed.error and "not sent again" in failed.error
    assert failed.kind is FailureKind.INTERRUPTED
    answer = msgs[-1]
    assert answer.content == "one two three " and answer.status is MessageStatus.INTERRUPTED
    assert "partial answer is kept" in answer.error
    assert len(server.chats()) == 1


def test_usage_is_counted_locally_when_the_server_sends_none(make_engine, server):
    server.default = ("no-usage", "alpha beta gamma delta")

    async def main():
        engine = await _remote_engine(make_engine, server)
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "words"))
        expected = await engine.models.count_tokens("alpha beta gamma delta")
        title = await engine.chat.generate_title(conv.id)
        await engine.close()
        return events, expected, title

    events, expected, title = asyncio.run(main())
    (usage,) = [e for e in events if isinstance(e, Usage)]
    assert usage.completion_tokens == expected > 0 and usage.prompt_tokens > 5
    assert title == "alpha beta gamma delta"  # side requests go to the remote model as chats too
    assert len(server.chats()) == 2


def test_stop_cancels_a_remote_answer(make_engine, server):
    server.script = [("hang",)]

    async def main():
        engine = await _remote_engine(make_engine, server)
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        events = []
        async for event in engine.chat.send(conv.id, "wait"):
            events.append(event)
            if isinstance(event, Started):
                asyncio.get_running_loop().call_later(0.2, engine.chat.stop)
        await engine.close()
        return events

    events = asyncio.run(asyncio.wait_for(main(), 20))
    assert events[-1].reason is FinishReason.CANCELLED


def test_setting_context_length_wins_and_unknown_provider_is_local(make_engine, server):
    from wren.engine.errors import ModelNotFound

    async def main():
        engine = await _remote_engine(make_engine, server, context_length=2000)
        status = await engine.models.load("fake/fake-chat")
        with pytest.raises(ModelNotFound):
            await engine.models.load("nobody/fake-chat")
        await engine.close()
        return status

    assert asyncio.run(main()).context_length == 2000


def test_provider_crud_and_bad_input(make_engine, server):
    from wren.engine.errors import InvalidRequest, NotFound

    async def main():
        engine = make_engine()
        with pytest.raises(InvalidRequest, match="plain http:// to another machine"):
            await engine.providers.add("far", "http://10.1.2.3:8000/v1", discover=False)
        with pytest.raises(InvalidRequest, match="provider name"):
            await engine.providers.add("bad name", server.base_url, discover=False)
        found = await engine.providers.add("disc", server.base_url)  # models from GET /models
        check = await engine.providers.test("disc")
        listed = await engine.providers.list()
        await engine.providers.remove("disc")
        with pytest.raises(NotFound):
            await engine.providers.remove("disc")
        left = await engine.providers.list()
        await engine.close()
        return found, check, listed, left

    found, check, listed, left = asyncio.run(main())
    assert found.models == ("fake-chat",) and found.key_store == "none"
    assert check.models == ("fake-chat",) and check.answered == "Hello from the remote side."
    assert [p.name for p in listed] == ["disc"] and left == []


def test_a_server_refusing_the_answer_is_a_clear_failure(make_engine, server):
    """An error status before any text (a key revoked since the model was chosen): the answer
    fails with the server's words and the chat goes on; nothing half-written is kept."""
    server.script = [("status", 401, {})]

    async def main():
        engine = await _remote_engine(make_engine, server)
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "hello"))
        again = await collect(engine.chat.send(conv.id, "hello again"))
        await engine.close()
        return events, again

    events, again = asyncio.run(asyncio.wait_for(main(), 60))  # it hung before: no Finished came
    (failed,) = [e for e in events if isinstance(e, Failed)]
    assert "refused the key (HTTP 401)" in failed.error and "adding the provider again under its name" in failed.error
    assert failed.kind is not FailureKind.INTERRUPTED  # nothing was under way
    assert events[-1].reason is FinishReason.ERROR
    assert "".join(e.text for e in again if isinstance(e, Delta)) == "Hello from the remote side."


def test_add_and_test_ask_a_server_that_is_down_once_more_not_four_times(make_engine):
    """Add's model discovery and Test are questions the user waits on: a refused connection
    is tried twice (one retry), not an answer's five times with backoff (8-28 s in the window)."""
    import httpx

    attempts: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        attempts.append(request.url.path)
        raise httpx.ConnectError("Connection refused", request=request)

    async def go():
        engine = make_engine()
        engine.providers.remote_http_transport = httpx.MockTransport(refuse)
        try:
            info = await engine.providers.add("down", "http://127.0.0.1:9/v1", allow_http=True)
            assert info.models == () and attempts == ["/v1/models"] * 2  # saved anyway, none known
            attempts.clear()
            with pytest.raises(WrenError, match="connect"):
                await engine.providers.test("down")
            assert attempts == ["/v1/models"] * 2
        finally:
            await engine.close()

    asyncio.run(go())


@pytest.mark.parametrize("kind", ["closed mid-answer", "html"])
def test_a_stream_closed_mid_answer_or_an_html_page_is_not_a_finished_answer(make_engine, kind):
    """A server that closed the stream cleanly mid-answer (no finish_reason, no [DONE]) had its
    fragment stored as complete; a proxy's HTML page read as an empty answer that succeeded."""
    import httpx

    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        if kind == "html":
            return httpx.Response(200, headers={"content-type": "text/html"}, content=b"<html>oops</html>")
        chunk = {"choices": [{"delta": {"content": "Hello, this is the start of a long"}, "finish_reason": None}]}
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=f"data: {json.dumps(chunk)}\n\n".encode())

    async def main():
        engine = make_engine("a local answer")
        engine.providers.remote_http_transport = httpx.MockTransport(reply)
        await engine.providers.add("cut", "http://127.0.0.1:9/v1", models=("m",), allow_http=True, discover=False)
        await engine.models.load("cut/m")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "hi"))
        msgs = await engine.conversations.messages(conv.id)
        await engine.close()
        return events, msgs

    events, msgs = asyncio.run(main())
    (failed,) = [e for e in events if isinstance(e, Failed)]
    answer = msgs[-1]
    if kind == "html":
        assert "answered with text/html, not an event stream" in failed.error and "<html>oops</html>" in failed.error
        assert answer.status is MessageStatus.FAILED
    else:
        assert "ended before the answer did" in failed.error and failed.kind is FailureKind.INTERRUPTED
        assert answer.status is MessageStatus.INTERRUPTED and answer.content == "Hello, this is the start of a long"


def test_providers_add_says_why_it_could_not_list_the_models(wren_home, capsys):
    """It said only "No models known yet", whatever went wrong (refused, a wrong key, a hang)."""
    from wren.engine.terminal.main import main

    assert main(["providers", "add", "down", "--base-url", "http://127.0.0.1:9/v1", "--no-key"]) == 0
    said = capsys.readouterr()
    assert "Asking http://127.0.0.1:9/v1 for its models…" in said.err
    assert "No models known yet (it could not list them: " in said.out and "127.0.0.1:9" in said.out
    assert "pass --model, or run `wren providers test down`." in said.out


def test_a_provider_that_never_answers_holds_the_load_no_longer_than_the_context_lookup(make_engine, monkeypatch,
                                                                                     caplog):
    """Its context window is asked at load; a server that accepts and never answers held the
    load for 3 connect timeouts (30 s), and the log's reason was blank."""
    import logging
    import socket

    from wren.engine.inference.backends import remote

    monkeypatch.setattr(remote, "CONTEXT_LOOKUP_SECONDS", 0.3)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts (the kernel does), never answers

    async def main():
        engine = make_engine()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        await engine.providers.add("mute", url, models=("m",), discover=False)
        status = await asyncio.wait_for(engine.models.load("mute/m"), 20)
        await engine.close()
        return status

    try:
        with caplog.at_level(logging.WARNING):
            status = asyncio.run(main())
    finally:
        silent.close()
    assert status.context_length == remote.DEFAULT_CONTEXT
    assert "could not read the context window of mute/m from its provider: TimeoutError" in caplog.text
