"""Every sampled answer keeps its seed; Replay redoes it bit for bit (torch, tiny model)."""

from __future__ import annotations

import asyncio

import pytest

from wren.engine.inference.sampling import SamplingParams
from wren.engine.records import SendOptions


@pytest.mark.slow  # loads the tiny model on torch
def test_replay_is_bit_identical_on_torch(wren_home, tiny_model_dir):
    from tests.fixtures.tiny import tiny_engine

    async def main():
        engine = tiny_engine(wren_home, tiny_model_dir)
        await engine.models.load(backend="torch-cpu")
        conv = await engine.conversations.create("dice")
        params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=12)  # no seed given
        [_ async for _ in engine.chat.send(conv.id, "roll", SendOptions(sampling=params))]
        first = (await engine.conversations.messages(conv.id))[-1]
        [_ async for _ in engine.chat.replay(first.id)]
        again = (await engine.conversations.messages(conv.id))[-1]
        [_ async for _ in engine.chat.regenerate(first.id, SendOptions(sampling=params))]
        other = (await engine.conversations.messages(conv.id))[-1]
        await engine.close()
        return first, again, other

    first, again, other = asyncio.run(main())
    assert isinstance(first.sampling.get("seed"), int)  # recorded though none was given
    assert again.id != first.id and again.parent_id == first.parent_id
    assert again.content == first.content and again.sampling == first.sampling
    assert again.completion_tokens == first.completion_tokens
    assert other.sampling["seed"] != first.sampling["seed"]  # a new answer draws a new seed
