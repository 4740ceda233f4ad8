"""engine.chat.prepare for the first message of a new chat: no conversation exists yet."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.context import ContextOverflow
from wren.engine.events import Usage

LONG = "word " * 400


def run(coro):
    return asyncio.run(coro)


async def collect(stream):
    return [event async for event in stream]


def test_prepare_without_a_conversation_prewarms_the_first_message(make_engine):
    async def main():
        engine = make_engine("Answer.")
        await engine.models.load()
        await engine.settings.set("system_prompt", "You are a careful gardener.")
        await engine.memories.add("The user grows roses on a balcony.")
        draft = "how often should I water roses"
        tokens = await engine.chat.prepare(None, draft)
        cached = await engine.chat.prepared()
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, draft))
        prompt = engine.scripted.loaded[0].prompts[0]
        await engine.close()
        return tokens, cached, events, prompt

    tokens, cached, events, prompt = run(main())
    usage = next(e for e in events if isinstance(e, Usage))
    assert "careful gardener" in prompt and "balcony" in prompt  # system prompt and memory were in the warm prompt
    assert cached == tokens == usage.prompt_tokens
    assert usage.cached_tokens == usage.prompt_tokens - 1  # all but the last token came from the pre-warm


def test_prepare_without_a_conversation_warns_of_overflow(make_engine):
    async def main():
        engine = make_engine("x", context_length=64)
        await engine.models.load()
        with pytest.raises(ContextOverflow):
            await engine.chat.prepare(None, LONG)
        empty = await engine.chat.prepare(None, "   ")
        listed = await engine.conversations.list()
        await engine.close()
        return empty, listed

    empty, listed = run(main())
    assert empty is None and listed == []  # nothing was created
