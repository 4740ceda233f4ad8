"""The kernels' interleaved layout Q4_0x8 (csrc/repack.cpp): eight Q4_0 rows' blocks side by
side, so decoding reads eight rows per pass with each row's sum in its own vector lane.

It is only a permutation of the file's bytes: dequantizing it gives the file's values bit
for bit, in C++ and in the torch fallback. Its integer dots are the Q4_0 ones (the same
8-bit activations), so the products meet the same bounds as Q4_0's; every instruction set
gives the same bits, and a row's result does not depend on how many activation rows or
groups a call has. QuantLinear repacks Q4_0 parts whose rows come in eights (not the
exact output head) unless WREN_REPACK=off.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.engine.inference.test_qkernels import random_raw, reference_weights, rounded_activations
from wren.engine.inference.quant import ggml, kernels
from wren.engine.inference.quant.modules import QTensor, QuantLinear

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"kernels not built: {kernels.NOTICE}")

Q4_0, Q4_0_X8 = 2, 40


def numpy_repack(raw: np.ndarray) -> np.ndarray:
    """The layout written out independently of the C++: per 8 rows and block, the 8 scales,
    then 4 chunks of each row's quant bytes 4c..4c+3."""
    rows, width = raw.shape
    nb = width // 18
    out = np.empty_like(raw).reshape(rows // 8, nb, 144)
    blocks = raw.reshape(rows // 8, 8, nb, 18)
    for r in range(8):
        out[:, :, 2 * r:2 * r + 2] = blocks[:, r, :, 0:2]
        for c in range(4):
            out[:, :, 16 + 32 * c + 4 * r:16 + 32 * c + 4 * r + 4] = blocks[:, r, :, 2 + 4 * c:6 + 4 * c]
    return out.reshape(rows, width)


def _weights(rows: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.from_numpy(random_raw(Q4_0, rows, cols, np.random.default_rng(seed)))
    packed, qtype = kernels.interleaved(raw, Q4_0, cols)
    assert qtype == Q4_0_X8
    return raw, packed


def test_the_layout_is_a_permutation_that_round_trips():
    raw, packed = _weights(48, 160, 1)
    assert packed.shape == raw.shape and not torch.equal(packed, raw)
    np.testing.assert_array_equal(packed.numpy(), numpy_repack(raw.numpy()))
    back, base = ggml.unpack_interleaved(packed, Q4_0_X8)
    assert base == Q4_0 and torch.equal(back, raw)
    want = torch.from_numpy(reference_weights(raw.numpy(), Q4_0))
    for got in (kernels.dequantize(packed, Q4_0_X8, 160), ggml.dequantize(packed, Q4_0_X8, 160)):
        np.testing.assert_array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))
    assert ggml.type_name(Q4_0_X8) == "Q4_0x8" and ggml.row_bytes(Q4_0_X8, 160) == ggml.row_bytes(Q4_0, 160)


@pytest.mark.parametrize("n", [1, 2, 3, 16])
def test_decoding_products_meet_the_q4_0_bounds(n, isa):
    rows, cols = 56, 256
    raw, packed = _weights(rows, cols, 10 + n)
    w = torch.from_numpy(reference_weights(raw.numpy(), Q4_0)).double()
    x = torch.randn(n, cols, generator=torch.Generator().manual_seed(n))
    y = kernels.qlinear(x, packed, Q4_0_X8, rows).double()
    xq, scale = rounded_activations(x, 32)
    slack = 1e-5 * (x.double().abs() @ w.abs().T) + 1e-30
    assert ((y - xq @ w.T).abs() <= slack).all(), float((y - xq @ w.T).abs().max())
    bound = (scale / 2) @ w.abs().T
    assert ((y - x.double() @ w.T).abs() <= bound * 1.001 + slack).all()
    # the file layout's kernel computes the same products (its own summation order)
    assert ((y - kernels.qlinear(x, raw, Q4_0, rows).double()).abs() <= 2 * slack).all()


def test_every_instruction_set_gives_the_same_bits():
    raw, packed = _weights(32, 512, 3)
    x = torch.randn(5, 512)
    results = {}
    try:
        for cap in ("scalar", "avx2", "avx512-vnni"):
            if kernels.use_isa(cap) == cap:
                results[cap] = kernels.qlinear(x, packed, Q4_0_X8, 32)
    finally:
        kernels.use_isa("")
    if len(results) < 2:
        pytest.skip("this CPU runs only the scalar table")
    first = results["scalar"]
    for cap, got in results.items():
        assert torch.equal(got, first), cap


def test_a_rows_result_does_not_depend_on_the_calls_shape(isa):
    raw, packed = _weights(24, 96, 4)
    x = torch.randn(5, 96)
    together = kernels.qlinear(x, packed, Q4_0_X8, 24)
    for j in range(5):
        assert torch.equal(kernels.qlinear(x[j:j + 1], packed, Q4_0_X8, 24)[0], together[j])
    first_group = kernels.qlinear(x, packed[:8], Q4_0_X8, 8)
    assert torch.equal(first_group, together[:, :8])


def test_exact_and_prompt_paths_equal_the_file_layouts():
    raw, packed = _weights(40, 128, 5)
    for n in (1, 7):  # qlinear_exact: float activations, each group unpacked to file rows
        x = torch.randn(n, 128)
        assert torch.equal(kernels.qlinear_exact(x, packed, Q4_0_X8, 40), kernels.qlinear_exact(x, raw, Q4_0, 40))
    x = torch.randn(kernels.max_gemv_rows() + 20, 128)  # the prompt path: dequantized tiles, torch's GEMM
    assert torch.equal(kernels.qlinear(x, packed, Q4_0_X8, 40), kernels.qlinear(x, raw, Q4_0, 40))


def test_fused_parts_mix_layouts():
    raw_a, packed_a = _weights(16, 64, 6)
    raw_b = torch.from_numpy(random_raw(Q4_0, 5, 64, np.random.default_rng(7)))  # 5 rows: not repacked
    raw_c, packed_c = _weights(8, 64, 8)
    for n in (1, 4, 40):
        x = torch.randn(n, 64)
        for exact in (False, True):
            got = kernels.qlinear_parts(x, [packed_a, raw_b, packed_c], (Q4_0_X8, Q4_0, Q4_0_X8), (16, 5, 8), exact)
            one = kernels.qlinear_exact if exact else kernels.qlinear
            want = torch.cat([one(x, packed_a, Q4_0_X8, 16), one(x, raw_b, Q4_0, 5), one(x, packed_c, Q4_0_X8, 8)], -1)
            assert torch.equal(got, want), (n, exact)


def test_bad_input_says_what_is_wrong():
    raw = torch.from_numpy(random_raw(Q4_0, 12, 64, np.random.default_rng(9)))
    assert kernels.interleaved(raw, Q4_0, 64) == (raw, Q4_0)  # 12 rows: left in the file layout
    with pytest.raises(RuntimeError, match="groups of 8, got 12 rows"):
        torch.ops.wren.repack(raw, Q4_0_X8, 64)
    with pytest.raises(RuntimeError, match="groups of 8, got 12 rows"):
        kernels.qlinear(torch.randn(1, 64), raw, Q4_0_X8, 12)
    with pytest.raises(RuntimeError, match="not an interleaved layout"):
        torch.ops.wren.repack(raw, Q4_0, 64)
    other = torch.from_numpy(random_raw(12, 8, 256, np.random.default_rng(9)))  # Q4_K has no layout yet
    assert kernels.interleaved(other, 12, 256)[1] == 12


def test_quant_linear_repacks_q4_0_but_not_the_exact_head():
    raw, _ = _weights(16, 64, 10)
    odd = torch.from_numpy(random_raw(Q4_0, 4, 64, np.random.default_rng(11)))
    fused = QuantLinear([QTensor(raw, Q4_0, (16, 64)), QTensor(odd, Q4_0, (4, 64))])  # merged: 20 rows
    assert fused.qtypes == (Q4_0,)
    layer = QuantLinear([QTensor(raw, Q4_0, (16, 64))])
    assert layer.qtypes == (Q4_0_X8,) and "Q4_0x8[16]" in layer.extra_repr()
    head = QuantLinear([QTensor(raw, Q4_0, (16, 64))], exact=True)
    assert head.qtypes == (Q4_0,) and head.raw0.data_ptr() == raw.data_ptr()  # still shares the bytes
    x = torch.randn(3, 64)
    assert torch.equal(layer(x), kernels.qlinear(x, layer.raw0, Q4_0_X8, 16))
    assert torch.allclose(layer(x), kernels.qlinear(x, raw, Q4_0, 16), rtol=1e-5, atol=1e-5)
    assert torch.equal(layer.parts()[0].dequantize(), QTensor(raw, Q4_0, (16, 64)).dequantize())


def test_repack_off_switch_in_a_fresh_process():
    code = ("import torch\nfrom wren.engine.inference.quant import kernels\n"
            "raw = torch.zeros(16, 36, dtype=torch.uint8)\n"
            "print(kernels.interleaved(raw, 2, 64)[1])\n")
    for value, want in (("off", "2"), ("", "40")):
        env = {**os.environ, "WREN_REPACK": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == want
