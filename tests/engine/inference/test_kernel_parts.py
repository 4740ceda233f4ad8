"""wren::qlinear_parts: a fused linear's parts (possibly of different GGUF types) in one call.

It must give, bit for bit, what one qlinear (or qlinear_exact) per part concatenated gives:
the parts share one quantization of x per activation format and one parallel pass split by
weight bytes, which changes no row's arithmetic. QuantLinear, which decoding runs, goes
through it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.engine.inference.test_qkernels import random_raw
from wren.engine.inference.quant import ggml, kernels
from wren.engine.inference.quant.modules import QTensor, QuantLinear

pytestmark = pytest.mark.skipif(not kernels.available(), reason=f"kernels not built: {kernels.NOTICE}")

# (types, input width): a Q4_K_M block's Q/K + V, legacy types of different zero points,
# a float part beside a quantized one, and three activation formats in one call.
COMBOS = [((12, 14), 512), ((2,), 160), ((2, 8, 3), 160), ((14, 0), 256), ((6, 12, 30), 256)]


def _parts(types, cols, rng):
    rows = [96, 40, 24][: len(types)]
    return [torch.from_numpy(random_raw(t, r, cols, rng)) for t, r in zip(types, rows)], list(types), rows


@pytest.mark.parametrize("exact", [False, True], ids=["int8", "exact"])
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "+".join(map(str, c[0])))
def test_parts_equal_one_call_per_part(combo, exact, isa):
    types, cols = combo
    rng = np.random.default_rng(sum(types) + cols)
    raws, qtypes, rows = _parts(types, cols, rng)
    single = kernels.qlinear_exact if exact else kernels.qlinear
    for n in (1, 3, kernels.max_gemv_rows() + 1):  # decode, batched decode, the prompt path
        x = torch.randn(n, cols)
        want = torch.cat([single(x, raw, q, r) for raw, q, r in zip(raws, qtypes, rows)], dim=-1)
        got = kernels.qlinear_parts(x, raws, qtypes, rows, exact)
        assert got.shape == (n, sum(rows))
        assert torch.equal(got, want), f"n={n}: max difference {(got - want).abs().max().item()}"


def test_parts_threads_and_batch_dims():
    rng = np.random.default_rng(7)
    raws, qtypes, rows = _parts((12, 14), 256, rng)
    raws = [torch.cat([raw] * 40) for raw in raws]  # several parallel chunks across the seam
    rows = [r * 40 for r in rows]
    x = torch.randn(2, 1, 256)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernels.qlinear_parts(x, raws, qtypes, rows)
        torch.set_num_threads(2)
        two = kernels.qlinear_parts(x, raws, qtypes, rows)
    finally:
        torch.set_num_threads(before)
    assert one.shape == (2, 1, sum(rows))
    assert torch.equal(one, two)
    assert kernels.qlinear_parts(torch.empty(0, 256), raws, qtypes, rows).shape == (0, sum(rows))


def test_parts_reject_bad_input():
    raw = torch.zeros(4, 18, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="equally long"):
        kernels.qlinear_parts(torch.zeros(1, 32), [raw], [2, 2], [4])
    with pytest.raises(RuntimeError, match="part 1 has 4 rows, expected 5"):
        kernels.qlinear_parts(torch.zeros(1, 32), [raw, raw], [2, 2], [4, 5])
    with pytest.raises(RuntimeError, match="float32"):
        kernels.qlinear_parts(torch.zeros(1, 32, dtype=torch.float64), [raw], [2], [4])
    with pytest.raises(RuntimeError, match="GGML type 99"):
        kernels.qlinear_parts(torch.zeros(1, 32), [raw], [99], [4])


def test_quant_linear_of_mixed_parts_runs_one_call():
    rng = np.random.default_rng(3)
    raws, qtypes, rows = _parts((12, 12, 14), 256, rng)
    module = QuantLinear([QTensor(raw, q, (r, 256)) for raw, q, r in zip(raws, qtypes, rows)])
    # the neighbouring Q4_K parts merged (and, their rows in eights, repacked: test_repack.py)
    assert tuple(ggml.file_type(q) for q in module.qtypes) == (12, 14)
    x = torch.randn(1, 1, 256)
    want = torch.cat([kernels.qlinear(x, p.raw, p.qtype, p.shape[0]) for p in module.parts()], dim=-1)
    assert torch.equal(module(x), want)
    assert torch.equal(module.parts()[0].dequantize(), torch.cat([kernels.dequantize(raw, 12, 256) for raw in raws[:2]]))
