"""Granite 3.x dense (model_type granite): llama's layout and RoPE, with four multipliers:
the embeddings are scaled by embedding_multiplier, each block's attention and MLP outputs by
residual_multiplier before they join the residual stream, attention scores by
attention_multiplier (in place of 1/sqrt(head_dim)), and the logits are divided by
logits_scaling. llama.cpp stores them as embedding_scale, residual_scale, attention.scale
and logit_scale."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from . import llama
from .family import Family, MetadataReader
from .formats import GRANITE


def _short(value: float) -> float:
    return float(f"{float(value):.7g}")  # metadata floats are float32: keep the card's decimals


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    hidden, heads = opt("embedding_length", 0), opt("attention.head_count", 1)
    head_dim = opt("attention.key_length", hidden // heads)
    # llama.cpp reads a missing (or zero) scale as "none": 1, and 1/sqrt(head_dim) for attention
    return llama.gguf_config(opt, tensors) | {
        "embedding_multiplier": _short(opt("embedding_scale", 0.0) or 1.0),
        "residual_multiplier": _short(opt("residual_scale", 0.0) or 1.0),
        "attention_multiplier": _short(opt("attention.scale", 0.0) or head_dim**-0.5),
        "logits_scaling": _short(opt("logit_scale", 0.0) or 1.0),
    }


def model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    # transformers' GraniteConfig defaults, attention_multiplier's included (1.0)
    return {key: float(config.get(key, 1.0)) for key in
            ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling")}


FAMILY = Family(
    name="granite",
    hf_class="GraniteForCausalLM",
    model_types=("granite",),
    gguf_architectures=("granite",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=llama.LAYER_TENSORS,
    permuted_qk=True,
    gguf_config=gguf_config,
    sliding_windows=llama.sliding_windows,
    # Granite 3.x writes <|tool_call|>[...] where its template offers tools (a template with
    # hermes' <tool_call> gets hermes: engine.tools.parse.family_for reads that first).
    tool_format=GRANITE,
    tool_format_needs="<|tool_call|>",
    model_args=model_args,
)
