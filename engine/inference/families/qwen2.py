"""Qwen2 (Qwen 2 and 2.5): llama's layout with q/k/v always biased, NEOX-style RoPE
(stored in HF order, not permuted), and hermes `<tool_call>` calls."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from . import llama
from .family import Family, MetadataReader, Windows, layer_windows
from .formats import HERMES


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    return {"attention_bias": True, "use_sliding_window": False}


def sliding_windows(config: Mapping[str, Any], layers: int) -> Windows:
    """Qwen configs carry a window they use only when use_sliding_window is set, on the
    layers from max_window_layers on."""
    window = config.get("sliding_window") if config.get("use_sliding_window", False) else None

    def kinds() -> list[str]:
        first = int(config.get("max_window_layers", layers))
        return ["full_attention" if i < first else "sliding_attention" for i in range(layers)]

    return layer_windows(config, layers, window, kinds)


FAMILY = Family(
    name="qwen2",
    hf_class="Qwen2ForCausalLM",
    model_types=("qwen2",),
    gguf_architectures=("qwen2",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=llama.LAYER_TENSORS,
    permuted_qk=False,
    gguf_config=gguf_config,
    sliding_windows=sliding_windows,
    tool_format=HERMES,
    qkv_bias_only=True,
)
