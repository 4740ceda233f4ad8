"""Mistral: llama's layout with a sliding window over every layer, and `[TOOL_CALLS]` calls."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from . import llama
from .family import Family, MetadataReader, Windows, layer_windows
from .formats import MISTRAL


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    return llama.gguf_config(opt, tensors) | {"sliding_window": opt("attention.sliding_window", None)}


def sliding_windows(config: Mapping[str, Any], layers: int) -> Windows:
    return layer_windows(config, layers, config.get("sliding_window"), lambda: ["sliding_attention"] * layers)


FAMILY = Family(
    name="mistral",
    hf_class="MistralForCausalLM",
    model_types=("mistral",),
    gguf_architectures=("mistral",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=llama.LAYER_TENSORS,
    permuted_qk=True,
    gguf_config=gguf_config,
    sliding_windows=sliding_windows,
    tool_format=MISTRAL,
)
