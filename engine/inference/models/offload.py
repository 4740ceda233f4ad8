"""Loading a model split between two devices, as llama.cpp's `-ngl` does: layers [0, n) on
the first (a GPU), [n, L) on the second (the CPU, run by Wren's CPU kernels).

`Placement` says where each tensor goes by its HF name and `placed(get, placement)` hands
`build_model` every tensor already there: a weight in its file's blocks moves its raw bytes
once (a QTensor on the device, never widened); dense tensors (norms, biases) move in the
side's activation dtype. Each layer's KV cache then sits on its layer's device
(llama.Transformer.setup_cache) and a step moves the hidden state across the boundary once
each way (engine.inference.models.stages). The two devices may be the same: "cpu" on
both sides is how the split is tested without a GPU.

Which n comes from engine.inference.placement's plan; `gpu_memory` reads what the GPU has
free for it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..placement import GpuPlan, gpu_memory_from_env
from ..quant.modules import QTensor

_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_HEAD_NAMES = ("model.norm.weight", "lm_head.weight")


@dataclass(frozen=True)
class Placement:
    """Layers [0, first_layers) on `first`, the rest on `rest`, each side in its dtype; the
    embedding table and the output head (with the final norm) on the first side or not."""

    layers: int
    first_layers: int
    first: torch.device
    rest: torch.device
    first_dtype: torch.dtype
    rest_dtype: torch.dtype
    embed_first: bool
    head_first: bool

    @classmethod
    def split(cls, layers: int, first_layers: int, first: str | torch.device = "cuda",
              rest: str | torch.device = "cpu", *, first_dtype: torch.dtype = torch.bfloat16,
              rest_dtype: torch.dtype = torch.float32, tied: bool = False) -> Placement:
        """The plan's policy: the head on the first side whenever it has a layer, the
        embedding there too when it is the head (tied) or every layer is."""
        if not 0 <= first_layers <= layers:
            raise ValueError(f"first_layers must be 0..{layers}, got {first_layers}")
        head_first = first_layers > 0
        return cls(layers, first_layers, torch.device(first), torch.device(rest), first_dtype, rest_dtype,
                   embed_first=head_first and (tied or first_layers == layers), head_first=head_first)

    @classmethod
    def from_plan(cls, plan: GpuPlan, first: str | torch.device, rest: str | torch.device = "cpu", *,
                  first_dtype: torch.dtype = torch.bfloat16, rest_dtype: torch.dtype = torch.float32) -> Placement:
        return cls(plan.layers, plan.gpu_layers, torch.device(first), torch.device(rest), first_dtype, rest_dtype,
                   embed_first=plan.embed_on_gpu, head_first=plan.head_on_gpu)

    def side(self, name: str) -> tuple[torch.device, torch.dtype]:
        """(device, dtype) of the tensor an HF name names."""
        match = _LAYER.match(name)
        if match is not None:
            on_first = int(match.group(1)) < self.first_layers
        elif name in _HEAD_NAMES:
            on_first = self.head_first
        else:  # the embedding table, and anything global to the model
            on_first = self.embed_first
        return (self.first, self.first_dtype) if on_first else (self.rest, self.rest_dtype)

    @property
    def activation_dtype(self) -> torch.dtype:
        """What the embedding hands the first layer."""
        return self.first_dtype if self.first_layers else self.rest_dtype


def placed(get: Callable[[str], torch.Tensor | QTensor], placement: Placement
           ) -> Callable[[str], torch.Tensor | QTensor]:
    """`get` with every tensor on its side's device: a QTensor's blocks as stored (their raw
    bytes moved once), a dense tensor in the side's dtype."""

    def where(name: str) -> torch.Tensor | QTensor:
        value = get(name)
        device, dtype = placement.side(name)
        if isinstance(value, QTensor):
            if value.raw.device == device:
                return value
            return QTensor(value.raw.to(device), value.qtype, value.shape)
        return value.to(device=device, dtype=dtype)

    return where


def mark_split(model, placement: Placement) -> None:
    """Record a built model's boundary, so a step runs its two sides as two runs (even on one
    device: the CPU standing in for both)."""
    from .stages import Stages

    if 0 < placement.first_layers < placement.layers:
        model.cuts = (placement.first_layers,)
        model.stages = Stages(model.layers, model.cuts)


def gpu_memory(device: str = "cuda") -> tuple[str, int]:
    """(the GPU's name, bytes it has free for a model): what the driver says is free, at
    most WREN_GPU_MEMORY when that is set."""
    index = torch.device(device).index or 0
    free, _total = torch.cuda.mem_get_info(index)
    cap = gpu_memory_from_env()
    return torch.cuda.get_device_name(index), free if cap is None else min(free, cap)


def split_devices(model: torch.nn.Module) -> set[torch.device]:
    """Every device a model's tensors are on."""
    return {t.device for t in (*model.parameters(), *model.buffers()) if t is not None}


__all__ = ["Placement", "gpu_memory", "mark_split", "placed", "split_devices"]
