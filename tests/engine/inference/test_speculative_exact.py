"""Speculative decoding on the real starter model gives plain decoding's greedy ids bit for
bit where the model verifies exactly (eager CPU decoding of its quantized weights): a
verify step's rows are a decoded token's logits, not a near copy whose rounding can flip a
near-tied pick (the free-chat answer did, with attention over all rows at once)."""

from __future__ import annotations

import numpy as np
import pytest

from wren.engine.inference.generate import KVSession
from wren.engine.inference.sampling import Sampler, SamplingParams
from wren.engine.inference.speculative import (
    DraftModel,
    Policy,
    PromptLookup,
    Speculator,
    speculative_tokens,
    speculator_for,
)

torch = pytest.importorskip("torch")
from wren.engine.inference.backends.torch import TorchBackend  # noqa: E402

pytestmark = pytest.mark.slow

CHAT = "What are some good ways to spend a rainy weekend at home?"
TOKENS = 96


@pytest.fixture(scope="module")
def starter(starter_models_dir):
    from wren.engine.inference.quant import kernels
    from wren.engine.modelhub.registry import ModelRegistry
    from wren.engine.tokenize import Tokenizer

    if not kernels.available():
        pytest.skip(kernels.NOTICE)
    path = ModelRegistry(starter_models_dir).ensure_starter().path
    model = TorchBackend().load(path, slots=1, compile=False)
    prompt = Tokenizer.from_dir(path).encode_chat([{"role": "user", "content": CHAT}])
    yield model, path, prompt
    model.close()


def _always_drafts() -> Policy:
    """A policy that drafts at every step, so every token after the first is verified."""
    return Policy(margin=-1.0, warmup=0, refresh_every=10**6)


def _greedy(model, prompt, speculator=None) -> list[int]:
    stream = speculative_tokens(KVSession(model), prompt, Sampler(SamplingParams(temperature=0)), speculator)
    return [token for _, token in zip(range(TOKENS), stream)]


def test_verified_rows_are_the_decoded_tokens_logits(starter):
    model, _, prompt = starter
    assert model.verifies_exactly
    session = KVSession(model)
    logits, _ = session.prefill(prompt)
    tokens, decoded = [int(np.argmax(logits))], []
    for _ in range(6):
        decoded.append(session.decode(tokens[-1]))
        tokens.append(int(np.argmax(decoded[-1])))
    session.truncate(len(prompt))
    rows = session.verify(tokens[:6])
    for i, row in enumerate(rows):
        assert np.array_equal(row, decoded[i]), (i, float(np.abs(row - decoded[i]).max()))


@pytest.mark.parametrize("drafter", ["prompt-lookup", "draft-model"])
def test_greedy_speculation_answers_the_chat_task_as_plain_decoding(starter, drafter):
    model, path, prompt = starter
    plain = _greedy(model, prompt)
    draft = None
    if drafter == "draft-model":
        # The starter drafting for itself: every draft is plain decoding's pick, so each is
        # kept exactly when verification agrees with decoding bit for bit.
        draft = TorchBackend().load(path, slots=1, compile=False)
        speculator = Speculator(DraftModel(draft, model.vocab_size), _always_drafts())
    else:
        speculator = Speculator(PromptLookup(longest=2, shortest=1), _always_drafts())
    try:
        ids = _greedy(model, prompt, speculator)
    finally:
        if draft is not None:
            draft.close()
    assert speculator.stats.verify_steps > 5  # the answer really went through verify steps
    assert ids == plain


def test_auto_drafts_only_while_verification_is_exact(starter, monkeypatch):
    model, _, prompt = starter
    speculator = speculator_for("auto", None, model)
    assert speculator is not None and speculator.exact_only
    speculator.policy = _always_drafts()
    _greedy(model, prompt, speculator)
    assert speculator.stats.verify_steps > 0
    named = speculator_for("prompt-lookup", None, model)
    assert named is not None and not named.exact_only
    # A compiled decode step without Wren's norm and attention kernels (WREN_KERNEL_ATTEND=off)
    # rounds differently: "auto" then decodes plainly.
    from wren.engine.inference.quant import kernels

    monkeypatch.setattr(kernels, "ATTEND_ONE", False)
    model._model.decode_block = lambda layer, h, cos, sin, start: layer(h, cos, sin, start)
    try:
        assert not model.verifies_exactly
        speculator.stats.verify_steps = speculator.stats.plain_steps = 0
        _greedy(model, prompt, speculator)
        assert speculator.stats.verify_steps == 0 and speculator.stats.plain_steps >= TOKENS - 1
    finally:
        model._model.decode_block = None


@pytest.fixture
def compiled_exact(starter, monkeypatch):
    """The starter with its decode step compiled around Wren's norm and one-query attention
    kernels (WREN_KERNEL_ATTEND=on; off by default)."""
    from wren.engine.inference.quant import kernels

    if not hasattr(torch.ops.wren, "attend_one"):
        pytest.skip("the kernels (with attend_one) are not built")
    monkeypatch.setattr(kernels, "ATTEND_ONE", True)
    _, path, prompt = starter
    model = TorchBackend().load(path, slots=1, compile=True, context_length=1024)
    yield model, path, prompt
    model.close()


@pytest.mark.parametrize("drafter", ["prompt-lookup", "draft-model"])
def test_compiled_decoding_speculates_exactly_with_the_kernels(compiled_exact, drafter):
    model, path, prompt = compiled_exact
    assert model.decode_mode == "compiled" and model.verifies_exactly
    plain = _greedy(model, prompt)
    draft = None
    if drafter == "draft-model":
        draft = TorchBackend().load(path, slots=1, compile=False, context_length=1024)
        speculator = Speculator(DraftModel(draft, model.vocab_size), _always_drafts(), exact_only=True)
    else:
        speculator = Speculator(PromptLookup(longest=2, shortest=1), _always_drafts(), exact_only=True)
    try:
        ids = _greedy(model, prompt, speculator)
    finally:
        if draft is not None:
            draft.close()
    assert speculator.stats.verify_steps > 5
    assert ids == plain
