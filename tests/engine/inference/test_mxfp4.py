"""MXFP4 (GGML type 39): exact dequantization against gguf's numpy reference, the refusal of
out-of-range scales, and Wren's kernels for it (decoding dots, the prompt path, exact float
activations) against float64 products of the exact weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

from wren.engine.errors import ModelFileError
from wren.engine.inference.quant import ggml, kernels

MXFP4 = int(T.MXFP4)
needs_kernels = pytest.mark.skipif(not kernels.available(), reason=f"kernels not built: {kernels.NOTICE}")


def random_mxfp4(rows: int, blocks: int, seed: int, scales: tuple[int, int] = (100, 140)) -> np.ndarray:
    """uint8 [rows, blocks * 17]: random codes, scale bytes drawn from `scales` (a range)."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, blocks, 17), dtype=np.uint8)
    raw[:, :, 0] = rng.integers(*scales, (rows, blocks))
    return raw.reshape(rows, blocks * 17)


def every_scale_and_code(top: int) -> np.ndarray:
    """One row per scale byte 0..top, each with all 256 code pairs (every e2m1 value in both
    nibbles)."""
    raw = np.zeros((top + 1, 16, 17), np.uint8)
    raw[:, :, 0] = np.arange(top + 1)[:, None]
    raw[:, :, 1:] = np.arange(256, dtype=np.uint8).reshape(16, 16)
    return raw.reshape(top + 1, 16 * 17)


def reference(raw: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return quants.dequantize(raw, T.MXFP4).reshape(raw.shape[0], -1)


def assert_same_bits(got: torch.Tensor, want: np.ndarray) -> None:
    got_bits, want_bits = got.numpy().view(np.int32), want.view(np.int32)
    differ = got_bits != want_bits
    assert not differ.any(), f"{int(differ.sum())} values differ, first at {np.argwhere(differ)[0].tolist()}"


def test_type_table() -> None:
    assert ggml.block_size(MXFP4) == 32 and ggml.type_size(MXFP4) == 17
    assert MXFP4 in ggml.SUPPORTED and ggml.type_name(MXFP4) == "MXFP4"
    assert ggml.row_bytes(MXFP4, 2880) == 90 * 17


@pytest.mark.parametrize("rows,blocks", [(1, 1), (7, 3), (33, 90)])
def test_torch_dequantize_matches_gguf_bit_for_bit(rows: int, blocks: int) -> None:
    raw = random_mxfp4(rows, blocks, seed=rows * 100 + blocks, scales=(0, ggml.MXFP4_MAX_SCALE + 1))
    assert_same_bits(ggml.dequantize(torch.from_numpy(raw), MXFP4, blocks * 32), reference(raw))


def test_every_accepted_scale_and_code_matches_gguf() -> None:
    # scale bytes 0 and 1 give subnormal scales (gguf's 0x00200000 << e), 0xFC the largest
    raw = every_scale_and_code(ggml.MXFP4_MAX_SCALE)
    want = reference(raw)
    assert np.isfinite(want).all()
    assert_same_bits(ggml.dequantize(torch.from_numpy(raw), MXFP4, 512), want)
    # chunking does not change anything
    assert_same_bits(ggml.dequantize(torch.from_numpy(raw), MXFP4, 512, chunk_elements=1000), want)


def test_gguf_quantized_values_come_back() -> None:
    values = np.random.default_rng(3).standard_normal((6, 256)).astype(np.float32) * 0.02
    raw = quants.quantize(values, T.MXFP4)
    got = ggml.dequantize(torch.from_numpy(raw), MXFP4, 256)
    assert_same_bits(got, reference(raw))
    assert float((got - torch.from_numpy(values)).abs().max()) < 0.02  # e2m1: a coarse but honest copy


@pytest.mark.parametrize("scale", [0xFD, 0xFE, 0xFF])
def test_a_scale_out_of_range_is_refused_naming_the_block(scale: int) -> None:
    raw = random_mxfp4(4, 5, seed=scale)
    # gguf's own values for such a block are inf (or NaN downstream): the reason for the refusal
    raw[2, 3 * 17] = scale
    raw[2, 3 * 17 + 1:3 * 17 + 17] = 0x77  # codes 7: the value 6 (doubled: 12)
    assert np.isinf(reference(raw)[2, 96:128]).any()
    with pytest.raises(ModelFileError) as err:
        ggml.dequantize(torch.from_numpy(raw), MXFP4, 160)
    message = str(err.value)
    assert f"block 3 of row 2 has scale byte 0x{scale:02X}" in message
    assert "0xFC" in message
    assert ("NaN in OCP MX" in message) == (scale == 0xFF)
    assert ggml.mxfp4_bad_scale(torch.from_numpy(raw)) == (2, 3, scale)
    raw[2, 3 * 17] = ggml.MXFP4_MAX_SCALE
    assert ggml.mxfp4_bad_scale(torch.from_numpy(raw)) is None


# ---- the kernels ----


@needs_kernels
def test_kernel_dequantize_matches_gguf_for_every_scale_byte() -> None:
    # The C++ dequantization follows gguf even past the accepted range (inf where it overflows);
    # loading refuses such blocks before any kernel sees them.
    raw = every_scale_and_code(255)
    assert_same_bits(kernels.dequantize(torch.from_numpy(raw), MXFP4, 512), reference(raw))


def per_isa(fn):
    results = {}
    try:
        for cap in kernels.ISAS:
            if kernels.use_isa(cap) == cap:
                results[cap] = fn()
    finally:
        kernels.use_isa("")
    return results


def rounded(x: torch.Tensor) -> np.ndarray:
    """x as the 8-bit kernels see it: per 32 values, scale amax / 127, rounded half to even."""
    xb = x.reshape(x.shape[0], -1, 32)
    amax = xb.abs().amax(-1, keepdim=True)
    d = amax / 127
    q = torch.round(xb * torch.where(d == 0, torch.zeros_like(amax), 127 / amax))
    return (q.double() * d.double()).reshape(x.shape).numpy()


@needs_kernels
@pytest.mark.parametrize("n", [1, 3, 8, 40])
def test_qlinear_matches_float64_of_the_exact_weights(n: int) -> None:
    rows, blocks = 37, 12
    raw = random_mxfp4(rows, blocks, seed=n)
    w = reference(raw).astype(np.float64)
    x = torch.randn(n, blocks * 32, generator=torch.Generator().manual_seed(n))
    # a few rows: 8-bit activations (compare with their exact product); many rows: the prompt
    # path, whose integer GEMM (where on) rounds the same way, or float tiles that do not
    decoding = n <= kernels.max_gemv_rows()
    want_q8, want_exact = rounded(x) @ w.T, x.double().numpy() @ w.T
    bound = np.abs(x.double().numpy()) @ np.abs(w.T) * 1e-5 + 1e-30

    def run() -> tuple[np.ndarray, np.ndarray]:
        raw_t = torch.from_numpy(raw)
        return kernels.qlinear(x, raw_t, MXFP4, rows).numpy(), kernels.qlinear_exact(x, raw_t, MXFP4, rows).numpy()

    results = per_isa(run)
    assert "scalar" in results
    for isa, (got, exact) in results.items():
        assert np.all(np.abs(exact - want_exact) <= bound), isa
        if decoding:
            assert np.all(np.abs(got - want_q8) <= bound), isa
        else:
            near = np.minimum(np.abs(got - want_q8), np.abs(got - want_exact))
            assert np.all(near <= bound), isa


@needs_kernels
def test_a_row_gives_the_same_result_alone_or_with_others() -> None:
    # batched decoding must not change one sequence's numbers
    rows, blocks = 16, 90
    raw = torch.from_numpy(random_mxfp4(rows, blocks, seed=9))
    x = torch.randn(6, blocks * 32, generator=torch.Generator().manual_seed(2))

    def run() -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(op(x, raw, MXFP4, rows), torch.cat([op(x[j:j + 1], raw, MXFP4, rows) for j in range(6)]))
                for op in (kernels.qlinear, kernels.qlinear_exact)]

    for isa, pairs in per_isa(run).items():
        for together, alone in pairs:
            assert torch.equal(together, alone), isa


@needs_kernels
@pytest.mark.parametrize("blocks", [1, 2, 3, 91, 1027])
def test_decoding_rows_one_after_another_give_the_rows_kernels_bits(blocks: int) -> None:
    # one x row (decoding) takes a kernel that runs weight rows one after another; two x rows
    # take the per-row kernel: each weight row's result is the same bits either way, for block
    # counts past the 4-block steps' remainders and past the kernel's precomputed offsets
    rows = 9
    raw = torch.from_numpy(random_mxfp4(rows, blocks, seed=blocks))
    x = torch.randn(2, blocks * 32, generator=torch.Generator().manual_seed(blocks))

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return kernels.qlinear(x, raw, MXFP4, rows), torch.cat([kernels.qlinear(x[j:j + 1], raw, MXFP4, rows)
                                                                for j in range(2)])

    for isa, (together, alone) in per_isa(run).items():
        assert torch.equal(together, alone), isa
