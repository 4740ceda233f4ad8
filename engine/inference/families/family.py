"""What one model family declares (`Family`), and the tool-call formats (`ToolFormat`) a
family's models write; engine.inference.families keeps the registry of both."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

# A GGUF metadata reader, as the importer gives it: opt("attention.sliding_window", None)
# reads "<arch>.attention.sliding_window", or returns the default when the file lacks it.
MetadataReader = Callable[[str, Any], Any]
Windows = tuple[int | None, ...]


def no_model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    return {}


class ReasoningFormat(enum.Enum):
    """How a model writes its thinking apart from its answer (engine.inference.reasoning
    splits a stream by it)."""

    THINK_TAGS = "think_tags"  # <think>…</think> before the answer (Qwen3, DeepSeek-R1 distills, SmolLM3)
    HARMONY = "harmony"  # gpt-oss: <|channel|>analysis<|message|>… then the final channel


@dataclass(frozen=True)
class ToolFormat:
    """How a model writes a tool call: what the stream parser watches for (`marker`), and
    one call's text for constrained decoding, `before` + `{"name": N, "<args_key>": A}` +
    `after` (`array` wraps the call objects in [ ]; `trigger` starts a call in free text)."""

    name: str
    marker: str
    trigger: str
    before: str
    after: str
    args_key: str
    array: bool = False
    bare: bool = False  # a call may be the whole answer, without its marker


@dataclass(frozen=True)
class Family:
    """One decoder family: how its GGUF files and Hugging Face folders are read, and how
    its models write tool calls. The first model_type is the one an import writes."""

    name: str
    hf_class: str  # config.json's "architectures" entry
    model_types: tuple[str, ...]  # Hugging Face config.json model_type values
    gguf_architectures: tuple[str, ...]  # GGUF general.architecture values
    # GGUF tensor name -> HF name: whole-model tensors, and each layer's parts
    # (blk.N.<part>.weight -> model.layers.N.<name>.weight); every layer needs every part.
    global_tensors: Mapping[str, str]
    layer_tensors: Mapping[str, str]
    # llama.cpp's converter interleaves Q/K rows into Meta's RoPE layout for this family;
    # the import reads them back in HF's rotate-half order (a lossless row permutation).
    permuted_qk: bool
    # GGUF metadata -> the family's own config.json keys (the shared ones are the importer's)
    gguf_config: Callable[[MetadataReader, Collection[str]], dict[str, Any]]
    # config.json -> each layer's sliding window (None: full attention)
    sliding_windows: Callable[[Mapping[str, Any], int], Windows]
    tool_format: ToolFormat
    # The chat template must hold this for `tool_format` to apply (None: always applies).
    tool_format_needs: str | None = None
    qkv_bias_only: bool = False  # q/k/v always biased, o_proj never
    qk_norm: bool = False  # RMSNorm over each head of q and k before RoPE
    # Added to every norm weight of a Hugging Face checkpoint (gemma's RMSNorm scales by
    # 1 + weight); llama.cpp's converter stores the sum, which the torch model uses as is.
    norm_offset: float = 0.0
    qk_norm_whole: bool = False  # olmo2: q_norm and k_norm span all of q and k, not a head
    # mlx-lm's module leaves out config.json's final_logit_softcapping: Wren's MLX backend
    # caps the logits (gemma3)
    mlx_softcap: bool = False
    # q/k/v and gate/up come as one tensor each (HF qkv_proj, gate_up_proj; GGUF attn_qkv, ffn_up)
    fused_projections: bool = False
    # RoPE may turn only the first part of each head (GGUF rope.dimension_count < head size)
    partial_rotary: bool = False
    # config.json -> the torch model's quirk fields (engine/inference/models/args.py:
    # multipliers, partial rotary, layers without RoPE)
    model_args: Callable[[Mapping[str, Any], int], dict[str, Any]] = no_model_args
    # How its models write their thinking; None: found from the chat template, if at all
    # (engine.inference.reasoning.reasoning_format).
    reasoning: ReasoningFormat | None = None
    # A mixture of experts: its layers' MLP is a router and 3-D expert tensors (GGUF
    # expert_count, expert_used_count, expert_feed_forward_length; engine.inference.models.experts)
    experts: bool = False
    # Layer parts besides q/k/v/o whose GGUF tensors carry a bias (gpt-oss: router, experts)
    extra_bias_parts: frozenset[str] = frozenset()

    @property
    def model_type(self) -> str:
        return self.model_types[0]

    @property
    def bias_parts(self) -> frozenset[str]:
        """The layer parts a GGUF of this family may carry biases for."""
        parts = {"attn_q", "attn_k", "attn_v"}
        return frozenset(parts if self.qkv_bias_only else parts | {"attn_output"}) | self.extra_bias_parts


# A sliding-window layer's KV cache keeps its window and this many positions more (the
# torch model's rings, engine.inference.models.attention; the slack lets a sequence go back
# that far and go on from there).
#
# Going back further (a regenerate after an answer longer than the slack, an edit or a
# branch switch far back) re-reads the prompt from the start, by design: the ring has
# overwritten the keys the new position must see, and they cannot be recomputed from a
# part of the prompt (a sliding layer's keys at a position depend, through the layers
# below, on everything before it), so a partial re-read would not be the model's answer.
# llama.cpp's SWA cache starts over the same way. The prefix cache still restores another
# conversation's saved state whole (engine.inference.prefix_cache); what would make the
# common case free is a copy of the rings at each prompt's end, taken when the answer
# passes the slack (not done yet). tests/engine/inference/test_sliding_window_cache.py
# checks both: within the slack the cache is reused, beyond it the restart gives
# transformers' logits.
RING_SLACK = 256


def ring_size(window: int | None, context_length: int) -> int:
    """The positions a layer of this window keeps at this context; 0 where a plain cache
    of the whole context is no bigger."""
    if window is None or context_length <= window + RING_SLACK:
        return 0
    return window + RING_SLACK


def layer_windows(config: Mapping[str, Any], layers: int, window: Any,
                  default_kinds: Callable[[], list[str]]) -> Windows:
    """Each layer's window from config.json's layer_types, else the family's default kinds."""
    if not window:
        return (None,) * layers
    kinds = list(config["layer_types"]) if config.get("layer_types") else default_kinds()
    return tuple(int(window) if kind == "sliding_attention" else None for kind in kinds)
