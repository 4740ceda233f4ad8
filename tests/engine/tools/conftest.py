"""Helpers for the tools tests: scripted answers by round, event collection, a test source."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.tools.registry import ToolSpec


def by_round(*replies: str):
    """A scripted reply that answers the n-th generation of an answer with replies[n]: the
    round is the number of tool results already in the prompt."""

    def reply(prompt: str) -> str:
        n = prompt.count("<tool_response>")
        return replies[min(n, len(replies) - 1)]

    return reply


def call(name: str, **arguments) -> str:
    import json

    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class FakeSource:
    """A tool source whose tools the tests define: name -> async function(arguments, cancel)."""

    def __init__(self, name: str = "test", **tools):
        self.name = name
        self.tools = tools
        self.approval = set()
        self.calls: list[tuple[str, dict]] = []

    def specs(self):
        return [ToolSpec(n, f"the test tool {n}", {"type": "object", "properties": {"x": {"type": "string"}}},
                         needs_approval=n in self.approval) for n in self.tools]

    async def call(self, name, arguments, cancel):
        self.calls.append((name, arguments))
        return await self.tools[name](arguments, cancel)


@pytest.fixture
def fake_source():
    return FakeSource


async def collect(stream, on_event=None):
    out = []
    async for event in stream:
        out.append(event)
        if on_event is not None:
            result = on_event(event)
            if asyncio.iscoroutine(result):
                await result
    return out
