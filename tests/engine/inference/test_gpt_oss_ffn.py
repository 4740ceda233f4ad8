"""gpt-oss's router (engine/inference/models/experts.topk_softmax) and expert activation
(gpt_oss_ffn.clamped_swiglu) against transformers' GptOssTopKRouter and GptOssExperts on the
same numbers."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.models.gpt_oss import modeling_gpt_oss as hf  # noqa: E402

from wren.engine.inference.models.experts import ACTIVATIONS, topk_softmax  # noqa: E402
from wren.engine.inference.models.gpt_oss_ffn import clamped_swiglu  # noqa: E402


def test_router_picks_and_weighs_as_transformers() -> None:
    config = transformers.GptOssConfig(hidden_size=24, num_local_experts=32, num_experts_per_tok=4)
    router = hf.GptOssTopKRouter(config)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        router.weight.copy_(torch.randn(32, 24, generator=gen))
        router.bias.copy_(torch.randn(32, generator=gen))
    x = torch.randn(50, 24, generator=gen)
    logits, want_weights, want_experts = router(x)
    weights, experts = topk_softmax(x @ router.weight.T + router.bias, 4)
    assert torch.equal(experts, want_experts)
    torch.testing.assert_close(weights, want_weights, rtol=1e-6, atol=1e-7)
    # softmax after selection: the four weights sum to 1, whatever the other 28 logits are
    torch.testing.assert_close(weights.sum(-1), torch.ones(50))
    assert not torch.allclose(weights, torch.softmax(logits, -1).gather(-1, experts))


def test_swiglu_clamps_and_adds_one_as_transformers() -> None:
    config = transformers.GptOssConfig(hidden_size=8, intermediate_size=6, num_local_experts=2)
    experts = hf.GptOssExperts(config)
    gate_up = torch.randn(40, 12, generator=torch.Generator().manual_seed(1)) * 6  # past the limit of 7
    want = experts._apply_gate(gate_up)
    got = clamped_swiglu(gate_up[..., ::2], gate_up[..., 1::2])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert (gate_up.abs() > 7).any()
    assert ACTIVATIONS["clamped_swiglu"] is clamped_swiglu  # what the family's model_args names
