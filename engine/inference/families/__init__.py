"""The model families Wren runs, one module per family, found by GGUF `general.architecture`
or by Hugging Face `model_type`. Everything that differs between families lives in its
module (a `Family`): tensor names and Q/K permutation for the GGUF import, the config.json
keys the import writes, the model's quirks (biases, q/k norms, sliding windows) and its
tool-call format. Nothing else in Wren keeps a list of model types: it asks here.

Adding a family:
1. Copy llama.py (the template) to `<model_type>.py` and change what differs: its names
   (HF class, model_types, GGUF architectures), tensor maps, `gguf_config`,
   `sliding_windows`, the quirk flags and its `tool_format` (formats.py; a new format
   also needs its parsing in engine/tools/parse.py).
2. Add its FAMILY to `FAMILIES` below.
3. Quirks the torch model knows already (multipliers, partial or per-layer RoPE, fused
   projections: ModelArgs' fields) are set from config.json by the family's `model_args`.
   A new one needs its field and code in engine/inference/models/ (and a flag on `Family`
   where the GGUF checks in engine/modelhub/validate.py must know it); MLX runs the family
   through mlx-lm's module of the same model_type.
4. Tests: tests/engine/inference/test_families.py covers the lookups; a tiny transformers
   model converted by llama.cpp (tests/data/families/make_tiny.py, read by
   tests/engine/modelhub/test_new_families.py) checks greedy agreement, bad files and MLX.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...errors import UnsupportedArchitecture
from . import gemma3, gpt_oss, granite, llama, mistral, olmo2, phi3, qwen2, qwen3, qwen3moe, smollm3
from .family import Family, ToolFormat
from .formats import HERMES

FAMILIES: tuple[Family, ...] = (
    llama.FAMILY, mistral.FAMILY, qwen2.FAMILY, qwen3.FAMILY, phi3.FAMILY, granite.FAMILY, smollm3.FAMILY,
    gemma3.FAMILY, olmo2.FAMILY, gpt_oss.FAMILY, qwen3moe.FAMILY,
)
DEFAULT_TOOL_FORMAT = HERMES  # Wren's own instructions describe it


def index(families: Iterable[Family], key: str) -> dict[str, Family]:
    """Each name under `key` ("model_types" or "gguf_architectures") -> its family; a name
    two families claim is a mistake in the registry, refused here."""
    found: dict[str, Family] = {}
    for family in families:
        for name in getattr(family, key):
            if name in found:
                raise ValueError(f"{key[:-1]} {name!r} is claimed by both {found[name].name} and {family.name}")
            found[name] = family
    return found


_BY_MODEL_TYPE = index(FAMILIES, "model_types")
_BY_ARCHITECTURE = index(FAMILIES, "gguf_architectures")
TOOL_FORMATS: dict[str, ToolFormat] = {f.name: f for f in (DEFAULT_TOOL_FORMAT, *(x.tool_format for x in FAMILIES))}


def model_types() -> tuple[str, ...]:
    """Every Hugging Face model_type Wren runs, sorted (for messages)."""
    return tuple(sorted(_BY_MODEL_TYPE))


def architectures() -> tuple[str, ...]:
    """Every GGUF general.architecture Wren imports, sorted (for messages)."""
    return tuple(sorted(_BY_ARCHITECTURE))


def find_model_type(model_type: object) -> Family | None:
    return _BY_MODEL_TYPE.get(model_type) if isinstance(model_type, str) else None


def find_architecture(architecture: object) -> Family | None:
    return _BY_ARCHITECTURE.get(architecture) if isinstance(architecture, str) else None


def by_model_type(model_type: object) -> Family:
    """The family of a config.json's model_type; UnsupportedArchitecture naming the
    supported ones when Wren has none."""
    family = find_model_type(model_type)
    if family is None:
        raise UnsupportedArchitecture(f"model_type {model_type!r} is not supported; Wren runs {', '.join(model_types())}")
    return family


def by_architecture(architecture: object) -> Family:
    """The family of a GGUF's general.architecture; UnsupportedArchitecture naming the
    supported ones when Wren has none."""
    family = find_architecture(architecture)
    if family is None:
        raise UnsupportedArchitecture(
            f"a {architecture!r} GGUF is not supported; Wren imports {', '.join(architectures())} GGUF files")
    return family


def tool_format_for(model_type: str | None, chat_template: str = "") -> ToolFormat | None:
    """The tool-call format a family's model writes, by its model_type, where its template
    allows it (a Llama 2 template has no Llama 3 calls); None for an unknown model_type."""
    family = find_model_type((model_type or "").lower())
    if family is None or (family.tool_format_needs and family.tool_format_needs not in chat_template):
        return None
    return family.tool_format


__all__ = [
    "DEFAULT_TOOL_FORMAT", "FAMILIES", "TOOL_FORMATS", "Family", "ToolFormat", "architectures", "by_architecture",
    "by_model_type", "find_architecture", "find_model_type", "index", "model_types", "tool_format_for",
]
