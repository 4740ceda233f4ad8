"""Qwen3 (dense): llama's layout plus an RMSNorm over each head of q and k, NEOX-style
RoPE (not permuted), Qwen's sliding-window rule, hermes `<tool_call>` calls and
`<think>` thinking."""

from __future__ import annotations

from types import MappingProxyType

from . import llama, qwen2
from .family import Family, ReasoningFormat
from .formats import HERMES

LAYER_TENSORS = MappingProxyType(dict(llama.LAYER_TENSORS) | {
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
})

FAMILY = Family(
    name="qwen3",
    hf_class="Qwen3ForCausalLM",
    model_types=("qwen3",),
    gguf_architectures=("qwen3",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=LAYER_TENSORS,
    permuted_qk=False,
    gguf_config=llama.gguf_config,
    sliding_windows=qwen2.sliding_windows,
    tool_format=HERMES,
    qk_norm=True,
    reasoning=ReasoningFormat.THINK_TAGS,
)
