"""Wren's C++ kernels for GGUF blocks (engine.inference.quant.kernels / torch.ops.wren).

Dequantization must equal gguf's numpy reference bit for bit. qlinear is checked two ways:
against the float64 product of the exact weights with the activations rounded the way the
kernel rounds them (8 bits per block: only float32 accumulation separates the two), and
against the exact float64 product within the bound that rounding allows,
|err| <= sum over blocks of (scale_x / 2) * sum |w| in the block.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from gguf import quants as gguf_quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from wren.engine.inference.quant import kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"kernels not built: {kernels.NOTICE}")

QUANT_TYPES = [2, 3, 6, 7, 8, 10, 11, 12, 13, 14]  # Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K
FLOAT_TYPES = [0, 1, 30]  # F32 F16 BF16
ALL_TYPES = FLOAT_TYPES + QUANT_TYPES
KQUANTS = {10, 11, 12, 13, 14}
# Byte offsets of each block's fp16 scale fields (d, and dmin/m where the type has one).
SCALE_FIELDS = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 10: [80, 82], 11: [108],
                12: [0, 2], 13: [0, 2], 14: [208]}


def _name(qtype: int) -> str:
    return GGMLQuantizationType(qtype).name


def random_raw(qtype: int, rows: int, cols: int, rng: np.random.Generator, *, any_bits: bool = False) -> np.ndarray:
    """Random GGUF rows: random quant bits, finite fp16 scales in [-1e-2, 1e-2]. Float types
    get random values, or (any_bits) random bit patterns including inf and NaN."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    if qtype in FLOAT_TYPES:
        if any_bits:
            return rng.integers(0, 256, (rows, cols * size), dtype=np.uint8)
        w = rng.standard_normal((rows, cols)).astype(np.float32) * 0.05
        if qtype == 0:
            return w.view(np.uint8).copy()
        if qtype == 1:
            return w.astype(np.float16).view(np.uint8).copy()
        return (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).copy()
    nb = cols // block
    raw = rng.integers(0, 256, (rows, nb, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        scales = rng.uniform(-1e-2, 1e-2, (rows, nb)).astype(np.float16)
        raw[:, :, off:off + 2] = scales.view(np.uint8).reshape(rows, nb, 2)
    return raw.reshape(rows, nb * size)


def reference_weights(raw: np.ndarray, qtype: int) -> np.ndarray:
    rows = raw.shape[0]
    return gguf_quants.dequantize(raw, GGMLQuantizationType(qtype)).reshape(rows, -1)


def per_isa(fn) -> dict:
    """fn()'s result under each instruction set this CPU runs ("scalar" always), by name; the
    best table is back in use afterwards."""
    results = {}
    try:
        for cap in kernels.ISAS:
            if kernels.use_isa(cap) == cap:
                results[cap] = fn()
    finally:
        kernels.use_isa("")
    return results


def rounded_activations(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x as the integer kernels see it (scale amax/127 per block, round half to even) and
    each block's scale, repeated per value."""
    n, cols = x.shape
    xb = x.reshape(n, cols // block, block)
    amax = xb.abs().amax(-1, keepdim=True)
    d = amax / 127
    inv = torch.where(d == 0, torch.zeros_like(amax), 127 / amax)
    q = torch.round(xb * inv)
    return (q.double() * d.double()).reshape(n, cols), d.double().expand_as(xb).reshape(n, cols)


# ---- dequantize ----

@pytest.mark.parametrize("qtype", ALL_TYPES, ids=_name)
def test_dequantize_equals_gguf_bit_for_bit(qtype):
    rng = np.random.default_rng(qtype)
    block, _ = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    cols = max(block, 32) * 3
    raw = random_raw(qtype, 21, cols, rng, any_bits=True)
    got = kernels.dequantize(torch.from_numpy(raw), qtype, cols)
    assert got.dtype == torch.float32 and got.shape == (21, cols)
    want = reference_weights(raw, qtype)
    assert np.isfinite(want).any()
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


def test_dequantize_half_subnormals_and_specials():
    halves = np.array([0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfd55],
                      dtype=np.uint16)
    raw = halves.view(np.uint8).reshape(1, -1)
    got = kernels.dequantize(torch.from_numpy(raw.copy()), 1, len(halves)).numpy()
    np.testing.assert_array_equal(got[0].view(np.uint32), halves.view(np.float16).astype(np.float32).view(np.uint32))


def test_dequantize_rejects_bad_input():
    raw = torch.zeros(4, 18, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="GGML type 9"):
        kernels.dequantize(raw, 9, 32)
    with pytest.raises(RuntimeError, match="take 36 bytes"):
        kernels.dequantize(raw, 2, 64)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        kernels.dequantize(raw, 2, 16)
    with pytest.raises(RuntimeError, match="uint8"):
        kernels.dequantize(raw.float(), 2, 32)


# ---- qlinear ----

def _check_qlinear(qtype: int, rows: int, cols: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = random_raw(qtype, rows, cols, rng)
    w = torch.from_numpy(reference_weights(raw, qtype)).double()
    x = torch.from_numpy(rng.standard_normal((n, cols)).astype(np.float32))
    y = kernels.qlinear(x, torch.from_numpy(raw), qtype, rows)
    assert y.dtype == torch.float32 and y.shape == (n, rows)
    y = y.double()
    exact = x.double() @ w.T
    # float32 accumulation: a few units in the last place of sum |w x|
    slack = 1e-5 * (x.double().abs() @ w.abs().T) + 1e-30
    if qtype in FLOAT_TYPES or (n > kernels.max_gemv_rows() and not kernels.integer_prompt(qtype)):
        # float activations (float weights, or the prompt path's dequantized GEMM when the
        # integer one is off); otherwise the prompt path rounds x as decoding does
        assert ((y - exact).abs() <= slack).all(), float((y - exact).abs().max())
        return
    block = 256 if qtype in KQUANTS else 32
    xq, scale = rounded_activations(x, block)
    assert ((y - xq @ w.T).abs() <= slack).all(), float((y - xq @ w.T).abs().max())
    bound = (scale / 2) @ w.abs().T
    assert ((y - exact).abs() <= bound * 1.001 + slack).all()
    assert (bound < 0.1 * (x.double().abs() @ w.abs().T)).all()  # the bound is a real constraint


@pytest.mark.parametrize("n", [1, 3, 6, 64])
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=_name)
def test_qlinear_matches_float64_reference(qtype, n, isa):
    if n > kernels.max_gemv_rows() and isa != "scalar" and not kernels.integer_prompt():
        pytest.skip("the float prompt path does not depend on the instruction set")
    block = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0]
    cols = 512 if block == 256 else 160  # 160: an odd number of 32-blocks
    _check_qlinear(qtype, rows=45, cols=cols, n=n, seed=qtype * 100 + n)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=_name)
def test_qlinear_one_block_odd_rows(qtype, isa):
    block = max(GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0], 32)
    for rows, n in [(1, 1), (7, 2), (19, 1), (13, 17)]:
        _check_qlinear(qtype, rows=rows, cols=block, n=n, seed=rows + qtype)


def test_qlinear_batch_dims_and_empty():
    rng = np.random.default_rng(5)
    raw = torch.from_numpy(random_raw(2, 10, 64, rng))
    x = torch.randn(2, 3, 64)
    y = kernels.qlinear(x, raw, 2, 10)
    assert y.shape == (2, 3, 10)
    torch.testing.assert_close(y.reshape(6, 10), kernels.qlinear(x.reshape(6, 64), raw, 2, 10), rtol=0, atol=0)
    assert kernels.qlinear(torch.empty(0, 64), raw, 2, 10).shape == (0, 10)


def test_qlinear_rejects_bad_input():
    raw = torch.zeros(4, 18, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="float32"):
        kernels.qlinear(torch.zeros(1, 32, dtype=torch.float64), raw, 2, 4)
    with pytest.raises(RuntimeError, match="expected 5"):
        kernels.qlinear(torch.zeros(1, 32), raw, 2, 5)
    with pytest.raises(RuntimeError, match="take 36 bytes"):
        kernels.qlinear(torch.zeros(1, 64), raw, 2, 4)


@pytest.mark.parametrize("qtype", [2, 8, 12, 14, 1], ids=_name)
def test_qlinear_threads_give_identical_rows(qtype):
    rng = np.random.default_rng(11)
    block = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0]
    cols = 256 if block > 1 else 64
    raw = torch.from_numpy(random_raw(qtype, 3000, cols, rng))  # several parallel chunks
    x = torch.randn(2, cols)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernels.qlinear(x, raw, qtype, 3000)
        torch.set_num_threads(2)
        two = kernels.qlinear(x, raw, qtype, 3000)
        deq_one = kernels.dequantize(raw, qtype, cols)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    assert torch.equal(deq_one, torch.from_numpy(reference_weights(raw.numpy(), qtype)))


@pytest.mark.slow  # compiles a graph (a few seconds)
def test_qlinear_traces_under_torch_compile():
    rng = np.random.default_rng(3)
    raw = torch.from_numpy(random_raw(12, 24, 256, rng))

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("raw", raw)

        def forward(self, x):
            return torch.ops.wren.qlinear(x, self.raw, 12, 24).relu() + torch.ops.wren.qlinear_exact(x, self.raw, 12, 24)

    model = Tiny()
    x = torch.randn(1, 256)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)


@pytest.mark.slow
def test_kernels_off_switch_in_a_fresh_process():
    code = ("from wren.engine.inference.quant import kernels;"
            "print(kernels.available(), kernels.isa());"
            "print(kernels.NOTICE)")
    env = dict(os.environ, WREN_KERNELS="off")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "False none"
    assert "WREN_KERNELS=off" in lines[1]
    assert "WREN_KERNELS=off" in out.stderr  # logged once


def test_isa_names_the_instruction_set():
    assert kernels.isa() in kernels.ISAS
    assert kernels.use_isa("scalar") == "scalar" and kernels.isa() == "scalar"
    assert kernels.use_isa("") in kernels.ISAS
    with pytest.raises(RuntimeError, match="unknown instruction set"):
        kernels.use_isa("sse9")


# ---- qlinear_exact: float activations ----

def _check_qlinear_exact(qtype: int, rows: int, cols: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = random_raw(qtype, rows, cols, rng)
    w = torch.from_numpy(reference_weights(raw, qtype)).double()
    x = torch.from_numpy(rng.standard_normal((n, cols)).astype(np.float32))
    y = kernels.qlinear_exact(x, torch.from_numpy(raw), qtype, rows)
    assert y.dtype == torch.float32 and y.shape == (n, rows)
    exact = x.double() @ w.T
    # the weights are the file's exact values and x is not rounded: only float32 accumulation
    # separates y from the float64 product (the same bound as the float-weight path)
    slack = 1e-5 * (x.double().abs() @ w.abs().T) + 1e-30
    err = (y.double() - exact).abs()
    assert (err <= slack).all(), float((err / slack).max())
    if qtype not in FLOAT_TYPES and n <= kernels.max_gemv_rows():
        # tighter than what 8-bit activations allow: the integer path's error is far larger
        y8 = kernels.qlinear(x, torch.from_numpy(raw), qtype, rows).double()
        assert (y8 - exact).abs().max() > 20 * err.max()


@pytest.mark.parametrize("n", [1, 2, 3, 64])
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=_name)
def test_qlinear_exact_matches_float64_reference(qtype, n, isa):
    if n > kernels.max_gemv_rows() and isa != "scalar" and not kernels.integer_prompt():
        pytest.skip("the float prompt path does not depend on the instruction set")
    block = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0]
    cols = 768 if block == 256 else 160  # odd numbers of blocks
    _check_qlinear_exact(qtype, rows=37, cols=cols, n=n, seed=qtype * 10 + n)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=_name)
def test_qlinear_exact_one_block_odd_rows(qtype, isa):
    block = max(GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0], 32)
    for rows, n in [(1, 1), (7, 5), (19, 16)]:
        _check_qlinear_exact(qtype, rows=rows, cols=block, n=n, seed=rows * 3 + qtype)


@pytest.mark.parametrize("qtype", [12, 14, 8], ids=_name)
def test_qlinear_exact_in_slices_of_rows_and_blocks_of_x(qtype):
    """The exact path takes a slice of rows (about 32 KB of weights) against the rows of x a
    few at a time (wren::exact_rows): 600 rows of 256 weights are several slices, 13 rows of x
    several blocks and a remainder. Each product stays within float32 rounding of the float64
    reference and has the bits of the same row of x alone; an interleaved copy gives the same."""
    rng = np.random.default_rng(qtype)
    rows, cols, n = 600, 256, 13
    raw = random_raw(qtype, rows, cols, rng)
    w = torch.from_numpy(reference_weights(raw, qtype)).double()
    x = torch.from_numpy(rng.standard_normal((n, cols)).astype(np.float32))
    raw_t = torch.from_numpy(raw)
    y = kernels.qlinear_exact(x, raw_t, qtype, rows)
    slack = 1e-5 * (x.double().abs() @ w.abs().T) + 1e-30
    assert ((y.double() - x.double() @ w.T).abs() <= slack).all()
    alone = torch.cat([kernels.qlinear_exact(x[j:j + 1], raw_t, qtype, rows) for j in range(n)])
    assert torch.equal(y, alone)
    packed, layout = kernels.interleaved(raw_t, qtype, cols)
    if layout != qtype:
        assert torch.equal(kernels.qlinear_exact(x, packed, layout, rows), y)


def test_qlinear_exact_isas_agree_on_extreme_scales():
    """Every table computes the same exact weights: with x one-hot, each output is a single
    weight, so the results must equal the dequantized values exactly (any rounding in the
    in-register dequantization would show; a zero's sign may differ: +0 + -0 is +0), on every
    instruction set."""
    rng = np.random.default_rng(9)
    for qtype in QUANT_TYPES:
        block = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0]
        cols = block * 2
        raw = random_raw(qtype, 9, cols, rng)
        for off in SCALE_FIELDS[qtype]:  # scales spanning fp16's range, subnormals included
            halves = rng.choice(np.array([0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xbc00, 0x8123], np.uint16), (9, 2))
            raw.reshape(9, 2, -1)[:, :, off:off + 2] = halves.view(np.uint8).reshape(9, 2, 2)
        want = reference_weights(raw, qtype)
        eye = torch.eye(cols)[rng.choice(cols, 16, replace=False)]
        for cap in kernels.ISAS:
            if kernels.use_isa(cap) != cap:
                continue
            try:
                got = kernels.qlinear_exact(eye, torch.from_numpy(raw), qtype, 9).numpy()
            finally:
                kernels.use_isa("")
            cols_picked = eye.argmax(1).numpy()
            expected = want[:, cols_picked].T
            assert (expected != 0).mean() > 0.5
            np.testing.assert_array_equal(got, expected, err_msg=f"{_name(qtype)} on {cap}")


def test_qlinear_exact_batch_dims_threads_and_bad_input():
    rng = np.random.default_rng(4)
    raw = torch.from_numpy(random_raw(12, 3000, 256, rng))
    x = torch.randn(2, 1, 256)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernels.qlinear_exact(x, raw, 12, 3000)
        torch.set_num_threads(2)
        two = kernels.qlinear_exact(x, raw, 12, 3000)
    finally:
        torch.set_num_threads(before)
    assert one.shape == (2, 1, 3000) and torch.equal(one, two)
    assert kernels.qlinear_exact(torch.empty(0, 256), raw, 12, 3000).shape == (0, 3000)
    with pytest.raises(RuntimeError, match="qlinear_exact: x must be float32"):
        kernels.qlinear_exact(x.double(), raw, 12, 3000)
    with pytest.raises(RuntimeError, match="expected 5"):
        kernels.qlinear_exact(x, raw, 12, 5)


@pytest.mark.parametrize("qtype", [2, 3, 6, 7, 8], ids=_name)
def test_qlinear_row_result_independent_of_call_shape(qtype, isa):
    """Decoding runs several weight rows per pass (one activation row) and several activation
    rows per pass (batched decoding): a row's result is the same, bit for bit, whether it is
    computed alone, among 1..9 weight rows (every group remainder), or next to another x row."""
    rng = np.random.default_rng(qtype)
    raw = torch.from_numpy(random_raw(qtype, 9, 96, rng))
    x = torch.randn(2, 96)
    alone = torch.stack([kernels.qlinear(x[:1], raw[r:r + 1], qtype, 1)[0, 0] for r in range(9)])
    for rows in range(1, 10):
        assert torch.equal(kernels.qlinear(x[:1], raw[:rows], qtype, rows)[0], alone[:rows])
    assert torch.equal(kernels.qlinear(x, raw, qtype, 9)[0], alone)


@pytest.mark.parametrize("qtype", QUANT_TYPES, ids=_name)
def test_qlinear_exact_row_result_independent_of_call_rows(qtype, isa):
    """The float-activation kernels take several x rows per weight pass (a prompt's exact
    tail of 16 rows, a verify pass): a row's result is the same, bit for bit, whether it is
    computed alone or among 2..16 rows (every remainder of the four-, two- and one-row
    passes), in the file's layout and in the interleaved one QuantLinear holds."""
    rng = np.random.default_rng(qtype + 100)
    block = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0]
    cols = 3 * max(block, 32)
    raw = torch.from_numpy(random_raw(qtype, 16, cols, rng))
    layouts = {(qtype, raw.data_ptr()): raw}
    packed, packed_type = kernels.interleaved(raw, qtype, cols)
    layouts[(packed_type, packed.data_ptr())] = packed
    x = torch.from_numpy(rng.standard_normal((16, cols)).astype(np.float32))
    for (layout, _), w in layouts.items():
        alone = torch.cat([kernels.qlinear_exact(x[j:j + 1], w, layout, 16) for j in range(16)])
        for n in (2, 3, 4, 5, 6, 7, 8, 9, 12, 16):
            together = kernels.qlinear_exact(x[:n], w, layout, 16)
            assert torch.equal(together, alone[:n]), f"{_name(qtype)} layout {layout}, {n} rows"


@pytest.mark.parametrize("qtype", [2, 3, 8, 12, 14], ids=_name)
def test_verify_rows_equal_decoding_rows(qtype, isa):
    """Speculative decoding verifies k drafted tokens in one call of k rows; greedy output
    stays identical to decoding only if each row's logits are the bits a one-row step gives.
    For the layouts a Q4_0 or Q4_K_M model holds (the interleaved Q4_0/Q4_1/Q4_K/Q6_K groups,
    Q8_0 rows) the 8-bit kernels give a row the same bits alone or among 2..9 rows. (Not
    Q4_K/Q5_K rows in the file's layout on x86: one row takes the dot kernel, several the
    row-pass kernel, summing in another order.)"""
    rng = np.random.default_rng(qtype + 200)
    cols = 2 * max(GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0], 32)
    raw, layout = kernels.interleaved(torch.from_numpy(random_raw(qtype, 16, cols, rng)), qtype, cols)
    if kernels.REPACK:  # the model's layout: interleaved where one exists
        # (Q6_K: the NEON tables have no group kernel, avx2's is slower for a decoded token)
        assert (layout != qtype) == (qtype in (2, 3, 12) or (qtype == 14 and isa not in ("avx2", "neon", "neon-dotprod",
                                                                                         "neon-i8mm")))
    x = torch.from_numpy(rng.standard_normal((9, cols)).astype(np.float32))
    one = torch.cat([kernels.qlinear(x[j:j + 1], raw, layout, 16) for j in range(9)])
    for k in range(2, 10):
        assert torch.equal(kernels.qlinear(x[:k], raw, layout, 16), one[:k]), f"{_name(qtype)}, {k} rows"
