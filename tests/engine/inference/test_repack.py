"""The kernels' interleaved layouts Q4_0x8, Q4_1x8, Q4_Kx8 and Q6_Kx8 (csrc/repack.cpp): eight rows' blocks
side by side, so decoding reads eight rows per pass with each row's sum in its own vector lane.

It is only a permutation of the file's bytes: dequantizing it gives the file's values bit
for bit, in C++ and in the torch fallback. Their integer dots are the file type's (the same
8-bit activations), so the products meet the same bounds; every instruction set
gives the same bits, and a row's result does not depend on how many activation rows or
groups a call has (and a Q6_Kx8 row is the scalar table's Q6_K row dot bit for bit). QuantLinear
repacks Q4_0, Q4_1, Q4_K and Q6_K parts whose rows come in eights (not the
exact output head) unless WREN_REPACK=off.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.engine.inference.test_qkernels import per_isa, random_raw, reference_weights, rounded_activations
from wren.engine.inference.quant import ggml, kernels
from wren.engine.inference.quant.modules import QTensor, QuantLinear

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"kernels not built: {kernels.NOTICE}")

Q4_0, Q4_0_X8, Q4_1, Q4_1_X8, Q4_K, Q4_K_X8, Q6_K, Q6_K_X8 = 2, 40, 3, 42, 12, 41, 14, 43
LAYOUTS = {Q4_0: Q4_0_X8, Q4_1: Q4_1_X8, Q4_K: Q4_K_X8, Q6_K: Q6_K_X8}
BLOCK = {Q4_0: 32, Q4_1: 32, Q4_K: 256, Q6_K: 256}


def _name(qtype: int) -> str:
    return {Q4_0: "Q4_0", Q4_1: "Q4_1", Q4_K: "Q4_K", Q6_K: "Q6_K"}[qtype]


def numpy_repack(raw: np.ndarray, qtype: int) -> np.ndarray:
    """The layouts written out independently of the C++ (csrc/wren_quant.h describes them)."""
    rows, width = raw.shape
    if qtype in (Q4_0, Q4_1):  # per block: the 8 scales (Q4_1: and minimums), 4 chunks of quant bytes 4c..4c+3
        f = 2 if qtype == Q4_1 else 1
        size = 2 * f + 16
        nb = width // size
        out = np.empty_like(raw).reshape(rows // 8, nb, 8 * size)
        blocks = raw.reshape(rows // 8, 8, nb, size)
        for r in range(8):
            for field in range(f):
                out[:, :, 16 * field + 2 * r:16 * field + 2 * r + 2] = blocks[:, r, :, 2 * field:2 * field + 2]
            for c in range(4):
                at = 16 * f + 32 * c + 4 * r
                out[:, :, at:at + 4] = blocks[:, r, :, 2 * f + 4 * c:2 * f + 4 * c + 4]
        return out.reshape(rows, width)
    if qtype == Q6_K:  # the 8 d, the scales as row pairs per group pair, 32 chunks of ql, 16 of qh
        nb = width // 210
        out = np.empty_like(raw).reshape(rows // 8, nb, 1680)
        blocks = raw.reshape(rows // 8, 8, nb, 210)
        for r in range(8):
            out[:, :, 2 * r:2 * r + 2] = blocks[:, r, :, 208:210]
            for i in range(8):
                out[:, :, 16 + 16 * i + 2 * r:18 + 16 * i + 2 * r] = blocks[:, r, :, 192 + 2 * i:194 + 2 * i]
            for c in range(32):
                out[:, :, 144 + 32 * c + 4 * r:148 + 32 * c + 4 * r] = blocks[:, r, :, 4 * c:4 * c + 4]
            for c in range(16):
                out[:, :, 1168 + 32 * c + 4 * r:1172 + 32 * c + 4 * r] = blocks[:, r, :, 128 + 4 * c:132 + 4 * c]
        return out.reshape(rows, width)
    nb = width // 144  # Q4_K: d, dmin, decoded 6-bit scales and minimums, 32 chunks of quants
    out = np.zeros_like(raw).reshape(rows // 8, nb, 1152)
    blocks = raw.reshape(rows // 8, 8, nb, 144).astype(np.int64)
    k = blocks[..., 4:16]
    sc = np.concatenate([k[..., 0:4] & 63, (k[..., 8:12] & 15) | ((k[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([k[..., 4:8] & 63, (k[..., 8:12] >> 4) | ((k[..., 4:8] >> 6) << 4)], axis=-1)
    for r in range(8):
        out[:, :, 2 * r:2 * r + 2] = blocks[:, r, :, 0:2]
        out[:, :, 16 + 2 * r:18 + 2 * r] = blocks[:, r, :, 2:4]
        for b in range(8):
            out[:, :, 32 + 8 * b + r] = (sc[:, r, :, b] & 15) | ((mn[:, r, :, b] & 15) << 4)
            out[:, :, 96 + 4 * b + r // 2] |= (((sc[:, r, :, b] >> 4) | ((mn[:, r, :, b] >> 4) << 2))
                                               << (4 * (r & 1))).astype(np.uint8)
        for c in range(32):
            out[:, :, 128 + 32 * c + 4 * r:132 + 32 * c + 4 * r] = blocks[:, r, :, 16 + 4 * c:20 + 4 * c]
    return out.reshape(rows, width)


def _picks_layout(qtype: int) -> bool:
    """Whether interleaved() picks the layout on the active table: all do but Q6_K on avx2
    (its one-token kernel is slower than the rows', csrc/repack.cpp) and NEON (no kernel)."""
    return qtype != Q6_K or torch.ops.wren.isa() not in ("avx2", "neon", "neon-dotprod", "neon-i8mm")


def _weights(qtype: int, rows: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.from_numpy(random_raw(qtype, rows, cols, np.random.default_rng(seed)))
    packed, layout = kernels.interleaved(raw, qtype, cols)
    if not _picks_layout(qtype):
        assert layout == qtype
        packed, layout = torch.ops.wren.repack(raw, LAYOUTS[qtype], cols), LAYOUTS[qtype]
    assert layout == LAYOUTS[qtype]
    return raw, packed


@pytest.mark.parametrize("qtype", LAYOUTS, ids=_name)
def test_the_layout_is_a_permutation_that_round_trips(qtype):
    cols = 5 * BLOCK[qtype]  # an odd number of blocks
    raw, packed = _weights(qtype, 48, cols, 1)
    layout = LAYOUTS[qtype]
    assert packed.shape == raw.shape and not torch.equal(packed, raw)
    np.testing.assert_array_equal(packed.numpy(), numpy_repack(raw.numpy(), qtype))
    back, base = ggml.unpack_interleaved(packed, layout)
    assert base == qtype and torch.equal(back, raw)
    want = torch.from_numpy(reference_weights(raw.numpy(), qtype))
    for got in (kernels.dequantize(packed, layout, cols), ggml.dequantize(packed, layout, cols)):
        np.testing.assert_array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))
    assert ggml.row_bytes(layout, cols) == ggml.row_bytes(qtype, cols)


def test_every_bit_of_the_k_scales_survives():
    """Q4_K's 12 packed scale bytes are decoded into the layout and encoded back: all 96 bits."""
    raw = np.random.default_rng(2).integers(0, 256, (8, 144), dtype=np.uint8)
    packed, _ = kernels.interleaved(torch.from_numpy(raw), Q4_K, 256)
    assert torch.equal(ggml.unpack_interleaved(packed, Q4_K_X8)[0], torch.from_numpy(raw))
    assert torch.equal(torch.ops.wren.dequantize(packed, Q4_K_X8, 256).view(torch.int32),
                       torch.ops.wren.dequantize(torch.from_numpy(raw), Q4_K, 256).view(torch.int32))


@pytest.mark.parametrize("n", [1, 2, 3, 16])
@pytest.mark.parametrize("qtype", LAYOUTS, ids=_name)
def test_decoding_products_meet_the_file_types_bounds(qtype, n, isa):
    rows, cols = 56, 512
    raw, packed = _weights(qtype, rows, cols, 10 + n)
    w = torch.from_numpy(reference_weights(raw.numpy(), qtype)).double()
    x = torch.randn(n, cols, generator=torch.Generator().manual_seed(n))
    y = kernels.qlinear(x, packed, LAYOUTS[qtype], rows).double()
    xq, scale = rounded_activations(x, BLOCK[qtype])
    slack = 1e-5 * (x.double().abs() @ w.abs().T) + 1e-30
    assert ((y - xq @ w.T).abs() <= slack).all(), float((y - xq @ w.T).abs().max())
    bound = (scale / 2) @ w.abs().T
    assert ((y - x.double() @ w.T).abs() <= bound * 1.001 + slack).all()
    # the file layout's kernel computes the same products (its own summation order)
    assert ((y - kernels.qlinear(x, raw, qtype, rows).double()).abs() <= 2 * slack).all()


@pytest.mark.parametrize("qtype", LAYOUTS, ids=_name)
def test_every_instruction_set_gives_the_same_bits(qtype):
    raw, packed = _weights(qtype, 32, 512, 3)
    x = torch.randn(5, 512)
    results = per_isa(lambda: kernels.qlinear(x, packed, LAYOUTS[qtype], 32))
    if len(results) < 2:
        pytest.skip("this CPU runs only the scalar table")
    first = results["scalar"]
    for cap, got in results.items():
        assert torch.equal(got, first), cap


@pytest.mark.parametrize("qtype", LAYOUTS, ids=_name)
def test_a_rows_result_does_not_depend_on_the_calls_shape(qtype, isa):
    raw, packed = _weights(qtype, 24, 256, 4)
    layout = LAYOUTS[qtype]
    x = torch.randn(5, 256)
    together = kernels.qlinear(x, packed, layout, 24)
    for j in range(5):
        assert torch.equal(kernels.qlinear(x[j:j + 1], packed, layout, 24)[0], together[j])
    first_group = kernels.qlinear(x, packed[:8], layout, 8)
    assert torch.equal(first_group, together[:, :8])


@pytest.mark.parametrize("qtype", LAYOUTS, ids=_name)
def test_exact_and_prompt_paths_equal_the_file_layouts(qtype):
    raw, packed = _weights(qtype, 40, 256, 5)
    layout = LAYOUTS[qtype]
    for n in (1, 7):  # qlinear_exact: float activations, each group unpacked to file rows
        x = torch.randn(n, 256)
        assert torch.equal(kernels.qlinear_exact(x, packed, layout, 40), kernels.qlinear_exact(x, raw, qtype, 40))
    x = torch.randn(kernels.max_gemv_rows() + 20, 256)  # the prompt path
    prompt = kernels.qlinear(x, packed, layout, 40)
    if kernels.integer_prompt():  # x quantized once, each row's products the decoding kernels' own
        assert torch.equal(prompt, torch.cat([kernels.qlinear(part, packed, layout, 40) for part in x.split(8)]))
    else:  # dequantized tiles, torch's GEMM
        assert torch.equal(prompt, kernels.qlinear(x, raw, qtype, 40))


def test_fused_parts_mix_layouts():
    """A Q4_K_M-style fused projection: Q4_Kx8 beside Q6_K rows and a 5-row Q4_K (not repacked)."""
    raw_a, packed_a = _weights(Q4_K, 16, 256, 6)
    raw_b = torch.from_numpy(random_raw(Q4_K, 5, 256, np.random.default_rng(7)))
    raw_c = torch.from_numpy(random_raw(14, 8, 256, np.random.default_rng(8)))  # Q6_K
    for n in (1, 4, 40):
        x = torch.randn(n, 256)
        for exact in (False, True):
            got = kernels.qlinear_parts(x, [packed_a, raw_b, raw_c], (Q4_K_X8, Q4_K, 14), (16, 5, 8), exact)
            one = kernels.qlinear_exact if exact else kernels.qlinear
            want = torch.cat([one(x, packed_a, Q4_K_X8, 16), one(x, raw_b, Q4_K, 5), one(x, raw_c, 14, 8)], -1)
            assert torch.equal(got, want), (n, exact)


def test_bad_input_says_what_is_wrong():
    raw = torch.from_numpy(random_raw(Q4_0, 12, 64, np.random.default_rng(9)))
    got, qtype = kernels.interleaved(raw, Q4_0, 64)
    assert got is raw and qtype == Q4_0  # 12 rows: left in the file layout
    with pytest.raises(RuntimeError, match="groups of 8, got 12 rows"):
        torch.ops.wren.repack(raw, Q4_0_X8, 64)
    with pytest.raises(RuntimeError, match="groups of 8, got 12 rows"):
        kernels.qlinear(torch.randn(1, 64), raw, Q4_0_X8, 12)
    with pytest.raises(RuntimeError, match="not an interleaved layout"):
        torch.ops.wren.repack(raw, Q4_0, 64)
    other = torch.from_numpy(random_raw(13, 8, 256, np.random.default_rng(9)))  # Q5_K has no layout
    assert kernels.interleaved(other, 13, 256)[1] == 13


def test_quant_linear_repacks_q4_0_but_not_the_exact_head():
    raw, _ = _weights(Q4_0, 16, 64, 10)
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


@pytest.mark.parametrize("n", [1, 3, 6, 40])
def test_q6_k_groups_give_the_scalar_q6_k_dot_on_every_table(n):
    """Each Q6_Kx8 row's product is the scalar table's Q6_K row dot (dot_q6_k) bit for bit:
    the same exact integer sum per super-block, then acc += (d_x * d) * sum unfused. 40 rows
    of x take the integer prompt path (qgemm) where it is on."""
    rows, cols = 24, 768  # three groups, three super-blocks
    raw, packed = _weights(Q6_K, rows, cols, 20 + n)
    x = torch.randn(n, cols, generator=torch.Generator().manual_seed(n)) * 3
    kernels.use_isa("scalar")
    try:
        want = torch.cat([kernels.qlinear(x[j:j + 1], raw, Q6_K, rows) for j in range(n)])
    finally:
        kernels.use_isa("")
    for cap, got in per_isa(lambda: kernels.qlinear(x, packed, Q6_K_X8, rows)).items():
        assert torch.equal(got, want), (cap, float((got - want).abs().max()))


def test_q6_k_extreme_weights_and_scales_stay_exact():
    """Every 6-bit weight 0 or 63 and scales of -128 / 127 against activations of +-127: the
    group sums (63 * 127 * 16 = 128,016) and their products with the scales leave int16 on
    every table and must stay exact."""
    rng = np.random.default_rng(30)
    raw = random_raw(Q6_K, 8, 512, rng)
    blocks = raw.reshape(8, 2, 210)
    blocks[:, :, :192] = rng.choice(np.array([0x00, 0xff], dtype=np.uint8), blocks[:, :, :192].shape)
    blocks[:, :, 192:208] = rng.choice(np.array([0x80, 0x7f], dtype=np.uint8), blocks[:, :, 192:208].shape)
    raw = torch.from_numpy(blocks.reshape(8, 420).copy())
    packed = torch.ops.wren.repack(raw, Q6_K_X8, 512)
    x = torch.from_numpy(rng.choice(np.array([-1.0, 1.0], dtype=np.float32), (5, 512)))
    kernels.use_isa("scalar")
    try:
        want = torch.cat([kernels.qlinear(x[j:j + 1], raw, Q6_K, 8) for j in range(5)])
    finally:
        kernels.use_isa("")
    w = torch.from_numpy(reference_weights(raw.numpy(), Q6_K)).double()
    slack = 1e-5 * (x.double().abs() @ w.abs().T)  # x = +-1: only float32 rounding off the exact sum
    assert ((want.double() - x.double() @ w.T).abs() <= slack).all()
    for cap, got in per_isa(lambda: kernels.qlinear(x, packed, Q6_K_X8, 8)).items():
        assert torch.equal(got, want), cap


@pytest.mark.parametrize("n", [1, 3, 8, 10, 13, 15])
@pytest.mark.parametrize("qtype", [Q4_K, Q6_K], ids=_name)
def test_a_pass_over_two_groups_gives_each_group_s_bits(qtype, n):
    """Where a table reads two groups a pass (qdot_group2: AVX-512's 16 rows in 512-bit
    registers, for at least 8 rows of x), every row's product is still the scalar table's,
    one group at a time: five groups (two pairs, then one alone), three super-blocks, n rows
    of x in each register blocking (8, 4, 2 and 1 at a time) and below the pairs' threshold."""
    rows, cols = 40, 768
    raw, packed = _weights(qtype, rows, cols, 40 + n)
    x = torch.randn(n, cols, generator=torch.Generator().manual_seed(100 + n)) * 2
    results = per_isa(lambda: kernels.qlinear(x, packed, LAYOUTS[qtype], rows))
    want = results["scalar"]
    w = torch.from_numpy(reference_weights(raw.numpy(), qtype)).double()
    xq, _ = rounded_activations(x, 256)
    slack = 1e-5 * (x.double().abs() @ w.abs().T) + 1e-30
    assert ((want.double() - xq @ w.T).abs() <= slack).all()  # the reference is the integer dot
    for cap, got in results.items():
        assert torch.equal(got, want), (cap, float((got - want).abs().max()))
    # a row's bits do not depend on whether its group shares a pass: a call of one group each
    one_by_one = torch.cat([kernels.qlinear(x, packed[g:g + 8], LAYOUTS[qtype], 8) for g in range(0, rows, 8)], 1)
    assert torch.equal(one_by_one, results[torch.ops.wren.isa()])


def test_q4_k_extreme_weights_scales_and_minimums_stay_exact_two_groups_a_pass():
    """Every nibble 15, every 6-bit scale and minimum 63 against activations of +-127: a
    sub-block's sum 32 * 15 * 127 = 60,960 times its scale leaves int16; two groups (one pass
    on AVX-512) give the scalar table's bits and the exact sum to float32 rounding."""
    rng = np.random.default_rng(31)
    raw = random_raw(Q4_K, 16, 512, rng)
    blocks = raw.reshape(16, 2, 144)
    blocks[:, :, 4:16] = 0xFF  # every 6-bit scale and minimum 63
    blocks[:, :, 16:] = 0xFF  # every nibble 15
    raw = torch.from_numpy(blocks.reshape(16, 288).copy())
    packed = torch.ops.wren.repack(raw, Q4_K_X8, 512)
    x = torch.from_numpy(rng.choice(np.array([-1.0, 1.0], dtype=np.float32), (9, 512)))
    results = per_isa(lambda: kernels.qlinear(x, packed, Q4_K_X8, 16))
    want = results["scalar"]
    w = torch.from_numpy(reference_weights(raw.numpy(), Q4_K)).double()
    slack = 1e-5 * (x.double().abs() @ w.abs().T)  # x = +-1: only float32 rounding off the exact sum
    assert ((want.double() - x.double() @ w.T).abs() <= slack).all()
    for cap, got in results.items():
        assert torch.equal(got, want), cap


def test_group_pairs_off_gives_the_same_bits_in_a_fresh_process():
    """WREN_GROUP_PAIRS=off (an A/B switch, read once) keeps one group a pass: the same bits."""
    code = ("import hashlib, torch\nfrom wren.engine.inference.quant import kernels\n"
            "from tests.engine.inference.test_repack import _weights\n"
            "for q, l in ((12, 41), (14, 43)):\n"
            "    raw, packed = _weights(q, 48, 512, 7)\n"
            "    x = torch.randn(70, 512, generator=torch.Generator().manual_seed(1))\n"
            "    y = torch.cat([kernels.qlinear(x, packed, l, 48), kernels.qlinear(x[:1], packed, l, 48)])\n"
            "    print(hashlib.sha256(y.numpy().tobytes()).hexdigest())\n")
    outs = []
    for value in ("off", ""):
        env = {**os.environ, "WREN_GROUP_PAIRS": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
        assert out.returncode == 0, out.stderr[-2000:]
        outs.append(out.stdout.split()[-2:])
    assert outs[0] == outs[1]


def test_repack_can_leave_out_one_file_type_in_a_fresh_process():
    """WREN_REPACK=-q6_k keeps Q6_K in rows (an A/B of its layout) and still repacks Q4_K."""
    code = ("import torch\nfrom wren.engine.inference.quant import kernels\n"
            "q6 = torch.zeros(16, 210, dtype=torch.uint8)\nq4 = torch.zeros(16, 144, dtype=torch.uint8)\n"
            "print(kernels.interleaved(q6, 14, 256)[1], kernels.interleaved(q4, 12, 256)[1])\n")
    q6 = "43" if _picks_layout(Q6_K) else "14"  # the best table here, as in the fresh process
    for value, want in (("-q6_k", "14 41"), ("", f"{q6} 41"), ("-Q4_K,-Q6_K", "14 12"), ("-q6_k0", f"{q6} 41")):
        env = {**os.environ, "WREN_REPACK": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == want, value
