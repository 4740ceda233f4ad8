"""The prefix KV cache across conversations: reuse, equality with uncached runs, eviction."""

from __future__ import annotations

import asyncio

from wren.engine.events import Usage
from wren.engine.inference.prefix_cache import PrefixCache


async def collect(stream):
    return [e async for e in stream]


def usage_of(events) -> Usage:
    return next(e for e in events if isinstance(e, Usage))


def test_lru_evicts_within_its_budget_rather_than_failing():
    cache = PrefixCache(budget_bytes=100)
    assert cache.put([1, 2, 3], "a", 40) and cache.put([4, 5, 6], "b", 40)
    assert cache.put([7, 8, 9], "c", 40)  # over budget: the least recently used goes
    assert cache.evictions == 1 and cache.used == 80
    assert cache.best([1, 2, 3])[0] is None
    assert cache.best([4, 5, 6, 7])[1] == 3
    assert not cache.put([1], "huge", 101)  # larger than the budget: not kept, no error
    assert cache.used <= cache.budget


def test_returning_to_a_conversation_restores_its_prefix(make_engine):
    async def main():
        engine = make_engine("Answer here.")
        a = await engine.conversations.create()
        b = await engine.conversations.create()
        long_question = "Tell me about the history of " + " and ".join(f"topic {i}" for i in range(60))
        await collect(engine.chat.send(a.id, long_question))
        await collect(engine.chat.send(b.id, "Something entirely different about gardening " * 10))
        back = await collect(engine.chat.send(a.id, "and one more thing"))
        imports = engine.scripted.loaded[0].imports
        await engine.close()
        return back, imports

    back, imports = asyncio.run(main())
    usage = usage_of(back)
    assert imports == 1
    assert usage.cached_tokens > usage.prompt_tokens // 2


def test_a_tiny_budget_evicts_and_answers_stay_the_same(make_engine, wren_home):
    async def run(budget_mb):
        engine = make_engine(lambda prompt: f"reply {len(prompt)}")
        await engine.settings.set("kv_cache_budget_mb", budget_mb)
        convs = [await engine.conversations.create() for _ in range(3)]
        texts = []
        for round_ in range(2):
            for i, conv in enumerate(convs):
                events = await collect(engine.chat.send(conv.id, f"conversation {i} round {round_} " + "words " * 30))
                texts.append("".join(getattr(e, "text", "") for e in events if type(e).__name__ == "Delta"))
        await engine.close()
        return texts

    assert asyncio.run(run(512)) == asyncio.run(run(0))


def test_mlx_saved_state_restores_to_identical_logits(tiny_model_dir):
    import numpy as np
    import pytest

    from wren.engine.inference.select import resolve_backend

    try:
        backend = resolve_backend("mlx")
    except Exception as exc:
        pytest.skip(f"MLX is not available here: {exc}")
    model = backend.load(tiny_model_dir, dtype="float32")
    ids_a = list(range(3, 60))
    ids_b = list(range(100, 140))
    model.prefill(ids_a, 0)
    state, nbytes = model.export_kv(len(ids_a))
    assert nbytes > 0
    model.prefill(ids_b, 0)  # another conversation overwrites the live cache
    model.import_kv(state, len(ids_a))
    restored = model.decode(7, len(ids_a))
    model.prefill(ids_a, 0)
    fresh = model.decode(7, len(ids_a))
    assert np.abs(restored - fresh).max() < 1e-5
    # the saved state survives being restored and extended: restore it again
    model.import_kv(state, len(ids_a))
    assert np.abs(model.decode(7, len(ids_a)) - fresh).max() < 1e-5
    model.close()


def test_torch_saved_state_restores_to_identical_greedy_output(tiny_model_dir):
    import numpy as np

    from wren.engine.inference.generate import KVSession, generate_tokens
    from wren.engine.inference.sampling import Sampler, SamplingParams
    from wren.engine.inference.select import resolve_backend

    model = resolve_backend("torch-cpu").load(tiny_model_dir, dtype="float32")
    ids_a = list(range(3, 60))
    ids_b = list(range(100, 140))

    def greedy(session, ids):
        out = []
        for token in generate_tokens(session, ids, Sampler(SamplingParams(temperature=0.0))):
            out.append(token)
            if len(out) == 12:
                return out

    uncached = greedy(KVSession(model), ids_a)
    model.prefill(ids_a, 0)
    state, nbytes = model.export_kv(len(ids_a))
    assert nbytes > 0
    model.prefill(ids_b, 0)  # another conversation overwrites the live cache
    model.import_kv(state, len(ids_a))
    session = KVSession(model)
    session.adopt(ids_a)
    restored_logits, reused = session.prefill(ids_a)
    assert reused == len(ids_a) - 1
    model.prefill(ids_a, 0)
    assert np.abs(restored_logits - model.prefill(ids_a[-1:], len(ids_a) - 1)).max() < 1e-5
    model.import_kv(state, len(ids_a))
    session = KVSession(model)
    session.adopt(ids_a)
    assert greedy(session, ids_a) == uncached
    model.close()
