"""Tool calls and thinking, per format, through engine.chat.send with the scripted backend
and real templates. Policy: a `<tool_call>` written inside `<think>` is the model thinking
about a call, never run (Qwen3's template puts calls after `</think>`); a call after the
thinking runs. In harmony a message addressed `to=functions.NAME` is a call, whatever its
channel (the commentary channel in practice); analysis text is thinking."""

from __future__ import annotations

import asyncio
import json

from wren.engine.events import Delta, Finished, FinishReason, Reasoning, ToolCall, ToolResult
from wren.engine.records import SendOptions

from .conftest import GPT_OSS


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


async def collect(stream) -> list:
    return [event async for event in stream]


def by_marker(marker: str, *replies: str):
    """The n-th generation of an answer gets replies[n]; n is how often `marker` (a tool
    result's markup in the template) is in the prompt."""
    def reply(prompt: str) -> str:
        return replies[min(prompt.count(marker), len(replies) - 1)]

    return reply


def test_qwen3_a_call_inside_thinking_is_not_run_the_one_after_it_is(thinking_engine):
    inside = call("calculator", expression="1+1")
    first = f"<think>\nMaybe {inside} would help; 6*7 is better.\n</think>\n\n{call('calculator', expression='6*7')}"
    second = "<think>\nThe tool said 42.\n</think>\n\nIt is 42."

    async def main():
        engine = thinking_engine(by_marker("<tool_response>", first, second))
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "what is 6*7?", SendOptions(tools=("calculator",))))
        answer = (await engine.conversations.messages(conv.id))[-1]
        prompts = list(engine.scripted.loaded[0].prompts)
        await engine.close()
        return events, answer, prompts

    events, answer, prompts = asyncio.run(main())
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "6*7"})]
    assert [e.content for e in events if isinstance(e, ToolResult)] == ["42"]
    thinking = "".join(e.text for e in events if isinstance(e, Reasoning))
    assert inside in thinking and "The tool said 42." in thinking
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "It is 42."
    assert answer.content == "It is 42." and "Maybe" in answer.reasoning and "The tool said 42." in answer.reasoning
    assert "Maybe" not in prompts[1]  # the second round's prompt has the call, not the thinking
    assert events[-1].reason is FinishReason.STOP


def test_gpt_oss_harmony_call_in_the_commentary_channel_runs(thinking_engine):
    first = ("<|channel|>analysis<|message|>Need the calculator.<|end|>"
             "<|start|>assistant to=functions.calculator<|channel|>commentary json<|message|>"
             '{"expression": "6*7"}<|call|>')
    second = "<|channel|>analysis<|message|>Got 42.<|end|><|start|>assistant<|channel|>final<|message|>It is 42."

    async def main():
        engine = thinking_engine(by_marker("to=assistant<|channel|>commentary", first, second), GPT_OSS, arch="qwen2")
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "what is 6*7?", SendOptions(tools=("calculator",))))
        answer = (await engine.conversations.messages(conv.id))[-1]
        prompts = list(engine.scripted.loaded[0].prompts)
        await engine.close()
        return events, answer, prompts

    events, answer, prompts = asyncio.run(main())
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("calculator", {"expression": "6*7"})]
    assert [e.content for e in events if isinstance(e, ToolResult)] == ["42"]
    assert "".join(e.text for e in events if isinstance(e, Reasoning)) == "Need the calculator.Got 42."
    assert "".join(e.text for e in events if isinstance(e, Delta)) == "It is 42."
    assert answer.content == "It is 42."
    assert "Reasoning: medium" in prompts[0]
    assert isinstance(events[-1], Finished) and events[-1].reason is FinishReason.STOP
