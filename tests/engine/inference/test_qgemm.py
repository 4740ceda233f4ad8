"""The integer prompt path (csrc/qgemm.cpp): a prompt chunk's rows of x quantized once to the
decoding kernels' 8-bit blocks, then multiplied in integers by every instruction set's tiled
kernels, cache-blocked over weight rows and tokens and split across threads.

Checked three ways: on inputs whose every product and sum is an exact float32 integer, each
table's result equals the float64 product bit for bit (the integer sums are exact; only the
float scaling could differ, and here it cannot); on random inputs, each row equals what the
decoding kernels give for it (the same products; test_qkernels.py holds both to the 8-bit
rounding bound); and QuantLinear keeps a prompt's last rows on float32 activations.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from tests.engine.inference.test_qkernels import QUANT_TYPES, SCALE_FIELDS, per_isa, reference_weights
from wren.engine.inference.quant import kernels, modules
from wren.engine.inference.quant.modules import QTensor, QuantLinear, exact_activations, prompt_activations

pytestmark = pytest.mark.skipif(not kernels.available() or not kernels.integer_prompt(),
                                reason="the integer prompt path is not built or is turned off")

ONE = np.float16(1.0).view(np.uint16)


def _name(qtype: int) -> str:
    return GGMLQuantizationType(qtype).name


def integer_raw(qtype: int, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random quant bits with every fp16 scale (d, and dmin/m) 1.0: integer weights."""
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        raw[:, :, off:off + 2] = np.array([ONE], dtype=np.uint16).view(np.uint8)
    return raw.reshape(rows, -1)


def integer_x(n: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Values in -1..1 with one +-127 per 32 (so per 256 too): every block's scale is exactly
    1 and its 8-bit values are x itself; sums stay far below 2^24."""
    x = rng.integers(-1, 2, (n, cols)).astype(np.float32)
    x[:, ::32] = np.where(rng.random((n, cols // 32)) < 0.5, -127, 127)
    return x


def _layouts(qtype: int, raw: torch.Tensor, cols: int) -> list[tuple[torch.Tensor, int]]:
    """The weight as the file holds it and, where the kernels have one, interleaved."""
    packed, layout = kernels.interleaved(raw, qtype, cols)
    return [(raw, qtype)] + ([(packed, layout)] if layout != qtype else [])


@pytest.mark.parametrize("qtype", QUANT_TYPES, ids=_name)
def test_integer_sums_are_exact_on_every_instruction_set(qtype):
    # 2048 columns and 130 rows of x: more than one pass over the tokens; 200 weight rows:
    # more than one task per thread
    rows, cols, n = 200, 2048, 130
    rng = np.random.default_rng(qtype)
    raw = integer_raw(qtype, rows, cols, rng)
    x = torch.from_numpy(integer_x(n, cols, rng))
    want = x.double() @ torch.from_numpy(reference_weights(raw, qtype)).double().T
    assert want.abs().max() < 2**24 and want.abs().max() > 1000  # exact in float32, not trivial
    for weight, layout in _layouts(qtype, torch.from_numpy(raw), cols):
        got = per_isa(lambda w=weight, t=layout: kernels.qlinear(x, w, t, rows))
        for cap, y in got.items():
            assert torch.equal(y.double(), want), (cap, layout, float((y.double() - want).abs().max()))


@pytest.mark.parametrize("qtype", QUANT_TYPES, ids=_name)
def test_each_prompt_row_is_what_the_decoding_kernels_give(qtype, isa):
    rows, cols = 48, 512
    rng = np.random.default_rng(100 + qtype)
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        raw[:, :, off:off + 2] = rng.uniform(-1e-2, 1e-2, raw.shape[:2]).astype(np.float16).view(np.uint8).reshape(
            *raw.shape[:2], 2)
    raw = torch.from_numpy(raw.reshape(rows, -1))
    x = torch.randn(kernels.max_gemv_rows() + 38, cols, generator=torch.Generator().manual_seed(qtype))
    for weight, layout in _layouts(qtype, raw, cols):
        if not kernels.integer_prompt(layout):  # one dot per row and token: the float GEMM is faster
            assert qtype in (10, 11) and isa != "scalar", (qtype, isa)  # Q2_K, Q3_K on x86
            continue
        prompt = kernels.qlinear(x, weight, layout, rows)
        # slices of 8 rows take the decoding path's several-rows kernels (one row alone
        # takes another kernel, with its own summation order)
        decoding = torch.cat([kernels.qlinear(part, weight, layout, rows) for part in x.split(8)])
        assert torch.equal(prompt, decoding), (layout, float((prompt - decoding).abs().max()))


def _q4_k_at_its_largest(rows: int, cols: int) -> np.ndarray:
    """Q4_K with every nibble 15, every sub-block scale 1 and minimum 0, d = 1: each 32-weight
    sub-block's integer sum against activations of +-127 is 32 * 15 * 127 = 60960, beyond int16."""
    raw = np.zeros((rows, cols // 256, 144), dtype=np.uint8)
    raw[:, :, 0:2] = np.array([ONE], dtype=np.uint16).view(np.uint8)  # d; dmin stays 0
    raw[:, :, 4:8] = 1  # the scales of sub-blocks 0-3 (low 6 bits); minimums 0
    raw[:, :, 12:16] = 1  # the low 4 bits of sub-blocks 4-7's scales
    raw[:, :, 16:] = 0xFF
    return raw.reshape(rows, -1)


def test_largest_sub_block_sums_stay_exact_on_every_instruction_set():
    """The VNNI tables sum each Q4_K sub-block in int32 before its scale (AVX2 in int16 halves):
    sums past the int16 range, of either sign, come out exact, row by row and token by token."""
    rows, cols = 64, 2048
    raw = _q4_k_at_its_largest(rows, cols)
    n = kernels.max_gemv_rows() + 6
    sign = torch.where(torch.arange(n) % 2 == 0, 1.0, -1.0)[:, None]
    x = (127 * sign).expand(n, cols).contiguous()
    x[:, ::7] *= -1  # not every activation alike within a sub-block
    want = x.double() @ torch.from_numpy(reference_weights(raw, 12)).double().T
    assert want.abs().max() < 2**24 and want.abs().min() > 32 * 15 * 127  # exact in float32, past int16
    for weight, layout in _layouts(12, torch.from_numpy(raw), cols):
        got = per_isa(lambda w=weight, t=layout: kernels.qlinear(x, w, t, rows))
        for cap, y in got.items():
            assert torch.equal(y.double(), want), (cap, layout, float((y.double() - want).abs().max()))


def test_fused_parts_of_mixed_types_share_one_pass():
    """A Q4_K_M-style fused projection (Q4_K interleaved beside Q6_K) on the prompt path equals
    each part alone."""
    rng = np.random.default_rng(5)
    q4k = torch.from_numpy(integer_raw(12, 64, 512, rng))
    q4k, q4k_layout = kernels.interleaved(q4k, 12, 512)
    q6k = torch.from_numpy(integer_raw(14, 24, 512, rng))
    x = torch.randn(90, 512)
    got = kernels.qlinear_parts(x, [q4k, q6k], (q4k_layout, 14), (64, 24), False)
    want = torch.cat([kernels.qlinear(x, q4k, q4k_layout, 64), kernels.qlinear(x, q6k, 14, 24)], -1)
    assert torch.equal(got, want)


def _linear(rng: np.random.Generator) -> tuple[QuantLinear, list[torch.Tensor]]:
    raw = integer_raw(2, 64, 256, rng).reshape(64, 8, 18)  # Q4_0, scales 0.01
    raw[:, :, 0:2] = np.array([np.float16(0.01).view(np.uint16)], dtype=np.uint16).view(np.uint8)
    layer = QuantLinear([QTensor(torch.from_numpy(raw.reshape(64, -1)), 2, (64, 256))])
    return layer, [getattr(layer, f"raw{i}") for i in range(len(layer.qtypes))]


def test_a_narrow_layer_keeps_float32_activations_in_a_long_prompt():
    """Below PROMPT_INTEGER_MIN_WIDTH (the starter's 576 and 1536) every prompt row is float32."""
    layer, raws = _linear(np.random.default_rng(5))
    assert layer.in_features < modules.PROMPT_INTEGER_MIN_WIDTH
    x = torch.randn(modules.PROMPT_INTEGER_ROWS + 40, 256)
    with prompt_activations():
        assert torch.equal(layer(x), kernels.qlinear_parts(x, raws, layer.qtypes, layer.part_rows, True))


def test_a_prompts_last_rows_keep_float32_activations(monkeypatch):
    monkeypatch.setattr(modules, "PROMPT_INTEGER_MIN_WIDTH", 0)  # the small test layer as if it were wide
    layer, raws = _linear(np.random.default_rng(6))
    tail = modules.PROMPT_EXACT_TAIL
    assert tail > 0
    x = torch.randn(modules.PROMPT_INTEGER_ROWS + 16, 256)
    with prompt_activations():
        y = layer(x)
    with exact_activations(), prompt_activations():  # every row float32, inside a prompt too
        assert torch.equal(layer(x), kernels.qlinear_parts(x, raws, layer.qtypes, layer.part_rows, True))
    integer = kernels.qlinear_parts(x, raws, layer.qtypes, layer.part_rows, False)
    exact = kernels.qlinear_parts(x[-tail:], raws, layer.qtypes, layer.part_rows, True)
    assert torch.equal(y[-tail:], exact)
    assert torch.equal(y[:-tail], integer[:-tail])
    assert not torch.equal(y[-tail:], integer[-tail:])  # the two paths do differ here
    short = x[:modules.PROMPT_INTEGER_ROWS]  # a short prompt: every row float32
    with prompt_activations():
        assert torch.equal(layer(short), kernels.qlinear_parts(short, raws, layer.qtypes, layer.part_rows, True))


def test_a_chunk_whose_tail_picks_no_token_takes_the_integer_path_for_every_row(monkeypatch):
    """prompt_activations(exact_tail=False), a long prompt's earlier chunk: no row keeps float32
    activations, a call of up to PROMPT_INTEGER_ROWS rows still does, and the default comes back."""
    monkeypatch.setattr(modules, "PROMPT_INTEGER_MIN_WIDTH", 0)  # the small test layer as if it were wide
    layer, raws = _linear(np.random.default_rng(8))
    x = torch.randn(modules.PROMPT_INTEGER_ROWS + 1, 256)  # above the integer rows, below rows + tail
    integer = kernels.qlinear_parts(x, raws, layer.qtypes, layer.part_rows, False)
    exact = kernels.qlinear_parts(x, raws, layer.qtypes, layer.part_rows, True)
    with prompt_activations(exact_tail=False):
        assert torch.equal(layer(x), integer)
        short = x[:modules.PROMPT_INTEGER_ROWS]
        assert torch.equal(layer(short), exact[:modules.PROMPT_INTEGER_ROWS])
        with prompt_activations():  # a final chunk inside: its tail exact again
            inner = layer(x)
        assert torch.equal(layer(x), integer)
    tail = modules.PROMPT_EXACT_TAIL
    with prompt_activations():
        final = layer(x)
    exact_tail = kernels.qlinear_parts(x[-tail:], raws, layer.qtypes, layer.part_rows, True)
    for y in (inner, final):
        assert torch.equal(y[:-tail], integer[:-tail]) and torch.equal(y[-tail:], exact_tail)
    assert not torch.equal(integer[-tail:], exact_tail)  # the two paths do differ there


def test_turning_the_integer_prompt_path_off_gives_the_float_path_back():
    layer, raws = _linear(np.random.default_rng(7))
    x = torch.randn(modules.PROMPT_INTEGER_ROWS + 16, 256)
    kernels.set_integer_prompt(False)
    try:
        assert not kernels.integer_prompt()
        with prompt_activations():
            y = layer(x)
        float_gemm = kernels.qlinear(x, raws[0], layer.qtypes[0], 64)  # the float GEMM, x not rounded
    finally:
        kernels.set_integer_prompt(True)
    assert torch.equal(y, kernels.qlinear_parts(x, raws, layer.qtypes, layer.part_rows, True))
    w = kernels.dequantize(raws[0], layer.qtypes[0], 256).double()
    assert torch.allclose(float_gemm.double(), x.double() @ w.T, rtol=1e-5, atol=1e-5)
    assert not torch.equal(float_gemm, kernels.qlinear(x, raws[0], layer.qtypes[0], 64))
