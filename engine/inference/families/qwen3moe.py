"""Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention (q/k norms per head,
NEOX-style RoPE, not permuted) with a mixture of experts in every layer's MLP: a softmax
router over all experts, the top k, their weights renormalised (llama.cpp always
renormalises for this architecture, so a GGUF's experts were made to be read so); hermes
`<tool_call>` calls and `<think>` thinking, as qwen3."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

from ...errors import UnsupportedArchitecture
from . import llama, qwen2, qwen3
from .family import Family, MetadataReader, ReasoningFormat
from .formats import HERMES

_DENSE_MLP = ("ffn_gate", "ffn_up", "ffn_down")
# GGUF part -> mlx-lm's qwen3_moe names (its SwitchGLU), which the torch model reads too
# (model_args' router_name and experts_name)
EXPERT_TENSORS = MappingProxyType({
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
})
LAYER_TENSORS = MappingProxyType(
    {part: name for part, name in qwen3.LAYER_TENSORS.items() if part not in _DENSE_MLP} | dict(EXPERT_TENSORS))


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    """The expert sizes from the metadata; every layer sparse, the weights renormalised."""
    return llama.gguf_config(opt, tensors) | {
        "num_experts": opt("expert_count", 0),
        "num_experts_per_tok": opt("expert_used_count", 0),
        "moe_intermediate_size": opt("expert_feed_forward_length", 0),
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }


def model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    if config.get("mlp_only_layers") or int(config.get("decoder_sparse_step", 1)) != 1:
        raise UnsupportedArchitecture("a qwen3_moe model with dense layers (mlp_only_layers, decoder_sparse_step) "
                                      "is not supported; Wren runs it with experts in every layer")
    return {
        "num_experts": int(config["num_experts"]),
        "num_experts_per_tok": int(config["num_experts_per_tok"]),
        "moe_intermediate_size": int(config["moe_intermediate_size"]),
        "expert_router": "softmax_topk" if config.get("norm_topk_prob", False) else "softmax_topk_raw",
        "expert_activation": "swiglu",
        "router_name": "gate",
        "experts_name": "switch_mlp",
    }


FAMILY = Family(
    name="qwen3moe",
    hf_class="Qwen3MoeForCausalLM",
    model_types=("qwen3_moe",),
    gguf_architectures=("qwen3moe",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=LAYER_TENSORS,
    permuted_qk=False,
    gguf_config=gguf_config,
    sliding_windows=qwen2.sliding_windows,
    tool_format=HERMES,
    qk_norm=True,
    model_args=model_args,
    reasoning=ReasoningFormat.THINK_TAGS,
    experts=True,
)
