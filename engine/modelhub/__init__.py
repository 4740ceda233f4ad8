"""Installed models: the registry, GGUF import and hub downloads."""

from .gguf_import import ImportSummary, convert_gguf, import_gguf
from .registry import STARTER_NAME, ModelInfo, ModelRegistry, ModelSource

__all__ = [
    "STARTER_NAME",
    "ImportSummary",
    "ModelInfo",
    "ModelRegistry",
    "ModelSource",
    "convert_gguf",
    "import_gguf",
]
