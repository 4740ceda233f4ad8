"""Installed models: the registry, GGUF import and hub downloads."""

from .gguf_import import SUPPORTED_MODEL_TYPES, ImportSummary, convert_gguf, import_gguf
from .registry import STARTER_NAME, ModelInfo, ModelRegistry, ModelSource

__all__ = [
    "STARTER_NAME",
    "SUPPORTED_MODEL_TYPES",
    "ImportSummary",
    "ModelInfo",
    "ModelRegistry",
    "ModelSource",
    "convert_gguf",
    "import_gguf",
]
