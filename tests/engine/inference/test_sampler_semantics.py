"""Sampler: what each setting keeps, in which order, and that seeds reproduce draws."""

from __future__ import annotations

import numpy as np
import pytest

from wren.engine.errors import InvalidRequest
from wren.engine.inference.sampling import Sampler, SamplingParams


def logits_for(probs) -> np.ndarray:
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


def draws(params: SamplingParams, logits, n: int = 2000, history=()) -> np.ndarray:
    sampler = Sampler(params)
    return np.array([sampler(logits, history) for _ in range(n)])


def test_greedy_is_argmax_and_ignores_the_seed():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    for seed in (None, 1, 2):
        assert Sampler(SamplingParams(temperature=0, seed=seed))(logits, []) == 1


def test_top_k_keeps_only_the_k_most_likely():
    probs = [0.3, 0.25, 0.2, 0.15, 0.1]
    assert set(draws(SamplingParams(temperature=1, top_k=3, seed=0), logits_for(probs))) == {0, 1, 2}
    assert set(draws(SamplingParams(temperature=1, top_k=1, seed=0), logits_for(probs), 50)) == {0}


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = logits_for([0.5, 0.3, 0.15, 0.05])
    assert set(draws(SamplingParams(temperature=1, top_p=0.75, seed=0), logits)) == {0, 1}
    assert set(draws(SamplingParams(temperature=1, top_p=0.85, seed=0), logits)) == {0, 1, 2}
    assert set(draws(SamplingParams(temperature=1, top_p=0.1, seed=0), logits, 50)) == {0}


def test_top_p_on_a_large_flat_vocabulary_matches_a_full_sort():
    # The mass is spread thin, so the sampler's first cheap guess at the nucleus falls
    # short; it has to widen and still cut at the exact place.
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 0.5, 50_000).astype(np.float32)
    probs = np.exp(logits.astype(np.float64) - logits.max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    cut = int(np.searchsorted(np.cumsum(probs[order]), 0.9)) + 1
    allowed = set(order[:cut].tolist())
    got = draws(SamplingParams(temperature=1, top_p=0.9, seed=1), logits, 400)
    assert set(got.tolist()) <= allowed
    assert len(set(got.tolist())) > 300  # and it really samples across the nucleus


def test_min_p_drops_tokens_below_a_fraction_of_the_best():
    logits = logits_for([0.5, 0.3, 0.12, 0.05, 0.03])
    # threshold 0.2 * 0.5 = 0.1: keeps 0.5, 0.3, 0.12
    assert set(draws(SamplingParams(temperature=1, min_p=0.2, seed=0), logits)) == {0, 1, 2}


def test_filters_apply_in_order_top_k_then_top_p_on_renormalised_mass():
    logits = logits_for([0.4, 0.35, 0.25])
    # Alone, top_p=0.5 needs two tokens (0.4 < 0.5) ...
    assert set(draws(SamplingParams(temperature=1, top_p=0.5, seed=0), logits)) == {0, 1}
    # ... after top_k=2 the first token holds 0.4/0.75 = 0.53 of the mass, enough alone.
    assert set(draws(SamplingParams(temperature=1, top_k=2, top_p=0.5, seed=0), logits)) == {0}


def test_sampling_follows_the_distribution_and_temperature_sharpens_it():
    logits = logits_for([0.6, 0.3, 0.1])
    freq = np.bincount(draws(SamplingParams(temperature=1, seed=5), logits, 20_000), minlength=3)
    assert np.allclose(freq / freq.sum(), [0.6, 0.3, 0.1], atol=0.015)
    cold = draws(SamplingParams(temperature=0.3, seed=5), logits, 2000)
    assert (cold == 0).mean() > 0.85  # 0.6^(1/0.3) dominates after rescaling


def test_repetition_penalty_is_ctrl_style():
    # A positive logit is divided, a negative one multiplied: both become less likely.
    assert Sampler(SamplingParams(temperature=0, repetition_penalty=2.0))(
        np.array([2.0, 1.5], dtype=np.float32), [0]) == 1
    assert Sampler(SamplingParams(temperature=0, repetition_penalty=2.0))(
        np.array([-1.0, -1.5], dtype=np.float32), [0, 0, 0]) == 1
    # No history, or a penalty of 1, changes nothing.
    assert Sampler(SamplingParams(temperature=0, repetition_penalty=2.0))(
        np.array([2.0, 1.5], dtype=np.float32), []) == 0
    assert Sampler(SamplingParams(temperature=0))(np.array([2.0, 1.5], dtype=np.float32), [0]) == 0


def test_repetition_penalty_leaves_the_callers_logits_alone_and_skips_foreign_ids():
    logits = np.array([2.0, 1.5, 0.5], dtype=np.float32)
    Sampler(SamplingParams(temperature=0, repetition_penalty=3.0))(logits, [0, 1, 99_999])
    assert logits.tolist() == [2.0, 1.5, 0.5]


def test_same_seed_same_draws_different_seed_different_draws():
    logits = np.random.default_rng(0).normal(0, 1, 500).astype(np.float32)
    params = SamplingParams(temperature=1.0, top_p=0.95, top_k=200, min_p=0.01, seed=42)
    a = draws(params, logits, 64)
    assert np.array_equal(a, draws(params, logits, 64))
    assert not np.array_equal(a, draws(params.with_(seed=43), logits, 64))


@pytest.mark.parametrize("bad", [
    {"temperature": -0.1}, {"temperature": 6}, {"top_p": 0.0}, {"top_p": 1.5},
    {"top_k": -1}, {"min_p": 1.0}, {"min_p": -0.1}, {"repetition_penalty": 0.0},
    {"seed": -1},
])
def test_invalid_settings_are_refused(bad):
    with pytest.raises(InvalidRequest):
        Sampler(SamplingParams(**bad))


def test_logits_must_be_a_vector():
    with pytest.raises(ValueError):
        Sampler(SamplingParams())(np.zeros((2, 3), dtype=np.float32), [])
