"""The real starter model (SmolLM2-135M) through engine.chat.send with a forced tool: in 10 of 10
seeds the call parses and its arguments validate against the tool's schema, the tool runs
and the answer goes on in the same message."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.api import Engine
from wren.engine.events import Delta, Failed, Finished, ToolCall, ToolResult
from wren.engine.inference.sampling import SamplingParams
from wren.engine.modelhub.registry import ModelRegistry
from wren.engine.records import SendOptions
from wren.engine.store import Store
from wren.engine.tools.builtin import CALCULATOR
from wren.engine.tools.registry import validate_arguments

pytestmark = pytest.mark.slow


def test_forced_calculator_call_in_10_of_10_seeds(starter_models_dir, wren_home):
    async def main():
        engine = Engine(Store(wren_home / "wren.sqlite3"), ModelRegistry(starter_models_dir))
        await engine.models.load(backend="torch-cpu")
        conv = await engine.conversations.create()
        runs = []
        for seed in range(10):
            params = SamplingParams(seed=seed, temperature=0.7, max_tokens=256)
            events = [e async for e in engine.chat.send(conv.id, "What is 17 times 23?",
                                                   SendOptions(sampling=params, tool_choice="calculator"))]
            runs.append(events)
        await engine.close()
        return runs

    runs = asyncio.run(main())
    for events in runs:
        assert not any(isinstance(e, Failed) for e in events), events
        calls = [e for e in events if isinstance(e, ToolCall)]
        results = [e for e in events if isinstance(e, ToolResult)]
        assert calls and calls[0].name == "calculator", events
        assert validate_arguments(CALCULATOR.parameters, calls[0].arguments, "calculator") is None
        assert results and results[0].id == calls[0].id
        assert "could not be read" not in results[0].content and "invalid arguments" not in results[0].content
        after = events.index(results[0])
        assert isinstance(events[-1], Finished) and events[-1].message_id is not None
        assert all(not isinstance(e, Delta) or events.index(e) > after for e in events)  # text only after
    assert any(any(isinstance(e, Delta) for e in events) for events in runs)  # the answer streams on
