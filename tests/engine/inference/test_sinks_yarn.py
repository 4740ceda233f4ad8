"""gpt-oss's attention quirks in Wren's one attention (engine/inference/models/attention.py):
attention sinks (a learned logit per head in every softmax) and YaRN RoPE, each against
transformers' own gpt-oss code on the same numbers."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss as hf  # noqa: E402

from wren.engine.inference.models.args import ModelArgs  # noqa: E402
from wren.engine.inference.models.attention import (  # noqa: E402
    apply_rope,
    attend,
    causal_mask,
    rope_attention_factor,
    rope_inv_freq,
    rope_tables,
    visible,
)

# gpt-oss-20b's RoPE (config.json): YaRN, factor 32 over a 4,096-token pretraining length
YARN = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 4096, "rope_theta": 150000.0}


def hf_config(**rope: object) -> transformers.GptOssConfig:
    return transformers.GptOssConfig(hidden_size=2880, head_dim=64, num_attention_heads=64, num_key_value_heads=8,
                                     max_position_embeddings=131072, rope_parameters=dict(YARN, **rope))


def wren_args(**rope: object) -> ModelArgs:
    return ModelArgs(model_type="gpt_oss", vocab_size=10, hidden_size=2880, intermediate_size=2880,
                     num_hidden_layers=1, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                     rope_theta=150000.0, rope_scaling=dict(YARN, **rope), max_position_embeddings=131072)


@pytest.mark.parametrize("rope", [{}, {"truncate": True}, {"factor": 8.0, "beta_fast": 16.0}])
def test_yarn_frequencies_and_scale_match_transformers(rope: dict) -> None:
    want, want_scale = ROPE_INIT_FUNCTIONS["yarn"](hf_config(**rope), "cpu")
    got = rope_inv_freq(wren_args(**rope))
    # transformers computes in float32, Wren in float64 (rounded once into the tables)
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-6, atol=0)
    assert rope_attention_factor(wren_args(**rope)) == pytest.approx(want_scale, rel=1e-12)
    assert want_scale == pytest.approx(0.1 * math.log(rope.get("factor", 32.0)) + 1)  # not 1: it scales q and k


def test_yarn_tables_rotate_as_transformers_does() -> None:
    config = hf_config()
    rotary = hf.GptOssRotaryEmbedding(config)
    # transformers' angles are float32 products (off by ~position * 1e-7 rad), Wren's float64:
    # positions where that stays small
    positions = torch.tensor([[0, 1, 7, 300, 2047, 4095]])
    x = torch.randn(1, 6, 64)
    cos_hf, sin_hf = rotary(x, positions)
    q = torch.randn(1, 2, 6, 64)  # [B, heads, L, dim]
    want, _ = hf.apply_rotary_pos_emb(q, q, cos_hf, sin_hf)
    cos, sin = rope_tables(wren_args(), 4096, "cpu", torch.float32)
    got = apply_rope(q.transpose(1, 2), cos[positions[0]], sin[positions[0]]).transpose(1, 2)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-3)


def hf_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor,
                 mask: torch.Tensor | None) -> torch.Tensor:
    """transformers' eager gpt-oss attention: q [B, heads, L, d], k/v [B, kv, T, d]."""
    module = SimpleNamespace(num_key_value_groups=q.shape[1] // k.shape[1], sinks=sinks, training=False)
    out, _ = hf.eager_attention_forward(module, q, k, v, mask, scaling=q.shape[-1] ** -0.5)
    return out  # [B, L, heads, d]


@pytest.mark.parametrize("length,start,window", [(7, 0, None), (1, 9, None), (5, 4, None), (6, 3, 4), (1, 9, 4)])
def test_sinks_match_transformers(length: int, start: int, window: int | None) -> None:
    gen = torch.Generator().manual_seed(length * 10 + start)
    heads, kv, dim, span = 6, 2, 16, start + length
    q = torch.randn(1, length, heads, dim, generator=gen)
    keys = torch.randn(1, kv, span, dim, generator=gen)
    values = torch.randn(1, kv, span, dim, generator=gen)
    sinks = torch.randn(heads, generator=gen) * 3
    additive = causal_mask(length, start, 0, window, "cpu", torch.float32)
    want = hf_attention(q.transpose(1, 2), keys, values, sinks, additive[None, None])
    got = attend(q, keys, values, additive, sinks=sinks)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the boolean mask the batched step and the rings pass, and the causal flag of a prompt
    seen = visible(torch.arange(start, span)[:, None], torch.arange(span)[None, :], window)[None, None]
    torch.testing.assert_close(attend(q, keys, values, seen, sinks=sinks), want, rtol=1e-5, atol=1e-5)
    if start == 0 and window is None:
        torch.testing.assert_close(attend(q, keys, values, causal=True, sinks=sinks), want, rtol=1e-5, atol=1e-5)


def test_a_sink_takes_attention_away_from_the_keys() -> None:
    # a very large sink leaves almost nothing for the keys; a very small one changes nothing
    q, keys, values = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    plain = attend(q, keys, values)
    torch.testing.assert_close(attend(q, keys, values, sinks=torch.full((2,), -1e4)), plain)
    assert attend(q, keys, values, sinks=torch.full((2,), 1e4)).abs().max() < 1e-6


def test_sinks_of_a_batched_step_over_cache_slices_match_transformers() -> None:
    # a batched decoding step: three sequences, one query each, whose keys are the first
    # `span` positions of a longer cache (a view, not contiguous), each row's own positions
    gen = torch.Generator().manual_seed(5)
    heads, kv, dim, span = 8, 2, 16, 11
    cache_k, cache_v = torch.randn(3, kv, 32, dim, generator=gen), torch.randn(3, kv, 32, dim, generator=gen)
    keys, values = cache_k[:, :, :span], cache_v[:, :, :span]
    q = torch.randn(3, 1, heads, dim, generator=gen)
    sinks = torch.randn(heads, generator=gen) * 3
    pos = torch.tensor([10, 4, 7])
    seen = visible(pos[:, None], torch.arange(span)[None, :], 6)[:, None, None, :]  # [B, 1, 1, span]
    additive = torch.zeros(seen.shape).masked_fill(~seen, float("-inf"))
    want = hf_attention(q.transpose(1, 2), keys, values, sinks, additive)
    torch.testing.assert_close(attend(q, keys, values, seen, sinks=sinks), want, rtol=1e-5, atol=1e-5)
