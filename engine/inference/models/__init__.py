"""Model definitions for the torch backend, one file per architecture family."""

from .llama import ModelArgs, Transformer, build_model

__all__ = ["ModelArgs", "Transformer", "build_model"]
