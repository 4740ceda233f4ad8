"""Model definitions for the torch backend, one file per architecture family."""

from .llama import SUPPORTED_MODEL_TYPES, ModelArgs, Transformer, build_model

__all__ = ["SUPPORTED_MODEL_TYPES", "ModelArgs", "Transformer", "build_model"]
