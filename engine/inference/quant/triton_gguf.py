"""GGUF block weights multiplied on a GPU without widening them: Triton kernels (triton_blocks.py).

Why Triton and not torch's own quantized ops: none of torch's CUDA weight-only ops reads GGUF's
blocks. `torch._weight_int8pack_mm` takes int8 weights with one scale per output row;
`torch._weight_int4pack_mm` takes its own packed int4 tiles with a bfloat16 scale and zero per
group (value = (q - 8) * scale + zero). A k-quant's value is (d * sc) * q - dmin * m, with fp16
d and dmin per 256 values and 6-bit sc and m per 32 (Q6_K: an int8 scale per 16): repacking it
for torch would round every scale product to bfloat16 (8 significant bits) and need a new copy
of every weight, so it would not be the file's values; Q5_K and Q6_K have no torch layout at all.
The kernels here read the file's own bytes and compute the values with ggml.dequantize's
float32 operations, so `dequantize` is bit for bit the reference.

Entry points, each taking a weight as its file stores it (`uint8 [N, row_bytes]`, contiguous):
`supports(qtype)`, `dequantize(raw, qtype, cols, dtype)`, `linear(x, weight, bias)` for a
QTensor-like weight, and `linear_parts(x, raws, qtypes, rows, bias)` for QuantLinear's fused
parts (one launch per part, each writing its columns of one output); `linear_op`, the same as
the custom op torch.ops.wren.triton_gguf_linear, for code under torch.compile. Types: Q4_0,
Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.

Dispatch on the rows of x: up to MATVEC_MAX_ROWS (8), the fused dequantize + matrix-vector
kernel (Q4_K and Q6_K, a Q4_K_M file's types, and Q8_0 have their own that read 32- or 16-bit words;
split-K where the weight has few rows); up to DENSE_MIN_ROWS (256), the dequantize-a-tile +
tl.dot GEMM; from there, with 16-bit x, slices of the weight widened by the dequantize kernel
and multiplied by torch's matmul. The thresholds are guesses until bench/device/kernels_check.py
has timed them on a GPU; tiles are fixed per case (no autotuning: decoding replays one launch).

The kernels run on CUDA tensors, or on CPU tensors where triton_gguf was imported with
TRITON_INTERPRET=1 set before triton was first imported (Triton's interpreter: how the tests
check them without a GPU).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

from . import ggml

try:
    import triton

    from . import triton_blocks as _k
    from . import triton_q8 as _q8
except ImportError as exc:  # torch's CPU builds do not bring triton
    triton = None
    _k = _q8 = None  # type: ignore[assignment]
    NOTICE: str | None = (f"triton is not installed ({exc}): GGUF blocks on a GPU take the slower exact torch "
                          "path (dequantized per product)")
else:
    NOTICE = None

# Whether the kernels were built for Triton's interpreter (TRITON_INTERPRET=1 at import): then
# they run on CPU tensors, slowly, and only there.
INTERPRET = NOTICE is None and os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")

# Rows of x up to which a product takes the matrix-vector kernel; above it the GEMM (tl.dot
# needs tiles of 16 rows at least, wasted for a few rows; the matrix-vector kernel reuses each
# unpacked weight for every row, so its cost grows with the rows). bench/device/kernels_check.py
# times both at 8 rows.
MATVEC_MAX_ROWS = 8
# Rows of 16-bit x from which a product dequantizes the weight to x's dtype, a slice of about
# DENSE_CHUNK values at a time, and multiplies with torch's matmul (cuBLAS) instead of the GEMM
# kernel: past some rows the dense GEMM's speed outweighs writing and reading the widened slice.
# bench/device/kernels_check.py times both at 512 rows.
DENSE_MIN_ROWS = 256
DENSE_CHUNK = 1 << 25
# The matrix-vector kernels of the two types a Q4_K_M file is made of (WREN_TRITON_MATVEC):
# - "float", the ones measured on a GPU (matvec_q4k_kernel, matvec_q6k_kernel): float32
#   products; compiled for sm_90, Q4_K's takes about 12 instructions a weight (a conversion
#   counted at its cost of four), Q6_K's 20 (its per-step sums cross threads);
# - "words": Q4_K by matvec_q4k_words_kernel (the header read as words, the next step's weights
#   loaded before this step's arithmetic, no conversion instructions): as many instructions;
# - "q8": x rounded to 8 bits a block of 32 (quantize_q8_kernel), then integer dot products of
#   4 weights an instruction (dp4a), as llama.cpp's CUDA kernels do (matvec_q4k_q8_kernel,
#   matvec_q6k_q8_kernel): about 3.8 and 10 instructions a weight (bench/triton_sass.py). Its results differ from the
#   float ones by x's rounding.
# "float" stays the default until a GPU has timed the others (bench/device/kernels_check.py).
MATVEC_KERNELS = ("float", "words", "q8")
MATVEC_KERNEL = os.environ.get("WREN_TRITON_MATVEC", "float").strip().lower() or "float"
if MATVEC_KERNEL not in MATVEC_KERNELS:
    raise ValueError(f"WREN_TRITON_MATVEC must be one of {', '.join(MATVEC_KERNELS)}, got {MATVEC_KERNEL!r}")
# Per type, a matrix-vector tile to use instead of _matvec_plan's: (rows per program, warps).
# For kernels_check.py's sweep; empty in use.
MATVEC_TILES: dict[int, tuple[int, int]] = {}


@dataclass(frozen=True)
class _Spec:
    block: int  # values per block
    size: int  # bytes per block
    group: int  # values per scale (a kernel's GS)
    offset: int  # 0: value = q * s; 1: + o; -1: - o


_T = ggml.GGMLQuantizationType
SPECS: dict[int, _Spec] = {
    int(_T.Q4_0): _Spec(32, 18, 32, 0), int(_T.Q4_1): _Spec(32, 20, 32, 1),
    int(_T.Q5_0): _Spec(32, 22, 32, 0), int(_T.Q5_1): _Spec(32, 24, 32, 1),
    int(_T.Q8_0): _Spec(32, 34, 32, 0), int(_T.Q4_K): _Spec(256, 144, 32, -1),
    int(_T.Q5_K): _Spec(256, 176, 32, -1), int(_T.Q6_K): _Spec(256, 210, 16, 0),
}
Q4_K, Q6_K, Q8_0 = int(_T.Q4_K), int(_T.Q6_K), int(_T.Q8_0)


def available() -> bool:
    """Whether triton imported (the kernels can be built)."""
    return NOTICE is None


def supports(qtype: int) -> bool:
    """Whether the kernels take weights of this GGUF type (and triton is there)."""
    return NOTICE is None and int(qtype) in SPECS


def runs_on(device: torch.device) -> bool:
    """Whether the kernels run on tensors of `device`: CUDA, or the CPU under the interpreter."""
    return NOTICE is None and (device.type == "cuda" if not INTERPRET else device.type == "cpu")


def _check(raw: torch.Tensor, qtype: int, cols: int) -> _Spec:
    spec = SPECS.get(int(qtype))
    if NOTICE is not None:
        raise RuntimeError(NOTICE)
    if spec is None:
        raise ValueError(f"the GPU kernels do not take {ggml.type_name(qtype)} weights "
                         f"(they take {', '.join(ggml.type_name(q) for q in SPECS)})")
    if not runs_on(raw.device):
        where = "CPU tensors only (TRITON_INTERPRET=1)" if INTERPRET else "CUDA tensors"
        raise ValueError(f"the GPU kernels run on {where}; got a weight on {raw.device}")
    expected = cols // spec.block * spec.size
    if raw.dtype != torch.uint8 or raw.dim() != 2 or cols % spec.block or raw.shape[1] != expected:
        raise ValueError(f"a {ggml.type_name(qtype)} weight of {cols} columns is uint8 [rows, {expected}] "
                         f"(whole blocks of {spec.block}); got {raw.dtype} {list(raw.shape)}")
    if not raw.is_contiguous():
        raise ValueError("the GPU kernels read contiguous weights")
    return spec


def dequantize(raw: torch.Tensor, qtype: int, cols: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """`uint8 [rows, row_bytes]` -> `dtype [rows, cols]` on raw's device. In float32 equal bit
    for bit to ggml.dequantize (and so to gguf.quants.dequantize); in bfloat16 or float16, those
    values rounded to nearest."""
    spec = _check(raw, qtype, cols)
    rows = raw.shape[0]
    out = torch.empty(rows, cols, dtype=dtype, device=raw.device)
    if rows == 0 or cols == 0:
        return out
    groups = cols // spec.group
    bn, g = 16, 16
    grid = (triton.cdiv(rows, bn), triton.cdiv(groups, g))
    # enable_fp_fusion=False: no multiply-add is fused, so each product rounds as numpy's does
    _k.dequantize_kernel[grid](raw, out, rows, groups, raw.shape[1], out.stride(0), QTYPE=int(qtype), GS=spec.group,
                               OFFSET=spec.offset, BN=bn, G=g, BF16=dtype == torch.bfloat16, num_warps=4,
                               enable_fp_fusion=False)
    return out


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.lru_cache(maxsize=4096)
def _matvec_plan(qtype: int, n: int, k: int, device_index: int, tiles: tuple = ()) -> tuple[int, int, int, int]:
    """(BN, G, split, groups per split) for a [n, k] weight: about 256 values of a row per step;
    K split where the rows alone would leave the GPU's multiprocessors short of programs.
    `tiles`: MATVEC_TILES's items and MATVEC_KERNEL, part of the cache's key."""
    spec = SPECS[qtype]
    groups = k // spec.group
    g = 256 // spec.group  # a super-block, or 8 blocks of 32
    if INTERPRET:
        bn, split = 16, (2 if groups > 8 else 1)  # the split-K path, exercised on small shapes
    else:
        # the word-reading kernels (Q4_K, Q6_K, Q8_0): 16 rows (Q4_K: one 16-byte load per thread)
        bn, split = (16 if qtype in (Q4_K, Q6_K, Q8_0) else 8), 1
        if qtype == Q4_K and MATVEC_KERNEL == "q8":
            bn = 32  # 48 registers; 3.8 instructions a weight against 5.3 at 16 rows (sm_90)
        bn = MATVEC_TILES.get(qtype, (bn, 4))[0]
        programs, target = triton.cdiv(n, bn), 4 * _sm_count(device_index)
        while programs * split < target and groups // (split * 2) >= 2 * g:
            split *= 2
    per = triton.cdiv(triton.cdiv(groups, split), g) * g  # whole steps per share
    return bn, g, triton.cdiv(groups, per), per


def _tiles() -> tuple:
    return (MATVEC_KERNEL, *sorted(MATVEC_TILES.items()))


@functools.lru_cache(maxsize=4096)
def _gemm_plan(qtype: int, m: int) -> tuple[int, int, int, int, int]:
    """(BM, BN, G, warps, stages) for m rows of x: tiles that ptxas fits in registers for sm_90
    without spilling (checked for every type with Triton 3.7)."""
    spec = SPECS[qtype]
    if INTERPRET:
        return 16, 16, 64 // spec.group, 4, 1
    bm = 16
    while bm < min(m, 128):
        bm *= 2
    if bm >= 128:
        return bm, 128, 32 // spec.group, 8, 3
    if bm == 64:
        return bm, 128, 64 // spec.group, 8, 3
    return bm, 64, 64 // spec.group, 4, 3


_DOT = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}


def _launch(x: torch.Tensor, raw: torch.Tensor, qtype: int, y: torch.Tensor,
            bias: torch.Tensor | None, atomic: bool) -> None:
    """y (a [M, N] view, rows of stride y.stride(0)) = x @ W^T (+ bias); with `atomic`, added
    into y (zeroed float32), as a split-K matrix-vector product needs."""
    spec = SPECS[qtype]
    m, k = x.shape
    n = raw.shape[0]
    if m <= MATVEC_MAX_ROWS:
        bn, g, split, per = _matvec_plan(qtype, n, k, raw.device.index or 0, _tiles())
        mp = 1 << (m - 1).bit_length()
        warps = MATVEC_TILES.get(qtype, (bn, 4))[1]
        if qtype in (Q4_K, Q6_K) and MATVEC_KERNEL == "q8":  # x rounded to 8 bits, then dp4a
            xq, xd = quantize_q8(x)
            args = (xq, xd, raw, y, bias if bias is not None else y, n, k, per // g)
            common = dict(M=m, MP=mp, BN=bn, ATOMIC=atomic and split > 1, HAS_BIAS=bias is not None,
                          INTERP=INTERPRET, num_warps=warps)
            if qtype == Q4_K:
                _q8.matvec_q4k_q8_kernel[(triton.cdiv(n, bn), split)](
                    *args, raw.shape[1] // 4, xq.stride(0) // 4, xd.stride(0), y.stride(0), P=4, **common)
            else:
                _q8.matvec_q6k_q8_kernel[(triton.cdiv(n, bn), split)](
                    *args, raw.shape[1], xq.stride(0) // 4, xd.stride(0), y.stride(0), **common)
            return
        if qtype == Q4_K and MATVEC_KERNEL == "words":  # every byte read in 32-bit words; a step is one super-block
            _k.matvec_q4k_words_kernel[(triton.cdiv(n, bn), split)](
                x, raw, y, bias if bias is not None else y, n, k, per // g, raw.shape[1] // 4, x.stride(0),
                y.stride(0), M=m, MP=mp, BN=bn, P=4, ATOMIC=atomic and split > 1, HAS_BIAS=bias is not None,
                num_warps=warps)
            return
        if qtype == Q4_K:  # quants read as 32-bit words; a step is one super-block (4 pairs of sub-blocks)
            _k.matvec_q4k_kernel[(triton.cdiv(n, bn), split)](
                x, raw, y, bias if bias is not None else y, n, k, per // g, raw.shape[1], raw.shape[1] // 4, x.stride(0),
                y.stride(0), M=m, MP=mp, BN=bn, P=4, ATOMIC=atomic and split > 1, HAS_BIAS=bias is not None,
                num_warps=warps)
            return
        if qtype == Q6_K:  # 16-bit words; a step is one super-block
            _k.matvec_q6k_kernel[(triton.cdiv(n, bn), split)](
                x, raw, y, bias if bias is not None else y, n, k, per // g, raw.shape[1], x.stride(0), y.stride(0),
                M=m, MP=mp, BN=bn, ATOMIC=atomic and split > 1, HAS_BIAS=bias is not None, num_warps=warps)
            return
        if qtype == Q8_0:  # 16-bit words; a step is 8 blocks
            _k.matvec_q8_0_kernel[(triton.cdiv(n, bn), split)](
                x, raw, y, bias if bias is not None else y, n, k, per, raw.shape[1], x.stride(0), y.stride(0),
                M=m, MP=mp, BN=bn, NB=g, ATOMIC=atomic and split > 1, HAS_BIAS=bias is not None, num_warps=warps)
            return
        _k.matvec_kernel[(triton.cdiv(n, bn), split)](
            x, raw, y, bias if bias is not None else y, n, k, per, raw.shape[1], x.stride(0), y.stride(0),
            QTYPE=qtype, GS=spec.group, OFFSET=spec.offset, M=m, MP=mp, BN=bn, G=g, ATOMIC=atomic and split > 1,
            HAS_BIAS=bias is not None, num_warps=warps)
        return
    if m >= DENSE_MIN_ROWS and x.dtype in (torch.bfloat16, torch.float16):
        _dense(x, raw, qtype, y, bias)
        return
    bm, bn, g, warps, stages = _gemm_plan(qtype, m)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _k.gemm_kernel[grid](x, raw, y, bias if bias is not None else y, m, n, k, k // spec.group, raw.shape[1], x.stride(0),
                         y.stride(0),
                         QTYPE=qtype, GS=spec.group, OFFSET=spec.offset, BM=bm, BN=bn, G=g, DOT=_DOT[x.dtype],
                         HAS_BIAS=bias is not None, INTERP=INTERPRET, num_warps=warps, num_stages=stages)


def quantize_q8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] (K a multiple of 32) as (int8 [M, K], float32 [M, K // 16]): each block of 32
    values divided by d = its max |x| / 127 and rounded half away from zero; per block d and
    d * the block's sum of the int8 values (quantize_q8_kernel)."""
    m, k = x.shape
    xq = torch.empty(m, k, dtype=torch.int8, device=x.device)
    xd = torch.empty(m, k // 16, dtype=torch.float32, device=x.device)
    nb = 32
    _q8.quantize_q8_kernel[(m, triton.cdiv(k // 32, nb))](x, xq, xd, k, x.stride(0), xq.stride(0), xd.stride(0),
                                                         NB=nb, num_warps=4)
    return xq, xd


def _dense(x: torch.Tensor, raw: torch.Tensor, qtype: int, y: torch.Tensor, bias: torch.Tensor | None) -> None:
    """y = x @ W^T (+ bias) through torch's matmul on slices of W widened to x's dtype."""
    k = x.shape[1]
    step = max(1, DENSE_CHUNK // k)
    for n0 in range(0, raw.shape[0], step):
        w = dequantize(raw[n0:n0 + step], qtype, k, x.dtype)
        out = y[:, n0:n0 + w.shape[0]]
        if bias is None and out.is_contiguous():
            torch.mm(x, w.T, out=out)
        elif bias is None:
            out.copy_(x @ w.T)
        else:
            out.copy_(torch.addmm(bias[n0:n0 + w.shape[0]].to(x.dtype), x, w.T))


def _needs_atomic(m: int, n: int, k: int, qtype: int, device: torch.device) -> bool:
    return m <= MATVEC_MAX_ROWS and _matvec_plan(qtype, n, k, device.index or 0, _tiles())[2] > 1


def linear_parts(x: torch.Tensor, raws: list[torch.Tensor], qtypes: tuple[int, ...] | list[int],
                 rows: tuple[int, ...] | list[int], bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ [W_0; W_1; ...]^T (+ bias) as one [..., sum(rows)] in x's dtype (float32, bfloat16
    or float16), the products accumulated in float32. Each part's kernel writes its own columns."""
    k = x.shape[-1]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.dtype not in _DOT:
        x2 = x2.to(_out_dtype(x2))
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    for raw, qtype, n in zip(raws, qtypes, rows):
        _check(raw, qtype, k)
        if raw.shape[0] != n:
            raise ValueError(f"a part of {n} rows holds {raw.shape[0]}")
    if x2.device != raws[0].device:
        raise ValueError(f"x is on {x2.device}, the weights on {raws[0].device}")
    m, total = x2.shape[0], sum(rows)
    atomic = any(_needs_atomic(m, n, k, int(q), raws[0].device) for q, n in zip(qtypes, rows))
    if m == 0:
        return x2.new_empty(*lead, total)
    y = torch.zeros(m, total, dtype=torch.float32, device=x2.device) if atomic else x2.new_empty(m, total)
    if len(raws) == 1:
        _launch(x2, raws[0], int(qtypes[0]), y, bias, atomic)
    else:
        at = 0
        for raw, qtype, n in zip(raws, qtypes, rows):
            part_bias = None if bias is None else bias[at:at + n]
            _launch(x2, raw, int(qtype), y[:, at:at + n], part_bias, atomic)
            at += n
    return y.to(x2.dtype).view(*lead, total)


def _out_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.dtype in _DOT else torch.float32


@torch.library.custom_op("wren::triton_gguf_linear", mutates_args=())
def linear_op(x: torch.Tensor, raws: list[torch.Tensor], qtypes: list[int], rows: list[int],
              bias: torch.Tensor | None) -> torch.Tensor:
    """linear_parts as one opaque op, for torch.compile'd code (QuantLinear calls it there): Dynamo
    does not trace the launches, and fullgraph=True holds; a CUDA graph captures its kernels."""
    return linear_parts(x, raws, qtypes, rows, bias)


@linear_op.register_fake
def _linear_op_fake(x: torch.Tensor, raws: list[torch.Tensor], qtypes: list[int], rows: list[int],
                    bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], sum(rows)), dtype=_out_dtype(x))


def linear(x: torch.Tensor, weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W^T (+ bias) for a QTensor-like weight (`raw`, `qtype`, `shape`)."""
    return linear_parts(x, [weight.raw], [int(weight.qtype)], [weight.shape[0]], bias)
