"""Wren's C++ kernels for GGUF block weights, when they were built at install time.

Importing the compiled module `engine.inference.quant._C` registers `torch.ops.wren.dequantize`,
`torch.ops.wren.qlinear`, `torch.ops.wren.qlinear_exact` and `torch.ops.wren.qlinear_parts`
(see csrc/ops.cpp); this module adds their fake (shape-only) implementations so
`torch.compile` can trace through them, and says why the exact pure-torch path (`ggml.py`)
is in use when the kernels are not there: no compiler at install, or
`WREN_KERNELS=off` (tests of the fallback).
"""

from __future__ import annotations

import logging
from types import ModuleType

import torch

from ... import switches
from . import ggml

log = logging.getLogger("wren.engine.inference.quant")

# WREN_REPACK=off keeps every weight in its file's row layout (for A/B measurements).
REPACK = not switches.off("WREN_REPACK")


def _load() -> tuple[ModuleType | None, str | None]:
    if switches.off("WREN_KERNELS"):
        return None, ("Wren's quantized kernels are turned off (WREN_KERNELS=off): "
                      "using the slower exact torch path")
    try:
        from . import _C  # type: ignore[attr-defined]  # built by setup.py, may be absent
    except ImportError as exc:
        return None, ("Wren's quantized kernels were not built (no C++ compiler at install): "
                      f"using the slower exact torch path ({exc})")
    return _C, None


_C, NOTICE = _load()
if NOTICE is not None:
    log.warning(NOTICE)

if _C is not None:
    @torch.library.register_fake("wren::qlinear")
    def _qlinear_fake(x: torch.Tensor, raw: torch.Tensor, qtype: int, rows: int) -> torch.Tensor:
        torch._check(x.dtype == torch.float32, lambda: f"wren::qlinear needs float32 x, got {x.dtype}")
        return x.new_empty((*x.shape[:-1], rows))

    @torch.library.register_fake("wren::qlinear_exact")
    def _qlinear_exact_fake(x: torch.Tensor, raw: torch.Tensor, qtype: int, rows: int) -> torch.Tensor:
        torch._check(x.dtype == torch.float32, lambda: f"wren::qlinear_exact needs float32 x, got {x.dtype}")
        return x.new_empty((*x.shape[:-1], rows))

    if hasattr(torch.ops.wren, "qlinear_wide"):  # a build older than this module lacks it
        @torch.library.register_fake("wren::qlinear_wide")
        def _qlinear_wide_fake(x: torch.Tensor, raw: torch.Tensor, qtype: int, rows: int) -> torch.Tensor:
            torch._check(x.dtype == torch.float32, lambda: f"wren::qlinear_wide needs float32 x, got {x.dtype}")
            return x.new_empty((*x.shape[:-1], rows))

    @torch.library.register_fake("wren::qlinear_parts")
    def _qlinear_parts_fake(x: torch.Tensor, raws: list[torch.Tensor], qtypes: list[int], rows: list[int],
                            exact: bool) -> torch.Tensor:
        torch._check(x.dtype == torch.float32, lambda: f"wren::qlinear_parts needs float32 x, got {x.dtype}")
        return x.new_empty((*x.shape[:-1], sum(rows)))

    if hasattr(torch.ops.wren, "rms_norm"):  # a build older than this module lacks it
        @torch.library.register_fake("wren::rms_norm")
        def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
            return torch.empty_like(x)

    @torch.library.register_fake("wren::dequantize")
    def _dequantize_fake(raw: torch.Tensor, qtype: int, cols: int) -> torch.Tensor:
        return raw.new_empty((raw.shape[0], cols), dtype=torch.float32)


def has_rms_norm() -> bool:
    """Whether the loaded kernels have wren::rms_norm (a stale build may not)."""
    return _C is not None and hasattr(torch.ops.wren, "rms_norm")


def has_wide() -> bool:
    """Whether the loaded kernels have wren::qlinear_wide (a stale build may not)."""
    return _C is not None and hasattr(torch.ops.wren, "qlinear_wide")


# Whether the output head's decoding step rounds its activations to 15-16 bits (qlinear_wide)
# rather than none at all; WREN_HEAD_ACTIVATIONS=exact keeps float32 (for A/B measurements).
WIDE_HEAD = has_wide() and switches.setting("WREN_HEAD_ACTIVATIONS") not in {"exact", *switches.OFF}

# Whether eager float32 CPU models normalise with wren::rms_norm (compiled decode steps too
# with ATTEND_ONE); WREN_KERNEL_RMS_NORM=off keeps torch's own everywhere (for A/B measurements).
RMS_NORM = has_rms_norm() and not switches.off("WREN_KERNEL_RMS_NORM")

# Whether a float32 CPU one-query step (a decoded token, a verified row) attends through
# wren::attend_one and normalises through wren::rms_norm, eagerly and in compiled decode
# steps alike (models.attention calls it and registers its fake), so the two give the same
# bits and compiled models speculate exactly (issue 28). Off unless WREN_KERNEL_ATTEND=on:
# its per-key sums are slower than inductor's fused loop on wider heads. Compiled decode,
# 512 tokens of context, 2 threads, AMD EPYC (Zen 4) AVX-512, load 1.4-1.5, one process per
# arm: 3B Q4_K_M (head_dim 128) 12.6 tok/s on vs 16.3 off; 1B Q4_K_M 38.6 vs 37.3; the
# starter 7.3-8.4 vs 9.2-10.3 ms a token at 32 tokens of context.
ATTEND_ONE = (_C is not None and hasattr(torch.ops.wren, "attend_one")
              and switches.on("WREN_KERNEL_ATTEND"))


def available() -> bool:
    """Whether the compiled kernels are loaded (False: use ggml.py's exact torch path)."""
    return _C is not None


# Every kernel table, narrowest first: x86 (AVX2, AVX-VNNI: VEX-encoded vpdpbusd without
# AVX-512, AVX-512 VNNI), arm64 (NEON, NEON with the dot-product extension, and with the
# int8 matrix multiply too for the prompt path) and the portable one. A CPU runs "scalar"
# and those of its own.
ISAS = ("scalar", "avx2", "avx-vnni", "avx512-vnni", "neon", "neon-dotprod", "neon-i8mm")


def isa() -> str:
    """The instruction set the kernels picked for this CPU (one of ISAS); "none" without the
    kernels."""
    return torch.ops.wren.isa() if _C is not None else "none"


def _require() -> ModuleType:
    if _C is None:
        raise RuntimeError(NOTICE)
    return _C


def qlinear(x: torch.Tensor, raw: torch.Tensor, qtype: int, rows: int) -> torch.Tensor:
    """x @ W.T for W the `rows` GGUF rows in `raw` (uint8 [rows, row_bytes]) of type `qtype`.

    x is float32 [..., cols]; the result float32 [..., rows]. A few rows of x are quantized to
    8 bits per block and multiplied with integer dot products; many rows go through torch's
    GEMM on exactly dequantized weight tiles."""
    _require()
    return torch.ops.wren.qlinear.default(x, raw, int(qtype), int(rows))  # .default: ~1.5 us less per call


def qlinear_exact(x: torch.Tensor, raw: torch.Tensor, qtype: int, rows: int) -> torch.Tensor:
    """qlinear without rounding x: x @ W.T with W exactly the file's values and x as given.

    A few rows of x: each weight block is dequantized in registers and multiplied with the
    float32 activations (float32 accumulation is the only error); many rows: the same tiled
    GEMM as qlinear. Slower than qlinear's integer dots for a few rows; for the layers where
    8-bit activations change answers (the output head)."""
    _require()
    return torch.ops.wren.qlinear_exact.default(x, raw, int(qtype), int(rows))


def qlinear_wide(x: torch.Tensor, raw: torch.Tensor, qtype: int, rows: int) -> torch.Tensor:
    """qlinear_exact, but a few rows of x are rounded finely where the type has that kernel
    (the usual output heads): for Q8_0 to 16 bits per 32 values, each x then moving by at
    most amax / 65,534 (amax: its block's largest |x|), 1/258 of the 8-bit kernels'
    rounding; for Q6_K to 15 bits per 256 values, at most amax / 32,766 (1/129 of 8 bits
    per 256, the rounding llama.cpp's Q6_K product uses). The products are summed exactly
    in integers, then scaled in float. Q6_K at about 1.2x the 8-bit kernel's time, 1.8x
    the float path's speed. Other types, and many rows, take qlinear_exact's path."""
    _require()
    return torch.ops.wren.qlinear_wide.default(x, raw, int(qtype), int(rows))


def qlinear_parts(x: torch.Tensor, raws: list[torch.Tensor], qtypes: tuple[int, ...] | list[int],
                  rows: tuple[int, ...] | list[int], exact: bool = False) -> torch.Tensor:
    """x @ [W_0; W_1; ...].T, the weights' rows stacked (a fused Q/K/V or gate/up whose parts
    may differ in type), as one float32 [..., sum(rows)].

    The same products as one qlinear (or, with `exact`, qlinear_exact) per part, but x is
    quantized once per activation format (all k-quants share one) and one parallel pass,
    split by weight bytes, covers every part: one thread hand-off per fused linear."""
    _require()
    return torch.ops.wren.qlinear_parts.default(x, raws, list(qtypes), list(rows), bool(exact))


def dequantize(raw: torch.Tensor, qtype: int, cols: int) -> torch.Tensor:
    """float32 [rows, cols], equal bit for bit to gguf.quants.dequantize of the same bytes."""
    _require()
    return torch.ops.wren.dequantize(raw, int(qtype), int(cols))


def interleaved(raw: torch.Tensor, qtype: int, cols: int) -> tuple[torch.Tensor, int]:
    """The weight in the kernels' interleaved layout for its type, if they have one
    (Q4_0 -> Q4_0x8: eight rows' blocks side by side, decoded 8 rows per pass; see
    csrc/repack.cpp), as (new bytes of the same shape, the layout's type id); otherwise,
    or without the kernels, on another device, with rows not a multiple of the group or
    WREN_REPACK=off, (raw, qtype) unchanged. Every kernel result is the same either way but
    the float summation order of the decoding dots."""
    if _C is None or not REPACK or raw.device.type != "cpu":
        return raw, qtype
    to = int(torch.ops.wren.interleaved_type(int(qtype)))
    if to < 0 or raw.shape[0] % ggml.interleave(to):
        return raw, qtype
    return torch.ops.wren.repack(raw, to, int(cols)), to


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension, for float32 CPU tensors, in
    one call (torch's eager rms_norm is several small ops: tens of microseconds a row)."""
    _require()
    return torch.ops.wren.rms_norm.default(x, weight, float(eps))


def max_gemv_rows() -> int:
    """Rows of x up to which qlinear takes the integer dot path."""
    _require()
    return torch.ops.wren.max_gemv_rows()


def set_max_gemv_rows(n: int) -> None:
    """Sets the rows of x up to which qlinear takes the integer dot path (for benchmarks)."""
    _require()
    torch.ops.wren.set_max_gemv_rows(int(n))


def integer_prompt(qtype: int | None = None) -> bool:
    """Whether qlinear's many-row path (a prompt, x not kept exact) quantizes x to 8 bits per
    block and multiplies in integers (csrc/qgemm.cpp) rather than dequantizing weight tiles
    into torch's float GEMM; WREN_PROMPT_GEMM=float at start-up turns it off (A/B runs).
    With `qtype`: whether the table in use does so for that type (it has kernels that take
    several tokens per weight pass; float types never)."""
    if _C is None or not hasattr(torch.ops.wren, "integer_prompt"):
        return False
    if qtype is None:
        return bool(torch.ops.wren.integer_prompt())
    return bool(torch.ops.wren.integer_prompt_for(int(qtype)))


def set_integer_prompt(on: bool) -> None:
    """Turns the integer prompt path on or off (for tests and benchmarks)."""
    _require()
    torch.ops.wren.set_integer_prompt(bool(on))


def read_sum(t: torch.Tensor) -> int:
    """Reads every byte of a contiguous CPU tensor once (a streaming-read bandwidth probe)."""
    _require()
    return torch.ops.wren.read_sum(t)


def use_isa(cap: str) -> str:
    """Run the best kernels not above `cap` (one of ISAS; "" for the best this CPU has);
    returns the instruction set now in use. For tests and benchmarks:
    every table gives the same activation rounding, so results differ only in float
    summation order."""
    _require()
    return torch.ops.wren.set_isa(cap)
