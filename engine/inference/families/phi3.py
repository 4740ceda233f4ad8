"""Phi-3 and Phi-4-mini (model_type phi3): llama's block with q/k/v and gate/up stored fused
(qkv_proj, gate_up_proj), NEOX-style RoPE over the first part of each head only
(partial_rotary_factor: 0.75 on Phi-4-mini), LongRoPE scaling, and a sliding window over
every layer where the config sets one.

LongRoPE's two tables of per-frequency factors come in config.json's rope_scaling
(short_factor, long_factor) or, in a GGUF, as the tensors rope_factors_short/long, which the
importer reads into the same config (engine/modelhub/gguf_import.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

from . import llama
from .family import Family, MetadataReader, Windows, layer_windows
from .formats import PHI4

LAYER_TENSORS = MappingProxyType({
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_up": "mlp.gate_up_proj",  # gate rows first, then up
    "ffn_down": "mlp.down_proj",
})


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    hidden, heads = opt("embedding_length", 0), opt("attention.head_count", 1)
    head_dim = opt("attention.key_length", hidden // heads)
    config: dict[str, Any] = {
        "attention_bias": False,
        # llama.cpp writes 0 for "no window" (Phi-4-mini)
        "sliding_window": opt("attention.sliding_window", 0) or None,
        "partial_rotary_factor": opt("rope.dimension_count", head_dim) / head_dim,
    }
    original = opt("rope.scaling.original_context_length", None)
    if original:
        config["original_max_position_embeddings"] = original
    return config


def sliding_windows(config: Mapping[str, Any], layers: int) -> Windows:
    # A window as long as the model's whole context (Phi-3.5-mini's 262144) is no window.
    window = config.get("sliding_window")
    if window and window >= int(config.get("max_position_embeddings") or 0) > 0:
        window = None
    return layer_windows(config, layers, window, lambda: ["sliding_attention"] * layers)


def model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    # transformers >= 5 keeps it in rope_parameters, older configs at the top level
    factor = config.get("partial_rotary_factor") or (config.get("rope_parameters") or {}).get("partial_rotary_factor")
    return {"partial_rotary_factor": float(factor or 1.0)}


FAMILY = Family(
    name="phi3",
    hf_class="Phi3ForCausalLM",
    model_types=("phi3",),
    gguf_architectures=("phi3",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=LAYER_TENSORS,
    permuted_qk=False,
    gguf_config=gguf_config,
    sliding_windows=sliding_windows,
    # Phi-4-mini declares tools in <|tool|>...<|/tool|> and calls them with
    # <|tool_call|>{...}<|/tool_call|>; Phi-3.5's template has no tools (Wren's own instructions).
    tool_format=PHI4,
    tool_format_needs="<|tool|>",
    fused_projections=True,
    partial_rotary=True,
    model_args=model_args,
)
