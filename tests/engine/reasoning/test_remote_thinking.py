"""A remote provider's thinking (a fake OpenAI-compatible server): reasoning_content or
reasoning deltas, and <think> blocks in the content, become Reasoning events, stored apart,
never sent back to the server in later turns."""

from __future__ import annotations

import asyncio

import pytest

from tests.engine.providers.fakeserver import FakeServer
from wren.engine.events import Delta, Reasoning


@pytest.fixture
def server():
    s = FakeServer().start()
    yield s
    s.stop()


async def collect(stream) -> list:
    return [event async for event in stream]


def ask_twice(make_engine, server):
    async def main():
        engine = make_engine("a local answer")
        await engine.providers.add("fake", server.base_url, models=("fake-chat",))
        await engine.models.load("fake/fake-chat")
        conv = await engine.conversations.create()
        first = await collect(engine.chat.send(conv.id, "Capital of France?"))
        await collect(engine.chat.send(conv.id, "And Italy?"))
        messages = await engine.conversations.messages(conv.id)
        await engine.close()
        return first, messages

    return asyncio.run(main())


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_deltas_are_thinking(make_engine, server, key):
    server.script = [("reasoning", "The user asks a capital.", "Paris.", key)]
    server.default = ("ok", "Rome.")
    first, messages = ask_twice(make_engine, server)
    assert "".join(e.text for e in first if isinstance(e, Reasoning)) == "The user asks a capital. "
    assert "".join(e.text for e in first if isinstance(e, Delta)) == "Paris."
    assert messages[1].content == "Paris." and messages[1].reasoning == "The user asks a capital."
    later = server.chats()[1].body["messages"]
    assert {"role": "assistant", "content": "Paris."} in later
    assert not any("capital." in m["content"] for m in later if m["role"] == "assistant")


def test_think_blocks_in_the_content_are_thinking(make_engine, server):
    server.script = [("ok", "<think> Recall capitals. </think> Paris.")]
    first, messages = ask_twice(make_engine, server)
    assert "".join(e.text for e in first if isinstance(e, Reasoning)).strip() == "Recall capitals."
    assert "".join(e.text for e in first if isinstance(e, Delta)) == "Paris."
    assert messages[1].content == "Paris."
