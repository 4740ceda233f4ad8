"""The sentence embedder's blocked GELU and per-sequence attention (made for indexing speed)
compute what the plain formulas do, across block boundaries and with padding."""

from __future__ import annotations

import math

import numpy as np

from wren.engine.memory.embed import _GELU_BLOCK, _attention, _gelu


def test_gelu_is_the_exact_erf_gelu_across_blocks():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, _GELU_BLOCK // 2 + 7)) * 4).astype(np.float32)  # 1.5 blocks and a bit
    exact = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))(x.astype(np.float64))
    got = _gelu(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    assert np.abs(got - exact).max() < 2e-6


def test_attention_per_sequence_is_batched_softmax_attention():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((3, 4, 10, 8)).astype(np.float32) for _ in range(3))
    mask = np.ones((3, 10), dtype=np.float32)
    mask[1, 6:] = 0  # a padded sequence
    blocked = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8) + blocked
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    expected = (weights / weights.sum(axis=-1, keepdims=True)) @ v
    assert np.abs(_attention(q, k, v, blocked) - expected).max() < 1e-5
