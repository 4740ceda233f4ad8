"""Llama (Llama 2 and 3.x, SmolLM, and most llama-shaped models): the template family.

A new family copies this file and changes what differs."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

from .family import Family, MetadataReader, Windows, layer_windows
from .formats import LLAMA3

GLOBAL_TENSORS = MappingProxyType({
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
})
# In the order a missing one is reported.
LAYER_TENSORS = MappingProxyType({
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
})
_BIASES = ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias")


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    """All four attention projections are biased or none is; the MLP never is."""
    return {"attention_bias": any(name.endswith(_BIASES) for name in tensors), "mlp_bias": False}


def sliding_windows(config: Mapping[str, Any], layers: int) -> Windows:
    # HF llama has no sliding window unless layer_types asks for one.
    window = config.get("sliding_window") if config.get("layer_types") else None
    return layer_windows(config, layers, window, lambda: ["sliding_attention"] * layers)


FAMILY = Family(
    name="llama",
    hf_class="LlamaForCausalLM",
    model_types=("llama",),
    gguf_architectures=("llama",),
    global_tensors=GLOBAL_TENSORS,
    layer_tensors=LAYER_TENSORS,
    permuted_qk=True,
    gguf_config=gguf_config,
    sliding_windows=sliding_windows,
    # Llama 2 shares the model_type but has no tool calls: only a Llama 3 template says so.
    tool_format=LLAMA3,
    tool_format_needs="<|start_header_id|>",
)
