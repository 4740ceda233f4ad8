"""Triton kernels over GGUF blocks: one exact dequantization, a fused dequantize + matrix-vector
product for a few rows of activations, and a dequantize-a-tile + tl.dot GEMM for many.

Imported only where triton is (triton_gguf.py is the entry point and says why Triton). Every
kernel sees a weight as GGUF stores it, `uint8 [N, row_bytes]`, one row per output, and works on
*groups*: the runs of GS values that share one scale (32 values; Q6_K's 16). `_group` reads a
tile of groups for a tile of rows and returns their integer values (zero point subtracted),
scales and offsets, so value = q * s (+ or - o) in float32: the operations, and their order,
of ggml.dequantize (d * sc is one float32 product, then * q, then the offset). The dequantize
kernel is launched without floating-point contraction so no multiply-add is fused.

Triton's compiler needs power-of-two tl.arange sizes and constexpr shapes; branches on the
type are constexpr, resolved at compile time (one kernel per type).
"""

from __future__ import annotations

import triton
import triton.language as tl

# GGUF type ids (gguf.constants.GGMLQuantizationType), as constexpr values for the kernels.
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K = 2, 3, 6, 7, 8, 12, 13, 14


@triton.jit
def _byte(raw, at, mask):
    return tl.load(raw + at, mask=mask, other=0).to(tl.int32)


@triton.jit
def _half(raw, at, mask):
    """The little-endian fp16 at byte `at`, widened to float32 (exact)."""
    lo = tl.load(raw + at, mask=mask, other=0).to(tl.uint16)
    hi = tl.load(raw + at + 1, mask=mask, other=0).to(tl.uint16)
    return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def _magic_float(bits):
    """int32 values 0..2^23 as float32 without a conversion instruction (GPUs convert at a
    quarter or less of their float rate): 2^23 + v has v in its mantissa, so its bits are
    0x4B000000 | v, and subtracting 2^23 leaves v exactly."""
    return (bits | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0


@triton.jit
def _nibble(raw, at, j, mask):
    """Values 0-15 of a 32-value block whose byte j % 16 holds value j (low nibble) and
    value j + 16 (high nibble): Q4_0, Q4_1, Q5_0, Q5_1."""
    return (_byte(raw, at + (j % 16), mask) >> ((j // 16) * 4)) & 15


@triton.jit
def _high_bit(raw, at, j, mask):
    """16 times bit j of the little-endian 32-bit word at `at` (Q5_0/Q5_1's qh)."""
    return ((_byte(raw, at + j // 8, mask) >> (j % 8)) & 1) << 4


@triton.jit
def _k_scale_min(raw, blk, sub, mask):
    """Q4_K/Q5_K's 6-bit scale and minimum of sub-block `sub` (0-7) from the 12 bytes at blk + 4:
    bytes 0-3 scales 0-3, bytes 4-7 minimums 0-3 (low 6 bits each); bytes 8-11 the low 4 bits of
    scales 4-7 (low nibble) and minimums 4-7 (high nibble), their top 2 bits the top bits of
    bytes 0-3 and 4-7."""
    p = _byte(raw, blk + 4 + sub % 4, mask)
    q = _byte(raw, blk + 8 + sub % 4, mask)
    r = _byte(raw, blk + 8 + sub, mask)  # bytes 8-11 for sub-blocks 4-7
    low = sub < 4
    sc = tl.where(low, p & 63, (r & 15) | ((p >> 6) << 4))
    mn = tl.where(low, q & 63, (r >> 4) | ((q >> 6) << 4))
    return sc.to(tl.float32), mn.to(tl.float32)


@triton.jit
def _group(raw, gg, j, mask, QTYPE: tl.constexpr):
    """A tile of groups: `raw` [BN, 1, 1] pointers to each weight row's first byte, `gg` [1, G, 1] the
    groups' indices within the row, `j` [1, 1, GS] the values' places in their group, `mask`
    [BN, G, 1] the groups that exist. Returns q int32 [BN, G, GS] (the type's zero point taken
    off), s and o float32 [BN, G, 1]: value = q * s, then + o (Q4_1, Q5_1) or - o (Q4_K, Q5_K)."""
    if QTYPE == 2:  # Q4_0: d, 16 bytes of nibbles; d * (q - 8)
        blk = gg * 18
        s = _half(raw, blk, mask)
        o = s
        q = _nibble(raw, blk + 2, j, mask) - 8
    elif QTYPE == 3:  # Q4_1: d, m, 16 bytes; d * q + m
        blk = gg * 20
        s = _half(raw, blk, mask)
        o = _half(raw, blk + 2, mask)
        q = _nibble(raw, blk + 4, j, mask)
    elif QTYPE == 6:  # Q5_0: d, qh (4 bytes), 16 bytes; d * (q - 16)
        blk = gg * 22
        s = _half(raw, blk, mask)
        o = s
        q = (_nibble(raw, blk + 6, j, mask) | _high_bit(raw, blk + 2, j, mask)) - 16
    elif QTYPE == 7:  # Q5_1: d, m, qh, 16 bytes; d * q + m
        blk = gg * 24
        s = _half(raw, blk, mask)
        o = _half(raw, blk + 2, mask)
        q = _nibble(raw, blk + 8, j, mask) | _high_bit(raw, blk + 4, j, mask)
    elif QTYPE == 8:  # Q8_0: d, 32 int8; d * q
        blk = gg * 34
        s = _half(raw, blk, mask)
        o = s
        q = tl.load(raw + blk + 2 + j, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.int32)
    elif QTYPE == 12:  # Q4_K: d, dmin, 12 bytes of scales, 128 bytes; (d * sc) * q - dmin * m
        blk = (gg // 8) * 144
        sub = gg % 8
        sc, mn = _k_scale_min(raw, blk, sub, mask)
        s = _half(raw, blk, mask) * sc
        o = _half(raw, blk + 2, mask) * mn
        q = (_byte(raw, blk + 16 + (sub // 2) * 32 + j, mask) >> ((sub % 2) * 4)) & 15
    elif QTYPE == 13:  # Q5_K: as Q4_K, with qh (32 bytes: bit i of qh[j], value j of sub-block i)
        blk = (gg // 8) * 176
        sub = gg % 8
        sc, mn = _k_scale_min(raw, blk, sub, mask)
        s = _half(raw, blk, mask) * sc
        o = _half(raw, blk + 2, mask) * mn
        q = (_byte(raw, blk + 48 + (sub // 2) * 32 + j, mask) >> ((sub % 2) * 4)) & 15
        q = q | (((_byte(raw, blk + 16 + j, mask) >> sub) & 1) << 4)
    else:  # Q6_K (16-value groups): ql 128 bytes, qh 64, 16 int8 scales, d; (d * sc) * (q - 32)
        blk = (gg // 16) * 210
        sub = gg % 16
        v = sub * 16 + j  # the value's place in its super-block
        half = v // 128
        r = v % 128
        low = (_byte(raw, blk + half * 64 + r % 64, mask) >> ((r // 64) * 4)) & 15
        high = (_byte(raw, blk + 128 + half * 32 + r % 32, mask) >> ((r // 32) * 2)) & 3
        sc = tl.load(raw + blk + 192 + sub, mask=mask, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        s = _half(raw, blk + 208, mask) * sc
        o = s
        q = (low | (high << 4)) - 32
    return q, s, o


@triton.jit
def _values(raw, gg, j, mask, QTYPE: tl.constexpr, OFFSET: tl.constexpr):
    """The tile's float32 values [BN, G, GS], as ggml.dequantize computes them."""
    q, s, o = _group(raw, gg, j, mask, QTYPE)
    w = q.to(tl.float32) * s
    if OFFSET == 1:
        w = w + o
    elif OFFSET == -1:
        w = w - o
    return w


@triton.jit
def dequantize_kernel(raw, out, N, groups, row_bytes, out_stride,
                      QTYPE: tl.constexpr, GS: tl.constexpr, OFFSET: tl.constexpr,
                      BN: tl.constexpr, G: tl.constexpr, BF16: tl.constexpr):
    """out[n, :] = the values of weight row n; a program does BN rows by G groups. BF16: out is
    bfloat16, rounded to nearest even in integers (Triton's interpreter truncates in .to())."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    gg = tl.program_id(1) * G + tl.arange(0, G)
    j = tl.arange(0, GS)
    r3 = rows[:, None, None]
    g3 = gg[None, :, None]
    mask = (r3 < N) & (g3 < groups)
    w = _values(raw + r3.to(tl.int64) * row_bytes, g3, j[None, None, :], mask, QTYPE, OFFSET)
    cols = g3 * GS + j[None, None, :]
    if BF16:
        bits = w.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        tl.store(out.to(tl.pointer_type(tl.uint16)) + r3.to(tl.int64) * out_stride + cols, bits.to(tl.uint16), mask=mask)
    else:
        tl.store(out + r3.to(tl.int64) * out_stride + cols, w.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _matvec_out(y, bias, acc, rows, ms, N, M: tl.constexpr, split, y_stride, ATOMIC: tl.constexpr,
                HAS_BIAS: tl.constexpr):
    """A matrix-vector program's result acc [BN, MP] into y[m, rows] (+ bias, added by the first
    K share only): stored, or with ATOMIC added into y (zeroed float32, split-K)."""
    if HAS_BIAS:
        acc += tl.where(split == 0, tl.load(bias + rows, mask=rows < N, other=0.0).to(tl.float32)[:, None], 0.0)
    out = y + ms.to(tl.int64) * y_stride + rows[:, None]
    omask = (rows[:, None] < N) & (ms < M)
    if ATOMIC:
        tl.atomic_add(out, acc, mask=omask)
    else:
        tl.store(out, acc.to(y.dtype.element_ty), mask=omask)


@triton.jit(do_not_specialize=["N", "groups_per_split"])  # fewer compiles: these vary by shape
def matvec_kernel(x, raw, y, bias, N, K, groups_per_split, row_bytes, x_stride, y_stride,
                  QTYPE: tl.constexpr, GS: tl.constexpr, OFFSET: tl.constexpr, M: tl.constexpr,
                  MP: tl.constexpr, BN: tl.constexpr, G: tl.constexpr, ATOMIC: tl.constexpr,
                  HAS_BIAS: tl.constexpr):
    """y[m, n] (+)= x[m, :] . W[n, :] for the M (a few) rows of x: a program reads BN weight rows
    over its share of K (split-K: program_id(1); with ATOMIC the shares are added into a zeroed
    float32 y). Each weight byte is read by one program; the M rows reuse the unpacked values.

    Per group: sum_j (q s + o) x_j = s * sum_j q x_j + o * sum_j x_j, so a value costs one
    conversion and one multiply-add per row of x; the scales are applied once per group."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    split = tl.program_id(1)
    groups = K // GS
    start = split * groups_per_split
    stop = tl.minimum(start + groups_per_split, groups)
    j = tl.arange(0, GS)[None, None, :]
    r3 = rows[:, None, None]
    base = raw + r3.to(tl.int64) * row_bytes
    ms = tl.arange(0, MP)[None, :]
    acc = tl.zeros((BN, MP), dtype=tl.float32)
    for g0 in range(start, stop, G):
        g1 = g0 + tl.arange(0, G)
        gmask = g1 < stop
        mask = (r3 < N) & gmask[None, :, None]
        q, s, o = _group(base, g1[None, :, None], j, mask, QTYPE)
        qf = q.to(tl.float32)
        cols = g1[:, None] * GS + tl.arange(0, GS)[None, :]  # [G, GS]
        for m in tl.static_range(M):
            xm = tl.load(x + m * x_stride + cols, mask=gmask[:, None], other=0.0).to(tl.float32)
            part = tl.sum(qf * xm[None, :, :], axis=2, keep_dims=True) * s
            if OFFSET != 0:
                xs = tl.sum(xm, axis=1)[None, :, None]
                if OFFSET == 1:
                    part = part + o * xs
                else:
                    part = part - o * xs
            dot = tl.sum(tl.sum(part, axis=2), axis=1)  # [BN]
            acc += tl.where(ms == m, dot[:, None], 0.0)
    _matvec_out(y, bias, acc, rows, ms, N, M, split, y_stride, ATOMIC, HAS_BIAS)


@triton.jit(do_not_specialize=["M", "N"])
def gemm_kernel(x, raw, y, bias, M, N, K, groups, row_bytes, x_stride, y_stride,
                QTYPE: tl.constexpr, GS: tl.constexpr, OFFSET: tl.constexpr, BM: tl.constexpr,
                BN: tl.constexpr, G: tl.constexpr, DOT: tl.constexpr, HAS_BIAS: tl.constexpr,
                INTERP: tl.constexpr):
    """y = x W^T for many rows of x: each program dequantizes a [BN, G * GS] tile of W in
    registers, rounds it to the activations' 16-bit type (DOT: 0 bfloat16, 1 float16, 2 float32
    with tf32 products) and accumulates tl.dot in float32. Programs that share weight rows run
    next to each other (the M tiles vary fastest), so W is read from memory about once.
    INTERP: Triton's interpreter, whose tl.dot of 16-bit floats multiplies their bits as integers
    (Triton 3.7): there the rounded tiles are widened back and multiplied in float32."""
    BK: tl.constexpr = G * GS
    pid = tl.program_id(0)
    m_tiles = tl.cdiv(M, BM)
    pid_m = pid % m_tiles
    pid_n = pid // m_tiles
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    r3 = rn[:, None, None]
    base = raw + r3.to(tl.int64) * row_bytes
    j = tl.arange(0, GS)[None, None, :]
    kk = tl.arange(0, BK)
    xrow = x + rm[:, None].to(tl.int64) * x_stride
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for g0 in range(0, groups, G):  # groups = K // GS
        g1 = g0 + tl.arange(0, G)
        mask = (r3 < N) & (g1[None, :, None] < groups)
        w = tl.reshape(_values(base, g1[None, :, None], j, mask, QTYPE, OFFSET), (BN, BK))
        k = g0 * GS + kk
        xt = tl.load(xrow + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        if INTERP and DOT != 2:
            dt = tl.bfloat16 if DOT == 0 else tl.float16
            acc = tl.dot(xt.to(dt).to(tl.float32), tl.trans(w.to(dt).to(tl.float32)), acc)
        elif DOT == 0:
            acc = tl.dot(xt.to(tl.bfloat16), tl.trans(w.to(tl.bfloat16)), acc)
        elif DOT == 1:
            acc = tl.dot(xt.to(tl.float16), tl.trans(w.to(tl.float16)), acc)
        else:
            acc = tl.dot(xt.to(tl.float32), tl.trans(w), acc)
    if HAS_BIAS:
        acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    out = y + rm[:, None].to(tl.int64) * y_stride + rn[None, :]
    tl.store(out, acc.to(y.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit(do_not_specialize=["N", "blocks_per_split"])
def matvec_q4k_kernel(x, raw, y, bias, N, K, blocks_per_split, row_bytes, row_words, x_stride, y_stride,
                      M: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr, P: tl.constexpr,
                      ATOMIC: tl.constexpr, HAS_BIAS: tl.constexpr):
    """matvec_kernel for Q4_K, reading the quants as 32-bit words (whole 16-byte vectors where
    aligned): a super-block is 4 pairs of sub-blocks, each 8 words; nibble e of a word holds, for
    e' = its place in SHIFT's order, value 32 * (e' // 4) + 4c + e' % 4 of its pair (c: the word
    in the pair). A step takes P pairs (P / 4 super-blocks) of BN rows."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    split = tl.program_id(1)
    start = split * blocks_per_split * 4
    stop = tl.minimum(start + blocks_per_split * 4, (K // 256) * 4)  # in pairs
    r4 = rows[:, None, None, None]
    words = raw.to(tl.pointer_type(tl.int32)) + r4.to(tl.int64) * row_words  # row_words: Triton sees 16 | it
    rbytes = raw + rows[:, None, None].to(tl.int64) * row_bytes
    c = tl.arange(0, 8)
    e = tl.arange(0, 8)
    shift = (e % 4) * 8 + (e // 4) * 4  # low nibbles (h = 0) first, then high ones
    vals = (e // 4) * 32 + e % 4  # the value each nibble holds, in its pair
    h = tl.arange(0, 2)[None, None, :]
    ms = tl.arange(0, MP)[None, :]
    acc = tl.zeros((BN, MP), dtype=tl.float32)
    for p0 in range(start, stop, P):
        pp = p0 + tl.arange(0, P)
        pmask = pp < stop
        blk = pp // 4  # super-block
        mask4 = (r4 < N) & pmask[None, :, None, None]
        at = tl.multiple_of(blk * 36 + 4 + (pp % 4) * 8, 4)  # the pair's first word, 16-byte aligned
        qw = tl.load(words + at[None, :, None, None] + c[None, None, :, None], mask=mask4, other=0)
        q = ((qw >> shift[None, None, None, :]) & 15).to(tl.float32)  # [BN, P, 8, 8]
        mask3 = (rows[:, None, None] < N) & pmask[None, :, None]
        sub = (pp % 4)[None, :, None] * 2 + h  # [1, P, 2]
        bb = rbytes + (blk * 144)[None, :, None]
        sc, mn = _k_scale_min(bb, 0, sub, mask3)
        s = _half(bb, 0, mask3) * sc  # [BN, P, 2]
        o = _half(bb, 2, mask3) * mn
        cols = (blk * 256 + (pp % 4) * 64)[:, None, None] + c[None, :, None] * 4 + vals[None, None, :]  # [P, 8, 8]
        for m in tl.static_range(M):
            xm = tl.load(x + m * x_stride + cols, mask=pmask[:, None, None], other=0.0).to(tl.float32)
            dots = tl.sum(q * xm[None, :, :, :], axis=2)  # [BN, P, 8 nibbles]
            dh = tl.sum(tl.reshape(dots, (BN, P, 2, 4)), axis=3)  # [BN, P, 2]: per sub-block
            xh = tl.sum(tl.reshape(tl.sum(xm, axis=1), (P, 2, 4)), axis=2)[None, :, :]  # [1, P, 2]
            part = s * dh - o * xh
            dot = tl.sum(tl.sum(part, axis=2), axis=1)
            acc += tl.where(ms == m, dot[:, None], 0.0)
    _matvec_out(y, bias, acc, rows, ms, N, M, split, y_stride, ATOMIC, HAS_BIAS)


@triton.jit(do_not_specialize=["N", "blocks_per_split"])
def matvec_q6k_kernel(x, raw, y, bias, N, K, blocks_per_split, row_bytes, x_stride, y_stride,
                      M: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr,
                      ATOMIC: tl.constexpr, HAS_BIAS: tl.constexpr):
    """matvec_kernel for Q6_K, reading 16-bit words (a block is 105 of them; only 2-byte aligned).
    A super-block is 4 quarters (half hf, u // 8) of 8 words u; word u of ql, of ql + 32 bytes and
    of qh hold, for byte b and j = 0..3, value 128 hf + 2u + b + 32j (nibble e = 4b + j). A step is
    one super-block of BN rows."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    split = tl.program_id(1)
    start = split * blocks_per_split * 4
    stop = tl.minimum(start + blocks_per_split * 4, (K // 256) * 4)  # in quarters
    r4 = rows[:, None, None, None]
    halves = raw.to(tl.pointer_type(tl.uint16)) + r4.to(tl.int64) * (row_bytes // 2)
    rbytes = raw + rows[:, None, None].to(tl.int64) * row_bytes
    uu = tl.arange(0, 8)[None, None, :, None]
    e = tl.arange(0, 8)
    b = e // 4
    j = e % 4
    shift_low = (b * 8 + (j // 2) * 4)[None, None, None, :]
    shift_high = (b * 8 + j * 2)[None, None, None, :]
    odd = (j % 2 == 1)[None, None, None, :]
    vals = b + 32 * j
    jj = tl.arange(0, 4)[None, None, :]
    ms = tl.arange(0, MP)[None, :]
    acc = tl.zeros((BN, MP), dtype=tl.float32)
    for q0 in range(start, stop, 4):
        qq = q0 + tl.arange(0, 4)
        qmask = qq < stop
        sb = qq // 4
        hf = (qq // 2) % 2
        u = ((qq % 2) * 8)[None, :, None, None] + uu  # [1, 4, 8, 1]
        blk = (sb * 105)[None, :, None, None]
        mask4 = (r4 < N) & qmask[None, :, None, None]
        h4 = hf[None, :, None, None]
        ql_a = tl.load(halves + blk + h4 * 32 + u, mask=mask4, other=0).to(tl.int32)
        ql_b = tl.load(halves + blk + h4 * 32 + 16 + u, mask=mask4, other=0).to(tl.int32)
        qh = tl.load(halves + blk + 64 + h4 * 16 + u, mask=mask4, other=0).to(tl.int32)
        low = (tl.where(odd, ql_b, ql_a) >> shift_low) & 15
        q = _magic_float(low | (((qh >> shift_high) & 3) << 4)) - 32.0  # [BN, 4, 8, 8]
        mask3 = (rows[:, None, None] < N) & qmask[None, :, None]
        bb = rbytes + (sb * 210)[None, :, None]
        sub = (hf * 8 + qq % 2)[None, :, None] + jj * 2  # [1, 4, 4]
        sc = tl.load(bb + 192 + sub, mask=mask3, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        s = _half(bb, 208, mask3) * sc  # [BN, 4, 4]
        cols = (sb * 256 + hf * 128 + (qq % 2) * 16)[:, None, None] + tl.arange(0, 8)[None, :, None] * 2 \
            + vals[None, None, :]  # [4, 8, 8]
        for m in tl.static_range(M):
            xm = tl.load(x + m * x_stride + cols, mask=qmask[:, None, None], other=0.0).to(tl.float32)
            dots = tl.sum(q * xm[None, :, :, :], axis=2)  # [BN, 4, 8 nibbles]
            dj = tl.sum(tl.reshape(dots, (BN, 4, 2, 4)), axis=2)  # [BN, 4, 4]: per sub-block
            dot = tl.sum(tl.sum(s * dj, axis=2), axis=1)
            acc += tl.where(ms == m, dot[:, None], 0.0)
    _matvec_out(y, bias, acc, rows, ms, N, M, split, y_stride, ATOMIC, HAS_BIAS)


@triton.jit(do_not_specialize=["N", "blocks_per_split"])
def matvec_q8_0_kernel(x, raw, y, bias, N, K, blocks_per_split, row_bytes, x_stride, y_stride,
                       M: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr, NB: tl.constexpr,
                       ATOMIC: tl.constexpr, HAS_BIAS: tl.constexpr):
    """matvec_kernel for Q8_0, reading 16-bit words (a block is 17: d, then 16 pairs of int8):
    byte b of word u is value 2u + b of its block. A step is NB blocks of BN rows."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    split = tl.program_id(1)
    start = split * blocks_per_split
    stop = tl.minimum(start + blocks_per_split, K // 32)
    r4 = rows[:, None, None, None]
    halves = raw.to(tl.pointer_type(tl.uint16)) + r4.to(tl.int64) * (row_bytes // 2)
    u = tl.arange(0, 16)
    b = tl.arange(0, 2)
    shift = (b * 8)[None, None, None, :]
    ms = tl.arange(0, MP)[None, :]
    acc = tl.zeros((BN, MP), dtype=tl.float32)
    for k0 in range(start, stop, NB):
        blk = k0 + tl.arange(0, NB)
        bmask = blk < stop
        mask4 = (r4 < N) & bmask[None, :, None, None]
        words = halves + (blk * 17)[None, :, None, None]
        hw = tl.load(words + 1 + u[None, None, :, None], mask=mask4, other=0).to(tl.int32)
        q = ((((hw >> shift) & 255) ^ 128) - 128).to(tl.float32)  # [BN, NB, 16, 2]
        d = tl.load(words, mask=mask4, other=0).to(tl.float16, bitcast=True).to(tl.float32)  # [BN, NB, 1, 1]
        cols = (blk * 32)[:, None, None] + u[None, :, None] * 2 + b[None, None, :]  # [NB, 16, 2]
        for m in tl.static_range(M):
            xm = tl.load(x + m * x_stride + cols, mask=bmask[:, None, None], other=0.0).to(tl.float32)
            dots = tl.sum(tl.sum(q * xm[None, :, :, :], axis=3), axis=2)  # [BN, NB]
            dot = tl.sum(dots * tl.sum(tl.sum(d, axis=3), axis=2), axis=1)
            acc += tl.where(ms == m, dot[:, None], 0.0)
    _matvec_out(y, bias, acc, rows, ms, N, M, split, y_stride, ATOMIC, HAS_BIAS)


@triton.jit
def _q4k_step(words, rbytes, rows, N, p0, stop, P: tl.constexpr):
    """One step's weights for matvec_q4k_words_kernel: the quant bytes [BN, P, 1, 32] of pairs
    p0.. and their super-blocks' four header words [BN, P, 1, 1] (zeros past `stop`)."""
    pp = p0 + tl.arange(0, P)
    m4 = (rows[:, None, None, None] < N) & (pp < stop)[None, :, None, None]
    at_q = tl.multiple_of((pp // 4) * 144 + 16 + (pp % 4) * 32, 16)  # the pair's first byte, 16-byte aligned
    qb = tl.load(rbytes + at_q[None, :, None, None] + tl.arange(0, 32)[None, None, None, :], mask=m4, other=0)
    blk = ((pp // 4) * 36)[None, :, None, None]  # the super-block's first word
    head = tl.load(words + blk, mask=m4, other=0)  # d | dmin << 16
    w1 = tl.load(words + blk + 1, mask=m4, other=0)  # scale bytes 0-3 (low 6 bits: scales 0-3)
    w2 = tl.load(words + blk + 2, mask=m4, other=0)  # minimum bytes 0-3
    w3 = tl.load(words + blk + 3, mask=m4, other=0)  # low nibbles of scales 4-7, minimums 4-7
    return qb, head, w1, w2, w3


@triton.jit(do_not_specialize=["N", "blocks_per_split"])
def matvec_q4k_words_kernel(x, raw, y, bias, N, K, blocks_per_split, row_words, x_stride, y_stride,
                            M: tl.constexpr, MP: tl.constexpr, BN: tl.constexpr, P: tl.constexpr,
                            ATOMIC: tl.constexpr, HAS_BIAS: tl.constexpr):
    """matvec_q4k_kernel shaped for memory in flight and fewer instructions a weight. A step
    takes P pairs of sub-blocks (P / 4 super-blocks) of BN rows as a [BN, P, 2 (nibble: low,
    high), 32 (byte)] tile whose value is 32 h + byte of its pair: a pair's 32 bytes are one
    contiguous load, each sub-block's scale and minimum broadcast along the last axis, and the
    header (d and dmin, three words of 6-bit scales and minimums) is read as 32-bit words. The
    next step's weights are loaded before this step's arithmetic (two steps in flight per
    program), and the quants become floats by _magic_float, not conversion instructions.

    One row of x (decoding one sequence): the dequantized products are added up element-wise
    over K and summed once at the end (no reduction across threads per step). More rows: each
    step's products are summed per row of x, as matvec_q4k_kernel does."""
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    split = tl.program_id(1)
    start = split * blocks_per_split * 4
    stop = tl.minimum(start + blocks_per_split * 4, (K // 256) * 4)  # in pairs
    words = raw.to(tl.pointer_type(tl.int32)) + rows[:, None, None, None].to(tl.int64) * row_words  # 16 | row_words
    rbytes = raw + rows[:, None, None, None].to(tl.int64) * (row_words * 4)
    h = tl.arange(0, 2)[None, None, :, None]
    ms = tl.arange(0, MP)[None, :]
    if M == 1:
        acc1 = tl.zeros((BN, P, 32), dtype=tl.float32)
    else:
        acc = tl.zeros((BN, MP), dtype=tl.float32)
    qb, head, w1, w2, w3 = _q4k_step(words, rbytes, rows, N, start, stop, P)
    for p0 in range(start, stop, P):
        nqb, nhead, nw1, nw2, nw3 = _q4k_step(words, rbytes, rows, N, p0 + P, stop, P)  # in flight meanwhile
        pp = p0 + tl.arange(0, P)
        pmask = pp < stop
        q = _magic_float((qb.to(tl.int32) >> (h * 4)) & 15)  # [BN, P, 2, 32]
        sc, mn = _k_sub_scales(w1, w2, w3, (pp % 4)[None, :, None, None] * 2 + h)  # [BN, P, 2, 1]
        d, dmin = _k_d_dmin(head)
        s = d * sc  # ggml.dequantize's d * sc and dmin * m
        o = dmin * mn
        w = q * s - o
        # x's values for the tile, loaded as [P, 2, 32] and broadcast over the rows (a load of the
        # tile's own shape would make Triton lay the whole step out for x, not for the weights)
        cols = (pp * 64)[:, None, None] + tl.arange(0, 2)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :]
        if M == 1:
            xm = tl.load(x + cols, mask=pmask[:, None, None], other=0.0).to(tl.float32)
            acc1 += tl.sum(w * xm[None, :, :, :], axis=2)  # a thread holds both nibbles of its bytes
        else:
            for m in tl.static_range(M):
                xm = tl.load(x + m * x_stride + cols, mask=pmask[:, None, None], other=0.0).to(tl.float32)
                part = tl.sum(tl.sum(w * xm[None, :, :, :], axis=3), axis=2)  # [BN, P]
                acc += tl.where(ms == m, tl.sum(part, axis=1)[:, None], 0.0)
        qb, head, w1, w2, w3 = nqb, nhead, nw1, nw2, nw3
    if M == 1:
        acc = tl.where(ms == 0, tl.sum(tl.sum(acc1, axis=2), axis=1)[:, None], 0.0)
    _matvec_out(y, bias, acc, rows, ms, N, M, split, y_stride, ATOMIC, HAS_BIAS)


@triton.jit
def _k_d_dmin(head):
    """A k-quant super-block's d and dmin (fp16, little-endian) from its first 32-bit word."""
    d = (head & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    dmin = ((head >> 16) & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    return d, dmin


@triton.jit
def _k_sub_scales(w1, w2, w3, sub):
    """Q4_K/Q5_K's 6-bit scale and minimum of sub-block `sub` (0-7) from the header's scale
    words w1-w3 (bytes 4-15 of the super-block, little-endian): _k_scale_min on words."""
    at = (sub % 4) * 8
    b1 = (w1 >> at) & 255
    b2 = (w2 >> at) & 255
    b3 = (w3 >> at) & 255
    low = sub < 4
    sc = tl.where(low, b1 & 63, (b3 & 15) | ((b1 >> 6) << 4))
    mn = tl.where(low, b2 & 63, (b3 >> 4) | ((b2 >> 6) << 4))
    return sc.to(tl.float32), mn.to(tl.float32)
