"""A chat's own settings given before its first message (the window's new, empty chat):
checked like update_settings, kept by create/send_new, and followed by the first answer."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.errors import InvalidRequest


def test_the_first_answer_follows_settings_given_before_the_chat_existed(make_engine):
    prompts: list[str] = []

    def reply(prompt: str) -> str:
        prompts.append(prompt)
        return "Arr."

    async def main():
        engine = make_engine(reply)
        try:
            settings = engine.conversations.new_chat_settings(
                system_prompt="Answer as a pirate.", sampling={"temperature": 0.2, "top_p": 0.9},
                sampling_preset="Precise", memory=False, tools=["calculator", "calculator"])
            events = [e async for e in engine.chat.send_new("Where is the treasure?", settings=settings)]
            conv_id = events[0].conversation_id
            messages = await engine.conversations.messages(conv_id)
            return settings, await engine.conversations.settings(conv_id), messages
        finally:
            await engine.close()

    settings, kept, messages = asyncio.run(main())
    assert settings["tools"] == ["calculator"]
    assert kept["system_prompt"] == "Answer as a pirate." and kept["memory"] is False
    assert kept["tools"] == ["calculator"] and kept["sampling_preset"] == "Precise"
    assert "Answer as a pirate." in prompts[0]  # the first answer read the chat's own system prompt
    answer = messages[-1]
    assert answer.content == "Arr."
    assert answer.sampling["temperature"] == 0.2 and answer.sampling["top_p"] == 0.9


@pytest.mark.parametrize("bad, words", [
    ({"colour": "red"}, "unknown chat setting"),
    ({"sampling": {"temperature": "hot"}}, "sampling"),
    ({"memory": "yes"}, "true or false"),
    ({"tools": "calculator"}, "list of tool names"),
])
def test_bad_new_chat_settings_are_refused_by_name(make_engine, bad, words):
    async def main():
        engine = make_engine()
        try:
            with pytest.raises(InvalidRequest, match=words):
                engine.conversations.new_chat_settings(**bad)
        finally:
            await engine.close()

    asyncio.run(main())
