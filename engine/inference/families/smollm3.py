"""SmolLM3 (model_type smollm3): llama's layout, but every fourth layer (3, 7, 11, ...)
attends without RoPE. config.json lists it per layer in no_rope_layers (1: RoPE, 0: none),
else derives it from no_rope_layer_interval; a GGUF has neither, and llama.cpp fixes the
interval at 4, as Wren's import does."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from . import llama
from .family import Family, MetadataReader, ReasoningFormat
from .formats import HERMES

INTERVAL = 4


def rope_layers(layers: int, interval: int = INTERVAL) -> list[int]:
    """HF's no_rope_layers: 1 where a layer uses RoPE, 0 on every interval-th layer."""
    return [int((i + 1) % interval != 0) for i in range(layers)]


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    layers = int(opt("block_count", 0))
    return llama.gguf_config(opt, tensors) | {
        "no_rope_layer_interval": INTERVAL, "no_rope_layers": rope_layers(layers)}


def model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    listed = config.get("no_rope_layers")
    if listed is None:
        listed = rope_layers(layers, int(config.get("no_rope_layer_interval") or INTERVAL))
    return {"rope_layers": tuple(bool(x) for x in listed)}


FAMILY = Family(
    name="smollm3",
    hf_class="SmolLM3ForCausalLM",
    model_types=("smollm3",),
    gguf_architectures=("smollm3",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=llama.LAYER_TENSORS,
    permuted_qk=True,
    gguf_config=gguf_config,
    sliding_windows=llama.sliding_windows,
    tool_format=HERMES,
    tool_format_needs="<tool_call>",
    model_args=model_args,
    # thinks between <think> and </think>, on unless the system prompt says /no_think
    reasoning=ReasoningFormat.THINK_TAGS,
)
