"""How much memory a model needs to run: its weights as stored, plus the KV cache for a
context; and sizes as people read them (human_size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ModelFileError

# the runtime, tokenizer, activations and allocator slack beside the weights and the cache
OVERHEAD_BYTES = 300 * 1024 * 1024
KV_BYTES_PER_VALUE = 4  # the KV cache holds float32


# Decimal units, as file managers and the window's Models page give sizes; kilobytes whole,
# larger units to a tenth.
_UNITS = (("KB", 10**3, 0), ("MB", 10**6, 1), ("GB", 10**9, 1), ("TB", 10**12, 1))


def human_size(n: int) -> str:
    """A size in bytes as a person reads it: "512 bytes", "237 KB", "98.4 MB", "4.9 GB".
    The unit is the largest the size reaches once rounded, so 999,960 bytes is "1.0 MB",
    never "1,000 KB", and a model under a megabyte is never "0 MB"."""
    n = max(int(n), 0)
    if n < 1000:
        return "1 byte" if n == 1 else f"{n} bytes"
    for unit, scale, places in _UNITS[:-1]:
        shown = round(n / scale, places)
        if shown < 1000:
            return f"{shown:,.{places}f} {unit}"
    unit, scale, places = _UNITS[-1]
    return f"{n / scale:,.{places}f} {unit}"


def weight_bytes(model_path: Path | str) -> int:
    """Bytes the weights take in memory, which is what they take on disk (blocks are kept as
    stored): model.gguf when the folder has one, else its .safetensors files."""
    folder = _folder(model_path)
    gguf = folder / "model.gguf"
    if gguf.is_file():
        return gguf.stat().st_size
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise ModelFileError(f"{folder} has neither model.gguf nor .safetensors weights")
    return sum(p.stat().st_size for p in shards)


def kv_cache_bytes(config: dict[str, Any], context: int) -> int:
    """Keys and values for `context` tokens: 2 x KV heads x head size x the positions each
    layer keeps (all `context`, or a sliding-window layer's ring), float32."""
    if context < 0:
        raise ValueError(f"context must be zero or more tokens, not {context}")
    try:
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ModelFileError(f"config.json lacks the model's shape ({exc!r})") from exc
    return 2 * kv_heads * head_dim * sum(_kept_positions(config, layers, context)) * KV_BYTES_PER_VALUE


def _kept_positions(config: dict[str, Any], layers: int, context: int) -> list[int]:
    from ..inference import families
    from ..inference.families.family import ring_size

    family = families.find_model_type(config.get("model_type"))
    try:
        windows = family.sliding_windows(config, layers) if family is not None else (None,) * layers
    except (KeyError, TypeError, ValueError):
        windows = (None,) * layers
    return [ring_size(window, context) or context for window in windows]


def active_parameters(config: dict[str, Any], total: int) -> int | None:
    """The parameters one token uses in a mixture of experts: all of them less the experts it
    does not pick (layers x unpicked experts x gate, up and down); None for a dense model."""
    experts = int(config.get("num_experts") or config.get("num_local_experts") or 0)
    if not experts:
        return None
    try:
        used = int(config["num_experts_per_tok"])
        inner = int(config.get("moe_intermediate_size") or config["intermediate_size"])
        per_expert = 3 * int(config["hidden_size"]) * inner
        layers = int(config["num_hidden_layers"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"config.json lacks the mixture's shape ({exc!r})") from exc
    return total - layers * (experts - used) * per_expert


def estimate_ram(model_path: Path | str, context: int) -> int:
    """Bytes of memory to run the model at `context` tokens: weights + KV cache + overhead."""
    folder = _folder(model_path)
    return weight_bytes(folder) + kv_cache_bytes(read_config(folder), context) + OVERHEAD_BYTES


def read_config(model_path: Path | str) -> dict[str, Any]:
    from ..inference.backends import read_model_config  # no torch: only config.json

    return read_model_config(_folder(model_path))


def _folder(model_path: Path | str) -> Path:
    path = Path(model_path)
    return path.parent if path.is_file() else path
