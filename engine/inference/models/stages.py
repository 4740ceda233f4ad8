"""A model's decoder layers as runs of consecutive layers on one device and dtype.

A model split between a GPU and the CPU (engine.inference.models.offload) runs layers
[0, n) on one device and [n, L) on another; the hidden state and the step's other inputs
(RoPE rows, positions, slot ids) cross to the next run once per step. A model on one
device is one run, and nothing moves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


class Stages:
    """(first, end, device, dtype) for each run of layers, in order; a layer's device and
    dtype are its attention norm's. A run also ends before each index in `cuts` (a split's
    boundary, kept even where both sides are one device, as when the CPU stands in for both)."""

    def __init__(self, layers: Sequence[torch.nn.Module], cuts: Sequence[int] = ()) -> None:
        runs: list[tuple[int, int, torch.device, torch.dtype]] = []
        for i, layer in enumerate(layers):
            weight = layer.attention_norm.weight  # type: ignore[union-attr]
            if runs and i not in cuts and runs[-1][2:] == (weight.device, weight.dtype):
                runs[-1] = (runs[-1][0], i + 1, weight.device, weight.dtype)
            else:
                runs.append((i, i + 1, weight.device, weight.dtype))
        self.runs = runs

    @property
    def split(self) -> bool:
        return len(self.runs) > 1

    def run(self, layers: Sequence, h: torch.Tensor, inputs: tuple, call: Callable) -> torch.Tensor:
        """h through every layer: `call(layer, h, *inputs)`, with h and the tensors among
        `inputs` moved to each run's device (floating ones to its dtype too) as it starts."""
        for first, end, device, dtype in self.runs:
            if h.device != device or h.dtype != dtype:
                h = h.to(device, dtype)
            inputs = tuple(moved(x, device, dtype) for x in inputs)
            for layer in layers[first:end]:
                h = call(layer, h, *inputs)
        return h


def moved(x, device: torch.device, dtype: torch.dtype):
    """A tensor on `device` (and in `dtype` when it holds floats); anything else as it is."""
    if not isinstance(x, torch.Tensor):
        return x
    return x.to(device, dtype) if x.is_floating_point() else x.to(device)
