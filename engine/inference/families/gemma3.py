"""Gemma 3 (text models, 270M-27B): interleaved sliding-window and global layers, each with
its own RoPE base, norms before and after attention and the MLP (RMSNorm scaling by
1 + weight), q/k RMSNorm per head, embeddings scaled by sqrt(hidden_size), a GELU-tanh MLP,
the attention scaled by query_pre_attn_scalar, and tied embeddings.

The 4B-27B checkpoints are multimodal (model_type "gemma3", the text model under
text_config); llama.cpp's converter writes their text model as a "gemma3" GGUF, which is
what Wren runs. The converter stores each norm weight plus 1 (the family's `norm_offset`)
and records neither the layer pattern (llama.cpp's default: every sixth layer global) nor
the query scale (27B: hidden_size / heads; the others: the head size): both are read here
the way llama.cpp reads them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

from ...errors import UnsupportedArchitecture
from . import llama
from .family import Family, MetadataReader, Windows, layer_windows
from .formats import HERMES

LAYER_TENSORS = MappingProxyType({
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_output": "self_attn.o_proj",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "post_ffw_norm": "post_feedforward_layernorm",
})
DEFAULT_PATTERN = 6  # five sliding-window layers, then a global one
LOCAL_ROPE_THETA = 10000.0
GLOBAL_ROPE_THETA = 1_000_000.0
GELU_TANH = "gelu_pytorch_tanh"
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")  # all the tanh approximation
LAYERS_27B = 62  # llama.cpp scales 27B's queries by hidden_size / heads, not the head size


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    layers, hidden = int(opt("block_count", 0)), int(opt("embedding_length", 0))
    heads = int(opt("attention.head_count", 1))
    head_dim = int(opt("attention.key_length", hidden // heads))
    window = opt("attention.sliding_window", None)
    pattern = int(opt("attention.sliding_window_pattern", DEFAULT_PATTERN)) if window else 1
    return {
        "hidden_act": GELU_TANH,
        "hidden_activation": GELU_TANH,
        "attention_bias": False,
        "sliding_window": int(window) if window else None,
        "sliding_window_pattern": pattern,
        "layer_types": _kinds(layers, pattern),
        "rope_local_base_freq": float(opt("rope.freq_base_swa", LOCAL_ROPE_THETA)),
        "query_pre_attn_scalar": hidden // heads if layers == LAYERS_27B else head_dim,
        "final_logit_softcapping": opt("final_logit_softcapping", None),
        "attn_logit_softcapping": None,
    }


def _kinds(layers: int, pattern: int) -> list[str]:
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]


def sliding_windows(config: Mapping[str, Any], layers: int) -> Windows:
    pattern = int(config.get("sliding_window_pattern") or config.get("_sliding_window_pattern") or DEFAULT_PATTERN)
    return layer_windows(config, layers, config.get("sliding_window"), lambda: _kinds(layers, pattern))


def model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """The torch model's gemma quirks from config.json (HF's flat keys, or transformers 5's
    rope_parameters per layer type)."""
    if config.get("attn_logit_softcapping"):
        raise UnsupportedArchitecture("attention logit soft-capping (Gemma 2) is not supported; Gemma 3 has none")
    act = config.get("hidden_activation") or config.get("hidden_act") or GELU_TANH
    if act not in ACTIVATIONS:
        raise UnsupportedArchitecture(f"gemma3 with activation {act!r} is not supported; Wren runs {GELU_TANH}")
    params = config.get("rope_parameters") or {}
    full = dict(params.get("full_attention") or {})
    local = dict(params.get("sliding_attention") or {})
    theta = float(full.get("rope_theta") or config.get("rope_theta") or GLOBAL_ROPE_THETA)
    local_theta = float(local.get("rope_theta") or config.get("rope_local_base_freq") or LOCAL_ROPE_THETA)
    scaling = config.get("rope_scaling") or (full if full.get("rope_type", "default") != "default" else None)
    if local.get("rope_type", "default") != "default":
        raise UnsupportedArchitecture("gemma3 with scaled RoPE on its sliding-window layers is not supported")
    scaling = _rope_scaling(scaling)
    softcap = config.get("final_logit_softcapping")
    return {
        "norm_placement": "sandwich",
        "embedding_multiplier": math.sqrt(int(config["hidden_size"])),
        "hidden_act": GELU_TANH,
        "attention_multiplier": float(config.get("query_pre_attn_scalar") or config.get("head_dim") or 256) ** -0.5,
        "rope_theta": theta,
        "rope_scaling": scaling,
        "local_rope_theta": local_theta,
        "final_logit_softcap": float(softcap or 0.0),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
    }


def _rope_scaling(scaling: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The global layers' scaling: none, or linear (Gemma 3 4B-27B: factor 8)."""
    if not scaling:
        return None
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return None
    if kind != "linear":
        raise UnsupportedArchitecture(f"gemma3 with RoPE scaling {kind!r} is not supported; Wren runs linear")
    return {"rope_type": "linear", "factor": float(scaling["factor"])}


FAMILY = Family(
    name="gemma3",
    hf_class="Gemma3ForCausalLM",
    model_types=("gemma3_text", "gemma3"),
    gguf_architectures=("gemma3",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=LAYER_TENSORS,
    permuted_qk=False,
    gguf_config=gguf_config,
    sliding_windows=sliding_windows,
    # Gemma 3's template has no tool calls of its own: Wren's instructions teach hermes.
    tool_format=HERMES,
    tool_format_needs="<tool_call>",
    qk_norm=True,
    norm_offset=1.0,
    mlx_softcap=True,
    model_args=model_args,
)
