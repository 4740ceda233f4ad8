"""Weight-only int4 / int8 linear layers on torch's packed int4 CPU kernel.

Decoding one token reads every weight once, so on a CPU its speed is memory bandwidth
divided by weight bytes: fp32 (4 B/weight) caps a 135M model near 43 tokens/s on 23 GB/s,
int4 with a scale and zero per 32 weights (~0.56 B/weight) near 300. torch's packed
kernels are only fast with bf16 inputs (fp32 and fp16 inputs take a scalar fallback tens
of times slower), so a layer casts its input to bf16 and its output back to the input's
dtype: the model around it may keep float32 activations.

Both formats quantize groups of 32 input weights, the block of GGUF's Q4_x and Q8_0:
int4 is asymmetric (scale and minimum, Q4_1's grid), int8 symmetric (Q8_0's), so weights
that came from such a file are recovered exactly up to the bf16 rounding of the scales
(and, for int8, of the zero 8d/17 that `_int8_planes` needs).
`_weight_int4pack_mm_for_cpu` computes (q - 8) * scale + zero; an int8 group is split into
its high and low nibbles, packed one after the other along the input dimension, and the
input is fed twice (see `_int8_planes`), so both formats run on the one kernel. (torch's `_weight_int8pack_mm`
has one scale per output row, which loses GGUF's per-block scales, and was slower here.)
"""

from __future__ import annotations

import torch
from torch import nn

QUANT_NAMES = ("none", "int8", "int4")
GROUP = 32
_CHUNK_ROWS = 4096  # a multiple of the packing's 64-row blocks


class GroupQuantLinear(nn.Module):
    """y = x W^T + b with W in `bits` (4 or 8) per group of GROUP input weights."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, bits: int,
                 dtype=torch.bfloat16) -> None:
        super().__init__()
        if not self.supports(weight):
            raise ValueError(f"cannot pack a {tuple(weight.shape)} weight: need [16n, {GROUP}k]")
        self.bits = bits
        self.group = GROUP if bits == 4 else 2 * GROUP  # the kernel's group, see _int8_planes
        self.out_features, self.in_features = weight.shape
        packed, scales_zeros = [], []
        # Row chunks bound the float32/int32 temporaries (a 49k-row output head would
        # otherwise need ~1 GB); the packing is local to 64-row blocks, so chunks concatenate.
        for rows in weight.detach().split(_CHUNK_ROWS):
            q, scales, zeros = (_int4_groups if bits == 4 else _int8_planes)(rows.float())
            packed.append(torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))
            scales_zeros.append(torch.stack([scales, zeros], -1).to(dtype))
        self.register_buffer("packed", torch.cat(packed))
        # The kernel's layout: [groups, out_features, (scale, zero)].
        self.register_buffer("scales_zeros", torch.cat(scales_zeros).transpose(0, 1).contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    @staticmethod
    def supports(weight: torch.Tensor) -> bool:
        n, k = weight.shape
        return k % GROUP == 0 and n % 16 == 0  # what the CPU packing accepts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(self.scales_zeros.dtype)
        if self.bits == 8:
            groups = rows.reshape(-1, self.in_features // GROUP, 1, GROUP)
            rows = torch.cat((groups * 16, groups), dim=2).view(-1, 2 * self.in_features)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group, self.scales_zeros)
        y = y.view(*x.shape[:-1], self.out_features).to(x.dtype)
        return y if self.bias is None else y.add_(self.bias)  # in place: keeps x's dtype

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, int{self.bits}/{GROUP}"


def _int4_groups(w: torch.Tensor):
    n, k = w.shape
    groups = w.reshape(n, k // GROUP, GROUP)
    lo = groups.amin(dim=-1)
    scale = (groups.amax(dim=-1) - lo) / 15
    # A constant group has no range; any positive scale reproduces it through `lo`.
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round((groups - lo[..., None]) / scale[..., None]).clamp(0, 15)
    return q.to(torch.int32).reshape(n, k), scale, lo + 8 * scale


def _int8_groups(w: torch.Tensor):
    """Q8_0's grid: q in -127..127 [n, k/GROUP, GROUP] and one scale per group [n, k/GROUP]."""
    n, k = w.shape
    groups = w.reshape(n, k // GROUP, GROUP)
    scale = groups.abs().amax(dim=-1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(groups / scale[..., None]).clamp(-127, 127), scale


def _int8_planes(w: torch.Tensor):
    """Each 32-group of q = 16*hi + lo becomes one kernel group of 64: its high nibbles
    then its low ones, sharing the group's scale d, against the input fed as 16*x then x
    (16 is exact in bf16). Per group the kernel sums ((hi-8)d + z)16x + ((lo-8)d + z)x =
    d(q-136)x + 17zx, which is d(q-128)x for z = 8d/17: one scale and zero per 32
    weights, as Q8_0 has, so the head reads a quarter fewer bytes than with a scale and
    zero per nibble plane."""
    n, k = w.shape
    q, scale = _int8_groups(w)
    q = q.to(torch.int32) + 128  # 1..255
    packed = torch.cat((q >> 4, q & 15), dim=-1).reshape(n, 2 * k)
    return packed, scale, 8 * scale / 17


class GroupQuantEmbedding(nn.Module):
    """An embedding table held as int8 per group of GROUP (Q8_0's grid), a quarter of
    float32; a looked-up row is scaled back to `dtype`. Only made where that is lossless
    (`lossless`): a table that came from a Q8_0 file, as the starter model's did."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype
        self.register_buffer("q", q.flatten(1))  # int8 [rows, dim]
        self.register_buffer("scale", scale.float())  # [rows, dim / GROUP]

    @classmethod
    def lossless(cls, weight: torch.Tensor) -> GroupQuantEmbedding | None:
        """The int8 form of `weight` [rows, dim], or None if it would change any value."""
        if weight.shape[1] % GROUP:
            return None
        qs, scales = [], []
        for rows in weight.detach().split(_CHUNK_ROWS):  # bounds the float32 temporaries
            q, scale = _int8_groups(rows.float())
            if not torch.equal((q * scale[..., None]).flatten(1).to(weight.dtype), rows):
                return None
            qs.append(q.to(torch.int8))
            scales.append(scale)
        return cls(torch.cat(qs), torch.cat(scales), weight.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        q = self.q[ids].unflatten(-1, (-1, GROUP)).float()
        return (q * self.scale[ids][..., None]).flatten(-2).to(self.dtype)

    def extra_repr(self) -> str:
        return f"rows={self.q.shape[0]}, dim={self.q.shape[1]}, int8/{GROUP}"


def quantize_linears(model: nn.Module, mode: str, *, dtype, int8_names: tuple[str, ...] = ()) -> int:
    """Replace each packable nn.Linear under `model` by a GroupQuantLinear, in place.
    `mode` "int4" quantizes to int4 except the modules named in `int8_names`; a weight whose
    shape the kernel cannot pack stays dense. Returns how many layers were replaced."""
    if mode not in QUANT_NAMES:
        raise ValueError(f"quant must be one of {', '.join(QUANT_NAMES)}, got {mode!r}")
    if mode == "none":
        return 0
    replaced = 0
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or not GroupQuantLinear.supports(child.weight):
                continue
            full = f"{parent_name}.{name}" if parent_name else name
            bits = 8 if mode == "int8" or full in int8_names else 4
            setattr(parent, name, GroupQuantLinear(child.weight, child.bias, bits, dtype))
            replaced += 1
    return replaced
