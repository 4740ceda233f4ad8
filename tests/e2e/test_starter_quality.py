"""The starter model (SmolLM2-135M-Instruct) at Wren's default sampling settings answers
sensibly: through engine.chat.send, seeds fixed, no sampling options given with the message.

Affordable on two cores: answers run five at a time in the engine's shared decode steps; the
capital question is asked with 30 seeds cut at 40 tokens (a right answer says "Paris" in its
first sentence) and the everyday prompts run with two seeds each at 300 tokens.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

pytestmark = pytest.mark.slow

EVERYDAY = (
    "Give me three tips for sleeping better.",
    "Write a short poem about autumn.",
    "Explain what a CPU does.",
    "How do I boil an egg?",
    "What should I pack for a weekend trip?",
)
PARALLEL = 5


def max_ngram_repeats(ids: list[int], n: int = 8) -> int:
    """How often the most frequent run of n tokens occurs (0 for a text shorter than n)."""
    counts = Counter(tuple(ids[i:i + n]) for i in range(len(ids) - n + 1))
    return max(counts.values(), default=0)


def test_max_ngram_repeats_counts_runs():
    assert max_ngram_repeats(list(range(20))) == 1
    assert max_ngram_repeats([1, 2, 3] * 10, n=3) == 10
    assert max_ngram_repeats([1, 2], n=8) == 0


async def _answers(models_dir, home, jobs: list[tuple[str, dict]]) -> list[str]:
    """Each (question, conversation sampling settings) answered in its own conversation."""
    from wren.engine.api import Engine
    from wren.engine.events import Delta
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.store import Store

    engine = Engine(Store(home / "wren.sqlite3"), ModelRegistry(models_dir))
    try:
        await engine.settings.set_performance(parallel_sequences=PARALLEL)
        # Answers only: the chats' titles from the question's words, so no title sequence
        # shares the batch with the answers measured here.
        await engine.settings.set("titles.model", "off")
        await engine.models.load()

        async def one(question: str, settings: dict) -> str:
            conv = await engine.conversations.create(settings={"sampling": settings})
            events = [e async for e in engine.chat.send(conv.id, question)]
            return "".join(e.text for e in events if isinstance(e, Delta))

        return await asyncio.gather(*(one(q, s) for q, s in jobs))
    finally:
        await engine.close()


def test_the_capital_of_france_is_paris_at_default_settings(starter_models_dir, wren_home):
    # The starter's first token is a near-tie: "The" 25.33 against "L" 25.24 (then "La"
    # 24.94), so even at its temperature of 0.05 about one answer in six opens with
    # "L'Étoile, …" and may never say "Paris". Ten seeds measured that chance too coarsely:
    # any change to how the sampler draws its random numbers re-rolled 9 of 10 into 8. Thirty
    # seeds measure it: 27 of 30 here; a bar of 22 passes 97% of draws at the model's own
    # rate (about 0.85) and fails 57% at 0.7 and 91% at 0.6, where babbling begins.
    seeds = range(1, 31)
    answers = asyncio.run(_answers(starter_models_dir, wren_home, [
        ("What is the capital of France?", {"seed": seed, "max_tokens": 40}) for seed in seeds
    ]))
    with_paris = [seed for seed, text in zip(seeds, answers) if "Paris" in text]
    assert len(with_paris) >= 22, list(zip(seeds, answers))


def test_everyday_answers_do_not_loop_at_default_settings(starter_models_dir, wren_home):
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.tokenize import Tokenizer

    jobs = [(q, {"seed": seed, "max_tokens": 300}) for q in EVERYDAY for seed in (1, 2)]
    answers = asyncio.run(_answers(starter_models_dir, wren_home, jobs))
    tokenizer = Tokenizer.from_dir(ModelRegistry(starter_models_dir).get("smollm2-135m-instruct").path)
    worst = {}
    for (question, settings), text in zip(jobs, answers):
        assert text.strip(), (question, settings)
        ids = tokenizer.encode(text)
        worst[(question, settings["seed"])] = (max_ngram_repeats(ids), len(ids))
    assert all(repeats <= 3 for repeats, _ in worst.values()), worst
