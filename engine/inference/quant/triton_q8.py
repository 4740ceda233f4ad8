"""Triton kernels over GGUF blocks with x rounded to 8 bits: one row of x at a time as int8
a block of 32 (quantize_q8_kernel, llama.cpp's Q8_1 layout in two arrays), and matrix-vector
products of Q4_K and Q6_K against it in integers, four weights an instruction (dp4a), the
scales applied per sub-block in float32. triton_gguf.MATVEC_KERNEL = "q8" takes them; the
float kernels and the helpers both use are in triton_blocks.py.

Triton's interpreter runs no PTX, so there (INTERP) dp4a's sums are added up in integers:
the same values, which the interpreter cases check exactly.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_blocks import _k_d_dmin, _k_sub_scales, _matvec_out


@triton.jit
def quantize_q8_kernel(x, xq, xd, K, x_stride, xq_stride, xd_stride, NB: tl.constexpr):
    """Rows of x as 8-bit integers a block of 32 values at a time, as the integer matrix-vector
    kernels read them (llama.cpp's Q8_1 layout in two arrays): xq[m, k] = round(x[m, k] / d), d =
    max |x| over the block / 127 (rounded half away from zero), xd[m, 2 * block] = d and
    xd[m, 2 * block + 1] = d * (the block's sum of xq). A program takes NB blocks of row
    program_id(0)."""
    m = tl.program_id(0)
    blocks = tl.program_id(1) * NB + tl.arange(0, NB)
    bmask = blocks < K // 32
    cols = blocks[:, None] * 32 + tl.arange(0, 32)[None, :]
    v = tl.load(x + m.to(tl.int64) * x_stride + cols, mask=bmask[:, None], other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(v), axis=1)  # [NB]
    # divisions rounded as IEEE says (a GPU's `/` is approximate), so every device rounds alike
    d = tl.math.div_rn(amax, tl.full(amax.shape, 127.0, tl.float32))
    inv = tl.where(amax > 0, tl.math.div_rn(tl.full(amax.shape, 127.0, tl.float32), tl.where(amax > 0, amax, 1.0)), 0.0)
    scaled = v * inv[:, None]
    q = tl.where(scaled >= 0, tl.floor(scaled + 0.5), -tl.floor(0.5 - scaled))
    q = tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int32)
    tl.store(xq + m.to(tl.int64) * xq_stride + cols, q.to(tl.int8), mask=bmask[:, None])
    total = tl.sum(q, axis=1).to(tl.float32)
    row = xd + m.to(tl.int64) * xd_stride + blocks * 2
    tl.store(row, d, mask=bmask)
    tl.store(row + 1, d * total, mask=bmask)


@triton.jit
def _dp4a(a, b, INTERP: tl.constexpr):
    """Per element: the sum of the four products of a's unsigned bytes and b's signed bytes
    (PTX dp4a.u32.s32, one instruction; the interpreter, which runs no PTX, adds them up)."""
    if INTERP:
        total = tl.zeros(a.shape, dtype=tl.int32)
        for i in tl.static_range(4):
            total += ((a >> (8 * i)) & 255) * ((((b >> (8 * i)) & 255) ^ 128) - 128)
        return total
    else:
        return tl.inline_asm_elementwise("dp4a.u32.s32 $0, $1, $2, $3;", "=r,r,r,r",
                                         [a, tl.broadcast_to(b, a.shape), tl.zeros(a.shape, dtype=tl.int32)],
                                         dtype=tl.int32, is_pure=True, pack=1)


@triton.jit(do_not_specialize=["N", "blocks_per_split"])
def matvec_q4k_q8_kernel(xq, xd, raw, y, bias, N, K, blocks_per_split, row_words, xq_stride, xd_stride, y_stride,
                         M: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr, P: tl.constexpr,
                         ATOMIC: tl.constexpr, HAS_BIAS: tl.constexpr, INTERP: tl.constexpr):
    """Q4_K times rows of x quantized to 8 bits (quantize_q8_kernel), in integers: per sub-block
    of 32 weights, 8 dp4a of 4 nibbles against 4 bytes of x give sum(q * xq) exactly; then, in
    float32, (d * sc) * (dx * sum) - (dmin * m) * (dx * sum(xq)). About one instruction a
    weight where the float kernels take a dozen, at the cost of x's rounding to 8 bits (as
    llama.cpp's CUDA matrix-vector kernels and Wren's CPU ones do). A step takes P pairs of
    sub-blocks of BN rows: [BN, P, 8] words, each holding 4 values of the pair's low sub-block
    (low nibbles) and 4 of its high one."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    split = tl.program_id(1)
    start = split * blocks_per_split * 4
    stop = tl.minimum(start + blocks_per_split * 4, (K // 256) * 4)  # in pairs
    words = raw.to(tl.pointer_type(tl.int32)) + rows[:, None].to(tl.int64) * row_words  # [BN, 1]; 16 | row_words
    xw = xq.to(tl.pointer_type(tl.int32))
    c = tl.arange(0, 8)
    ms = tl.arange(0, MP)[None, :]
    if M == 1:
        acc2 = tl.zeros((BN, P), dtype=tl.float32)
    else:
        acc = tl.zeros((BN, MP), dtype=tl.float32)
    for p0 in range(start, stop, P):
        pp = p0 + tl.arange(0, P)
        pmask = pp < stop
        m2 = (rows[:, None] < N) & pmask[None, :]
        at_q = tl.multiple_of((pp // 4) * 36 + 4 + (pp % 4) * 8, 4)  # the pair's first quant word
        qw = tl.load(words[:, :, None] + at_q[None, :, None] + c[None, None, :], mask=m2[:, :, None], other=0)
        lo = qw & 0x0F0F0F0F  # [BN, P, 8]
        hi = (qw >> 4) & 0x0F0F0F0F
        blk = ((pp // 4) * 36)[None, :]
        head = tl.load(words + blk, mask=m2, other=0)  # [BN, P]: d | dmin << 16
        w1 = tl.load(words + blk + 1, mask=m2, other=0)  # scale bytes 0-3
        w2 = tl.load(words + blk + 2, mask=m2, other=0)  # minimum bytes 0-3
        w3 = tl.load(words + blk + 3, mask=m2, other=0)  # low nibbles of scales and minimums 4-7
        d, dmin = _k_d_dmin(head)
        sub = ((pp % 4) * 2)[None, :]
        sc_lo, mn_lo = _k_sub_scales(w1, w2, w3, sub)
        sc_hi, mn_hi = _k_sub_scales(w1, w2, w3, sub + 1)
        for m in tl.static_range(M):
            xrow = xw + m * xq_stride
            x_lo = tl.load(xrow + (pp * 16)[:, None] + c[None, :], mask=pmask[:, None], other=0)  # [P, 8]
            x_hi = tl.load(xrow + (pp * 16 + 8)[:, None] + c[None, :], mask=pmask[:, None], other=0)
            s_lo = tl.sum(_dp4a(lo, x_lo[None, :, :], INTERP), axis=2).to(tl.float32)  # [BN, P]
            s_hi = tl.sum(_dp4a(hi, x_hi[None, :, :], INTERP), axis=2).to(tl.float32)
            dx = xd + m * xd_stride + pp * 4  # the pair's two blocks: d, d * sum, d, d * sum
            dx_lo = tl.load(dx, mask=pmask, other=0.0)[None, :]
            ds_lo = tl.load(dx + 1, mask=pmask, other=0.0)[None, :]
            dx_hi = tl.load(dx + 2, mask=pmask, other=0.0)[None, :]
            ds_hi = tl.load(dx + 3, mask=pmask, other=0.0)[None, :]
            part = d * (sc_lo * (dx_lo * s_lo) + sc_hi * (dx_hi * s_hi)) - dmin * (mn_lo * ds_lo + mn_hi * ds_hi)
            if M == 1:
                acc2 += part
            else:
                acc += tl.where(ms == m, tl.sum(part, axis=1)[:, None], 0.0)
    if M == 1:
        acc = tl.where(ms == 0, tl.sum(acc2, axis=1)[:, None], 0.0)
    _matvec_out(y, bias, acc, rows, ms, N, M, split, y_stride, ATOMIC, HAS_BIAS)


@triton.jit
def _u32_at(halves, at, mask):
    """The little-endian 32-bit word at 16-bit index `at` (Q6_K's blocks of 210 bytes are only
    2-byte aligned, so a word is read as its two halves)."""
    lo = tl.load(halves + at, mask=mask, other=0).to(tl.int32)
    hi = tl.load(halves + at + 1, mask=mask, other=0).to(tl.int32)
    return lo | (hi << 16)


@triton.jit(do_not_specialize=["N", "blocks_per_split"])
def matvec_q6k_q8_kernel(xq, xd, raw, y, bias, N, K, blocks_per_split, row_bytes, xq_stride, xd_stride, y_stride,
                         M: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr,
                         ATOMIC: tl.constexpr, HAS_BIAS: tl.constexpr, INTERP: tl.constexpr):
    """Q6_K times rows of x quantized to 8 bits (quantize_q8_kernel), in integers: a step is
    one super-block of BN rows as [BN, 16 sub-blocks, 4 words], word t of sub-block s holding
    its values 4t..4t+3 (6 bits each: 4 from ql, 2 from qh, rebuilt in place for the word's 4
    bytes at once). dp4a gives sum(q * xq); the zero point's 32 * sum(xq) is taken off per
    sub-block (computed once for all rows); then the int8 scale, and in float32 d * dx."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    split = tl.program_id(1)
    start = split * blocks_per_split
    stop = tl.minimum(start + blocks_per_split, K // 256)
    rhalves = raw.to(tl.pointer_type(tl.uint16)) + rows.to(tl.int64) * (row_bytes // 2)  # [BN]
    halves = rhalves[:, None, None]
    rbytes = raw + rows[:, None].to(tl.int64) * row_bytes
    m3 = (rows < N)[:, None, None]
    m2 = (rows < N)[:, None]
    sub = tl.arange(0, 16)[:, None]  # [16, 1]
    t = tl.arange(0, 4)[None, :]
    hf = sub // 8
    j = (sub % 8) // 2  # which of the four 32-value runs of the half (q1..q4 in ggml's order)
    u = (sub % 2) * 4 + t  # the word within a run
    ql_at = (hf * 16 + (j % 2) * 8 + u) * 2  # [16, 4], in 16-bit units from the block's start
    qh_at = 64 + (hf * 8 + u) * 2
    low_shift = (j // 2) * 4
    high_shift = j * 2
    subs = tl.arange(0, 16)
    ms = tl.arange(0, MP)[None, :]
    if M == 1:
        acc2 = tl.zeros((BN, 16), dtype=tl.float32)
    else:
        acc = tl.zeros((BN, MP), dtype=tl.float32)
    for sb in range(start, stop):
        base = halves + sb * 105
        ql = _u32_at(base, ql_at[None, :, :], m3)  # [BN, 16, 4]
        qh = _u32_at(base, qh_at[None, :, :], m3)
        q = ((ql >> low_shift[None, :, :]) & 0x0F0F0F0F) | (((qh >> high_shift[None, :, :]) & 0x03030303) << 4)
        sc = tl.load(rbytes + sb * 210 + 192 + subs[None, :], mask=m2, other=0).to(tl.int8, bitcast=True).to(tl.int32)
        d = tl.load(rhalves + sb * 105 + 104, mask=rows < N, other=0).to(tl.float16, bitcast=True).to(tl.float32)
        for m in tl.static_range(M):
            xw = tl.load(xq.to(tl.pointer_type(tl.int32)) + m * xq_stride + sb * 64 + sub * 4 + t)  # [16, 4]
            zero = tl.sum(_dp4a(tl.full((16, 4), 0x20202020, tl.int32), xw, INTERP), axis=1)  # [16]: 32 * sum(xq)
            isum = tl.sum(_dp4a(q, xw[None, :, :], INTERP), axis=2) - zero[None, :]  # [BN, 16]
            dx = tl.load(xd + m * xd_stride + (sb * 8 + subs // 2) * 2)  # [16]: each sub-block's block's d
            part = (sc * isum).to(tl.float32) * dx[None, :] * d[:, None]
            if M == 1:
                acc2 += part
            else:
                acc += tl.where(ms == m, tl.sum(part, axis=1)[:, None], 0.0)
    if M == 1:
        acc = tl.where(ms == 0, tl.sum(acc2, axis=1)[:, None], 0.0)
    _matvec_out(y, bias, acc, rows, ms, N, M, split, y_stride, ATOMIC, HAS_BIAS)
