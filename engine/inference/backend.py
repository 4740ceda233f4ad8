"""The contract every inference backend implements.

A backend turns a model folder (HF layout: config.json, *.safetensors, tokenizer.json)
into a `LoadedModel`: a stateful object that owns one KV cache and knows only token ids.
All calls on a `LoadedModel` happen on its one inference thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np


def check_slot(slot: int, slots: int) -> None:
    """For models with KV slots: refuse a slot the model does not have."""
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot} is outside 0..{slots - 1}")


def check_batch(tokens: Sequence[int], positions: Sequence[int], slots: Sequence[int],
                slot_count: int, context_length: int) -> None:
    """Refuse a batched step (`decode_batch`) whose rows do not fit the model."""
    if not (len(tokens) == len(positions) == len(slots) >= 1):
        raise ValueError("tokens, positions and slots must be equally long and not empty")
    if len(set(slots)) != len(slots) or not all(0 <= s < slot_count for s in slots):
        raise ValueError(f"slots {list(slots)} must be distinct and within 0..{slot_count - 1}")
    if not all(0 <= p < context_length for p in positions):
        raise ValueError(f"positions {list(positions)} are outside the {context_length}-token context")


@runtime_checkable
class LoadedModel(Protocol):
    backend: str  # "torch-cpu", "torch-cuda", "mlx", "scripted"
    context_length: int  # positions the KV cache holds
    vocab_size: int

    def prefill(self, ids: Sequence[int], start: int) -> np.ndarray:
        """Run `ids` at positions start..start+len-1 and return float32 logits [vocab]
        of the last one. Cache entries at positions >= start are overwritten, so a caller
        reuses a cached prefix by passing start = length of the shared prefix."""

    def decode(self, token: int, pos: int) -> np.ndarray:
        """Run one token at position `pos`; float32 logits [vocab]."""

    def close(self) -> None:
        """Free weights and cache."""


class Backend(Protocol):
    name: str

    def available(self) -> bool: ...

    def load(self, model_dir: Path, *, dtype: str = "auto") -> LoadedModel: ...
