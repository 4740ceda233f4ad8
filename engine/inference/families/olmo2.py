"""OLMo 2: norms after attention and after the MLP (none before), an RMSNorm over all of q
and all of k (not per head), NEOX-style RoPE (stored in HF order, not permuted), no biases.
Its template has no tool calls: Wren's instructions teach hermes."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

from . import llama
from .family import Family, MetadataReader, Windows
from .formats import HERMES

LAYER_TENSORS = MappingProxyType({
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_output": "self_attn.o_proj",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "post_ffw_norm": "post_feedforward_layernorm",
})


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    return {"attention_bias": False}


def sliding_windows(config: Mapping[str, Any], layers: int) -> Windows:
    return (None,) * layers  # OLMo 3's windows are another family's


def model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    return {"norm_placement": "post", "qk_norm_whole": True}


FAMILY = Family(
    name="olmo2",
    hf_class="Olmo2ForCausalLM",
    model_types=("olmo2",),
    gguf_architectures=("olmo2",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=LAYER_TENSORS,
    permuted_qk=False,
    gguf_config=gguf_config,
    sliding_windows=sliding_windows,
    tool_format=HERMES,
    tool_format_needs="<tool_call>",
    qk_norm=True,
    qk_norm_whole=True,
    model_args=model_args,
)
