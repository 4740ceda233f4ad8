"""engine.inference.quant.ggml: the GGML type table and a dequantization equal bit for bit
to gguf-py's numpy reference, for every type Wren runs."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as T

from tests.fixtures.ggml_blocks import ALL_TYPES, FP16_FIELDS, random_blocks
from wren.engine.errors import UnsupportedQuantization
from wren.engine.inference.quant import ggml


def reference(raw: np.ndarray, qtype: int, rows: int, cols: int) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(quants.dequantize(raw, qtype))).reshape(rows, cols)


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == torch.float32 and got.shape == want.shape
    got, want = got.cpu(), want.cpu()
    differ = got.view(torch.int32) != want.view(torch.int32)
    assert not differ.any(), (
        f"{int(differ.sum())} of {got.numel()} values differ, first at "
        f"{differ.nonzero()[0].tolist()}: {got[differ][:4].tolist()} != "
        f"{want[differ][:4].tolist()}")
    assert torch.equal(got[~got.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows,blocks", [(1, 1), (7, 1), (1, 8), (7, 8)])
def test_matches_gguf_bit_for_bit(qtype: T, rows: int, blocks: int) -> None:
    cols = blocks * ggml.block_size(qtype)
    raw = random_blocks(qtype, rows, cols, seed=rows * 1000 + blocks * 10 + qtype)
    assert raw.shape == (rows, ggml.row_bytes(qtype, cols))
    got = ggml.dequantize(torch.from_numpy(raw), qtype, cols)
    assert_same_bits(got, reference(raw, qtype, rows, cols))


@pytest.mark.parametrize("qtype", [T.F16, T.BF16], ids=lambda t: t.name)
def test_every_16_bit_pattern_widens_exactly(qtype: T) -> None:
    # All 65536 patterns: zeros of both signs, subnormals, infinities, quiet and
    # signalling NaNs with their payloads; plus a ragged shape whose rows are not a
    # multiple of any vector width.
    patterns = np.arange(65536, dtype=np.uint16).view(np.uint8).reshape(256, 512)
    assert_same_bits(ggml.dequantize(torch.from_numpy(patterns), qtype, 256),
                     reference(patterns, qtype, 256, 256))
    ragged = np.ascontiguousarray(patterns.reshape(-1)[: 13 * 2 * 37].reshape(13, 74))
    assert_same_bits(ggml.dequantize(torch.from_numpy(ragged), qtype, 37),
                     reference(ragged, qtype, 13, 37))


def test_f32_bytes_come_back_unchanged() -> None:
    bits = np.random.default_rng(5).integers(0, 2**32, (9, 33), dtype=np.uint32)
    bits[0, :4] = [0x7F800001, 0xFFC01234, 0x80000000, 0x00000001]  # sNaN, NaN, -0, subnormal
    raw = bits.view(np.uint8)
    got = ggml.dequantize(torch.from_numpy(raw), T.F32, 33)
    assert np.array_equal(got.view(torch.int32).numpy().view(np.uint32), bits)
    assert_same_bits(got, reference(raw, T.F32, 9, 33))
    assert got.data_ptr() != torch.from_numpy(raw).data_ptr()  # a new tensor, not a view


@pytest.mark.parametrize("qtype", list(FP16_FIELDS), ids=lambda t: T(t).name)
def test_special_scales_give_the_same_values_and_nans(qtype: int) -> None:
    # Corrupt blocks: inf, NaN (quiet and signalling), the largest and smallest fp16 and -0
    # as scales. Every finite value matches bit for bit and the NaNs fall in the same
    # places; a NaN's own sign and payload may differ where a type adds an offset (numpy
    # is free to order a commutative add's operands, which picks which NaN survives).
    specials = np.array([0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE03, 0x7BFF, 0x0001, 0x8000],
                        dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    block = ggml.block_size(qtype)
    raw = random_blocks(qtype, 20, block * 4, seed=9)
    blocks = raw.reshape(-1, ggml.type_size(qtype))
    rng = np.random.default_rng(2)
    for at in FP16_FIELDS[qtype]:
        hit = rng.random(len(blocks)) < 0.5
        blocks[hit, at:at + 2] = specials[rng.integers(0, len(specials), int(hit.sum()))]
    with np.errstate(invalid="ignore"):
        want = reference(raw, qtype, 20, block * 4)
    got = ggml.dequantize(torch.from_numpy(raw), qtype, block * 4)
    assert torch.equal(got.isnan(), want.isnan())
    assert want.isnan().any()
    keep = ~want.isnan()
    assert torch.equal(got[keep].view(torch.int32), want[keep].view(torch.int32))


@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K, T.Q5_0, T.Q3_K, T.F16], ids=lambda t: t.name)
def test_chunking_does_not_change_the_result(qtype: T) -> None:
    rows, cols = 4096, ggml.block_size(qtype) * (1 if ggml.block_size(qtype) > 1 else 256)
    raw = random_blocks(qtype, rows, cols, seed=77)
    t = torch.from_numpy(raw)
    whole = ggml.dequantize(t, qtype, cols, chunk_elements=rows * cols)
    assert_same_bits(whole[-256:], reference(raw[-256:], qtype, 256, cols))
    for chunk in (None, 300 * cols + 3):  # default (2048 rows here), 300 rows
        assert_same_bits(ggml.dequantize(t, qtype, cols, chunk_elements=chunk), whole)
    # One row at a time, on the first rows.
    assert_same_bits(ggml.dequantize(t[:40], qtype, cols, chunk_elements=1), whole[:40])


def test_rows_of_any_stride_or_alignment() -> None:
    raw = random_blocks(T.Q5_1, 10, 64, seed=3)
    want = reference(raw, T.Q5_1, 10, 64)
    t = torch.from_numpy(raw)
    assert_same_bits(ggml.dequantize(t[::3], T.Q5_1, 64), want[::3])
    # The same bytes starting at an odd address (a tensor read at an odd file offset).
    buffer = torch.zeros(raw.size + 1, dtype=torch.uint8)
    buffer[1:] = t.reshape(-1)
    odd = buffer[1:].view(10, raw.shape[1])
    assert odd.storage_offset() == 1
    assert_same_bits(ggml.dequantize(odd, T.Q5_1, 64), want)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_zero_rows(qtype: T) -> None:
    cols = 2 * ggml.block_size(qtype)
    raw = torch.empty(0, ggml.row_bytes(qtype, cols), dtype=torch.uint8)
    out = ggml.dequantize(raw, qtype, cols)
    assert out.shape == (0, cols) and out.dtype == torch.float32


def test_type_table() -> None:
    assert frozenset({0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30, 39}) == ggml.SUPPORTED
    # MXFP4 (39) has its own tests (test_mxfp4.py): its scales are not fp16 fields
    assert frozenset(int(t) for t in ALL_TYPES) | {int(T.MXFP4)} == ggml.SUPPORTED
    for qtype in ALL_TYPES:
        assert (ggml.block_size(qtype), ggml.type_size(qtype)) == GGML_QUANT_SIZES[qtype]
        assert ggml.type_name(int(qtype)) == qtype.name
    assert ggml.type_name(16) == "IQ2_XXS"
    assert ggml.type_name(999) == "type 999"
    assert (ggml.block_size(T.Q4_K), ggml.type_size(T.Q4_K)) == (256, 144)
    assert (ggml.block_size(T.Q8_0), ggml.type_size(T.Q8_0)) == (32, 34)
    with pytest.raises(ValueError, match="type 999"):
        ggml.block_size(999)


def test_row_bytes() -> None:
    assert ggml.row_bytes(T.Q4_K, 4096) == 16 * 144
    assert ggml.row_bytes(T.Q8_0, 64) == 68
    assert ggml.row_bytes(T.BF16, 7) == 14
    assert ggml.row_bytes(T.F32, 3) == 12
    assert ggml.row_bytes(T.Q6_K, 0) == 0
    with pytest.raises(ValueError, match=r"Q4_K.*256.*100 columns"):
        ggml.row_bytes(T.Q4_K, 100)
    with pytest.raises(ValueError, match=r"Q4_0.*32.*33 columns"):
        ggml.row_bytes(T.Q4_0, 33)
    with pytest.raises(ValueError, match="-32 columns"):
        ggml.row_bytes(T.Q4_0, -32)


def test_unsupported_type_names_the_tensor_and_the_type() -> None:
    for qtype in ALL_TYPES:
        ggml.check_supported(qtype, "blk.0.attn_q.weight", "model.gguf")
    with pytest.raises(UnsupportedQuantization) as caught:
        ggml.check_supported(T.IQ2_XXS, "blk.0.attn_q.weight", "model.gguf")
    assert str(caught.value) == (
        "model.gguf: tensor blk.0.attn_q.weight is IQ2_XXS, which Wren cannot run (it runs "
        "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, MXFP4)")
    with pytest.raises(UnsupportedQuantization, match="tensor output.weight is type 77"):
        ggml.check_supported(77, "output.weight", "x.gguf")
    with pytest.raises(UnsupportedQuantization, match="IQ4_XS"):
        ggml.dequantize(torch.zeros(1, 136, dtype=torch.uint8), T.IQ4_XS, 256)


def test_bad_input_is_refused_with_the_expected_layout() -> None:
    good = torch.from_numpy(random_blocks(T.Q4_0, 2, 64, seed=1))
    with pytest.raises(ValueError, match=r"uint8 \[rows, 36\].*\[2, 35\]"):
        ggml.dequantize(good[:, :35], T.Q4_0, 64)
    with pytest.raises(ValueError, match="torch.float32"):
        ggml.dequantize(good.float(), T.Q4_0, 64)
    with pytest.raises(ValueError, match=r"\[72\]"):
        ggml.dequantize(good.reshape(-1), T.Q4_0, 64)
    with pytest.raises(ValueError, match="50 columns"):
        ggml.dequantize(good, T.Q4_0, 50)


def test_random_blocks_are_valid_and_repeatable() -> None:
    for qtype in ALL_TYPES:
        cols = 2 * ggml.block_size(qtype)
        a = random_blocks(qtype, 3, cols, seed=4)
        assert a.dtype == np.uint8 and a.shape == (3, ggml.row_bytes(qtype, cols))
        assert np.array_equal(a, random_blocks(qtype, 3, cols, seed=4))
        assert not np.array_equal(a, random_blocks(qtype, 3, cols, seed=5))
        assert np.isfinite(quants.dequantize(a, qtype)).all()
        blocks = a.reshape(-1, ggml.type_size(qtype))
        for at in FP16_FIELDS.get(qtype, ()):
            assert np.isfinite(blocks[:, at:at + 2].copy().view(np.float16)).all()
    with pytest.raises(ValueError, match="multiple of 256"):
        random_blocks(T.Q4_K, 1, 100)


def test_q4_k_speed_sanity() -> None:
    # Measured, not asserted (the CI machine is shared); the values are checked on a slice.
    raw = random_blocks(T.Q4_K, 2048, 2048, seed=11)
    t = torch.from_numpy(raw)
    ggml.dequantize(t[:8], T.Q4_K, 2048)
    start = time.perf_counter()
    out = ggml.dequantize(t, T.Q4_K, 2048)
    seconds = time.perf_counter() - start
    print(f"\ndequantize Q4_K 2048x2048 on {torch.get_num_threads()} thread(s): "
          f"{seconds * 1e3:.1f} ms ({raw.nbytes / seconds / 1e6:.0f} MB/s of blocks)")
    assert_same_bits(out[1000:1016], reference(raw[1000:1016], T.Q4_K, 16, 2048))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_cuda_matches_gguf_bit_for_bit(qtype: T) -> None:
    rows, cols = 300, 8 * ggml.block_size(qtype) * (32 if ggml.block_size(qtype) == 1 else 1)
    raw = random_blocks(qtype, rows, cols, seed=21)
    got = ggml.dequantize(torch.from_numpy(raw).cuda(), qtype, cols)
    assert got.is_cuda
    assert_same_bits(got, reference(raw, qtype, rows, cols))
    few = ggml.dequantize(torch.from_numpy(raw).cuda(), qtype, cols, chunk_elements=cols * 7)
    assert_same_bits(few, got)
