"""The output head's wide activations (`wren::qlinear_wide`, csrc x16dot_*).

A decoding step rounds x finely for the usual output heads — 16 bits per 32 values (scale
amax / 32767) for Q8_0, 15 bits per 256 values (scale amax / 16383) for Q6_K, half to even
— and sums the products in integers. Checked: against the float64 product of the exact
weights with x rounded that way (only float32 accumulation between them), against the exact
product within the bound the rounding allows (sum over values of |w| * amax / (2 * levels)),
1/258 and 1/129 of the 8-bit kernels' bound per block; the same bits on every instruction
set; types without the kernel and the prompt's many rows equal qlinear_exact; QuantLinear's
head takes it unless WREN_HEAD_ACTIVATIONS=exact.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.engine.inference.test_qkernels import per_isa, random_raw, reference_weights
from wren.engine.inference.quant import kernels
from wren.engine.inference.quant.modules import QTensor, QuantLinear, exact_activations

pytestmark = pytest.mark.skipif(not kernels.has_wide(), reason=f"kernels not built: {kernels.NOTICE}")

Q8_0, Q4_K, Q6_K = 8, 12, 14
WIDE = {Q6_K: "Q6_K", Q8_0: "Q8_0"}


# Each type's activation rounding: (values per scale, largest level).
ROUNDING = {Q8_0: (32, 32767), Q6_K: (256, 16383)}


def rounded(x: torch.Tensor, qtype: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x as the kernels see it for qtype, and each value's largest rounding error (float64)."""
    size, levels = ROUNDING[qtype]
    n, cols = x.shape
    xb = x.reshape(n, cols // size, size)
    amax = xb.abs().amax(-1, keepdim=True)
    inv = torch.where(amax == 0, torch.zeros_like(amax), levels / amax)
    q = torch.round(xb * inv)  # float32, half to even, as the kernels do
    d = amax / levels
    step = (amax.double() / (2 * levels)).expand_as(xb).reshape(n, cols)
    return (q.double() * d.double()).reshape(n, cols), step


def _weights(qtype: int, rows: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    raw = torch.from_numpy(random_raw(qtype, rows, cols, np.random.default_rng(seed)))
    return raw, torch.from_numpy(reference_weights(raw.numpy(), qtype)).double()


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("qtype", WIDE, ids=WIDE.get)
def test_products_meet_the_wide_bound(qtype, n, isa):
    rows, cols = 40, 768
    raw, w = _weights(qtype, rows, cols, 20 + n)
    x = torch.randn(n, cols, generator=torch.Generator().manual_seed(n)) * 3
    y = kernels.qlinear_wide(x, raw, qtype, rows).double()
    xr, step = rounded(x, qtype)
    slack = 2e-6 * (x.double().abs() @ w.abs().T) + 1e-30
    assert ((y - xr @ w.T).abs() <= slack).all(), float((y - xr @ w.T).abs().max())
    bound = step @ w.abs().T
    exact = x.double() @ w.T
    assert ((y - exact).abs() <= bound * 1.001 + slack).all()
    # far closer than the 8-bit path, whose bound is 129-258 times wider per block
    err8 = (kernels.qlinear(x, raw, qtype, rows).double() - exact).abs().max()
    assert (y - exact).abs().max() < err8 / 20


@pytest.mark.parametrize("qtype", WIDE, ids=WIDE.get)
def test_every_instruction_set_gives_the_same_bits(qtype):
    raw, _ = _weights(qtype, 24, 512, 3)
    x = torch.randn(5, 512)
    results = per_isa(lambda: kernels.qlinear_wide(x, raw, qtype, 24))
    if len(results) < 2:
        pytest.skip("this CPU runs only the scalar table")
    for cap, got in results.items():
        assert torch.equal(got, results["scalar"]), cap


def test_q6_k_at_the_extremes_of_its_integer_sums():
    """Every weight at 63 or 0 with scales -128 or 127 against x at +-amax: the split
    activation bytes at their limits (hi -128 and 127), integer lane sums past 2^24 before
    the zero point comes off and up to 2^24 after it; every table gives the same bits,
    within float32 accumulation of the exact product."""
    rows, cols = 4, 512
    blocks = np.zeros((rows, cols // 256, 210), dtype=np.uint8)
    blocks[0, :, :192] = 0xFF  # q = 63 everywhere
    blocks[1, :, :192] = 0x00  # q = 0 everywhere
    blocks[2, :, :192] = 0xFF
    blocks[3, :, :192] = 0xAA  # mixed
    blocks[:, :, 192:208] = np.array([-128, 127] * 8, dtype=np.int8).view(np.uint8)
    blocks[0, :, 192:208] = np.array([-128] * 16, dtype=np.int8).view(np.uint8)
    blocks[:, :, 208:210] = np.array([1.0], dtype=np.float16).view(np.uint8)
    raw = torch.from_numpy(blocks.reshape(rows, -1))
    w = torch.from_numpy(reference_weights(raw.numpy(), Q6_K)).double()
    x = torch.full((3, cols), 5.0)
    x[1] = -5.0
    x[2, ::2] = -5.0
    results = per_isa(lambda: kernels.qlinear_wide(x, raw, Q6_K, rows))
    for cap, got in results.items():
        assert torch.equal(got, results["scalar"]), cap
    exact = x.double() @ w.T
    assert ((results["scalar"].double() - exact).abs() <= 2e-6 * (x.double().abs() @ w.abs().T)).all()


def test_a_rows_result_does_not_depend_on_the_calls_shape():
    raw, _ = _weights(Q6_K, 16, 512, 4)
    x = torch.randn(3, 512)
    together = kernels.qlinear_wide(x, raw, Q6_K, 16)
    for j in range(3):
        assert torch.equal(kernels.qlinear_wide(x[j:j + 1], raw, Q6_K, 16)[0], together[j])
    assert torch.equal(kernels.qlinear_wide(x, raw[:5], Q6_K, 5), together[:, :5])


def test_other_types_and_the_prompt_path_are_exact():
    raw, _ = _weights(Q4_K, 16, 256, 5)  # no 16-bit kernel: the float path
    x = torch.randn(2, 256)
    assert torch.equal(kernels.qlinear_wide(x, raw, Q4_K, 16), kernels.qlinear_exact(x, raw, Q4_K, 16))
    raw6, _ = _weights(Q6_K, 16, 256, 6)
    many = torch.randn(kernels.max_gemv_rows() + 3, 256)  # a prompt: dequantized tiles, torch's GEMM
    assert torch.equal(kernels.qlinear_wide(many, raw6, Q6_K, 16), kernels.qlinear_exact(many, raw6, Q6_K, 16))


def test_zero_and_bad_input():
    raw, _ = _weights(Q6_K, 8, 256, 7)
    assert torch.equal(kernels.qlinear_wide(torch.zeros(1, 256), raw, Q6_K, 8), torch.zeros(1, 8))
    with pytest.raises(RuntimeError, match="qlinear_wide: x must be float32"):
        kernels.qlinear_wide(torch.zeros(1, 256, dtype=torch.float64), raw, Q6_K, 8)
    with pytest.raises(RuntimeError, match="qlinear_wide"):
        kernels.qlinear_wide(torch.zeros(1, 256), raw, Q6_K, 9)


def test_the_head_takes_16_bit_activations_but_not_under_exact_activations():
    raw, _ = _weights(Q6_K, 16, 256, 8)
    head = QuantLinear([QTensor(raw, Q6_K, (16, 256))], exact=True)
    x = torch.randn(1, 256)
    want = kernels.qlinear_wide(x, raw, Q6_K, 16) if kernels.WIDE_HEAD else kernels.qlinear_exact(x, raw, Q6_K, 16)
    assert torch.equal(head(x), want)
    with exact_activations():
        assert torch.equal(head(x), kernels.qlinear_exact(x, raw, Q6_K, 16))


def test_the_head_switch_in_a_fresh_process():
    code = "from wren.engine.inference.quant import kernels\nprint(kernels.WIDE_HEAD)\n"
    for value, want in (("exact", "False"), ("off", "False"), ("", "True")):
        env = {**os.environ, "WREN_HEAD_ACTIVATIONS": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == want
