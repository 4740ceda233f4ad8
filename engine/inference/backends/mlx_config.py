"""config.json as mlx-lm's model classes read it (engine.inference.backends.mlx hands
`mlx_overrides` to mlx_lm.utils.load_model, which lays them over the folder's config.json).

mlx-lm reads RoPE settings at the top level (rope_theta, rope_scaling with its "type",
partial_rotary_factor, gemma3's rope_local_base_freq). transformers 5 saves them nested
under rope_parameters, and gemma3's per layer type ({"full_attention": {...},
"sliding_attention": {...}}); mlx-lm would take its defaults instead (Llama 3's theta of
500000 read as 10000, no scaling at all). GGUF imports write the flat keys already.

LongRoPE (phi3): mlx-lm's SuScaledRoPE always turns by the long factors; Wren turns by the
short ones while the KV cache is no longer than the pretraining length, as the torch model
does (engine/inference/models/attention.py), so the short table is handed over as the
one mlx-lm uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# rope_parameters keys that are not part of mlx-lm's rope_scaling
_NOT_SCALING = ("rope_theta", "partial_rotary_factor")


def longrope_original(config: Mapping[str, Any]) -> int | None:
    """The pretraining length a LongRoPE model switches tables at; None for other RoPE."""
    scaling = _scaling(config)
    if not scaling or scaling.get("rope_type", scaling.get("type")) not in ("longrope", "su"):
        return None
    original = scaling.get("original_max_position_embeddings") or config.get("original_max_position_embeddings")
    return int(original) if original else None


def mlx_overrides(config: Mapping[str, Any], context_length: int) -> dict[str, Any]:
    """The top-level keys mlx-lm needs that `config` keeps nested (or must read another
    way at this context length); {} when config.json reads right as it is."""
    out: dict[str, Any] = {}
    params = config.get("rope_parameters") or {}
    nested = config.get("rope_scaling") or {}
    by_layer = params if _per_layer_type(params) else nested if _per_layer_type(nested) else None
    if by_layer is not None:  # gemma3: a global and a local base, scaling on the global layers only
        full, local = by_layer.get("full_attention") or {}, by_layer.get("sliding_attention") or {}
        if full.get("rope_theta") is not None:
            out["rope_theta"] = float(full["rope_theta"])
        if local.get("rope_theta") is not None:
            out["rope_local_base_freq"] = float(local["rope_theta"])
        out["rope_scaling"] = _mlx_scaling(full)
    elif params:
        if config.get("rope_theta") is None and params.get("rope_theta") is not None:
            out["rope_theta"] = float(params["rope_theta"])
        if config.get("partial_rotary_factor") is None and params.get("partial_rotary_factor") is not None:
            out["partial_rotary_factor"] = float(params["partial_rotary_factor"])
        if not config.get("rope_scaling"):
            out["rope_scaling"] = _mlx_scaling(params)
    original = longrope_original(config)
    if original is not None:
        scaling = dict(out.get("rope_scaling") or config.get("rope_scaling") or {})
        out["original_max_position_embeddings"] = original
        if context_length <= original:
            scaling["long_factor"] = scaling["short_factor"]
        out["rope_scaling"] = scaling
    return out


def _per_layer_type(params: Mapping[str, Any]) -> bool:
    return isinstance(params.get("full_attention"), Mapping) or isinstance(params.get("sliding_attention"), Mapping)


def _scaling(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if isinstance(value, Mapping) and value and not _per_layer_type(value):
            return value
    return None


def _mlx_scaling(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """rope_parameters as mlx-lm's rope_scaling: without the base, with both "type" and
    "rope_type" (mlx-lm's modules read one or the other); None for plain RoPE."""
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return None
    return {k: v for k, v in params.items() if k not in _NOT_SCALING} | {"type": kind, "rope_type": kind}
