"""Cases for the GPU kernels for GGUF blocks (quant/triton_gguf.py), run on the CPU by Triton's interpreter.

Every supported type on random blocks (random bytes, fp16 scales of a sane size): the
dequantize kernel equal bit for bit to ggml.dequantize (itself bit-exact with
gguf.quants.dequantize, test_ggml_dequant.py); the matrix-vector and GEMM kernels against
x @ ggml.dequantize(W).T. The kernels sum in float32 in another order than torch, so a result
may differ from the float32 reference by a few float32 roundings of the sum of |x| |w| (checked
at 1e-5 of it); with bfloat16 activations, each weight is rounded to bfloat16 in the GEMM (2^-8
of it). Shapes are small (the interpreter runs each program in numpy), with rows that are not a
multiple of a tile, K of several super-blocks and the split-K path (the interpreter's plan
splits K past 8 groups).

Interpreter mode must be on before triton is first imported (triton's own library functions
are defined then, and triton.jit reads it again when the kernels are defined), and a test
process may have imported triton already (torch.compile does), so test_triton_gguf.py runs this
file in a child pytest with TRITON_INTERPRET=1. It is not collected on its own (no test_ prefix).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (the test extra brings it: pip install -e '.[test]')")

from wren.engine.inference.quant import ggml, modules
from wren.engine.inference.quant.modules import QTensor, QuantEmbedding, QuantLinear

T = ggml.GGMLQuantizationType
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
ROWS = 13  # not a multiple of any tile's rows


@pytest.fixture(scope="module")
def tg():
    from wren.engine.inference.quant import triton_gguf

    assert triton_gguf.INTERPRET and triton_gguf.available(), (
        "run these cases with TRITON_INTERPRET=1 set before triton is imported (test_triton_gguf.py does)")
    return triton_gguf


def _cols(name: str) -> int:
    """K: three super-blocks, or ten 32-value blocks (past the interpreter's split-K threshold)."""
    return 768 if ggml.block_size(int(T[name])) == 256 else 320


def random_blocks(name: str, rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """Random bytes, with each fp16 scale (and minimum) set to +-[0.001, 0.021): no inf/NaN."""
    qtype = int(T[name])
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (rows, ggml.row_bytes(qtype, cols)), generator=gen, dtype=torch.uint8)
    blocks = raw.view(-1, ggml.type_size(qtype))
    fields = {"Q6_K": [208], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2]}.get(name, [0])
    for at in fields:
        sign = torch.randint(0, 2, (blocks.shape[0],), generator=gen) * 2 - 1
        scale = (torch.rand(blocks.shape[0], generator=gen) * 0.02 + 1e-3) * sign
        blocks[:, at:at + 2] = scale.to(torch.float16).view(torch.uint8).view(-1, 2)
    return raw


def _bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.abs().double() @ w.abs().double().T


@pytest.mark.parametrize("name", TYPES)
def test_dequantize_is_bit_exact(tg, name):
    cols = _cols(name)
    raw = random_blocks(name, ROWS, cols)
    ref = ggml.dequantize(raw, int(T[name]), cols)
    out = tg.dequantize(raw, int(T[name]), cols)
    assert out.dtype == torch.float32 and out.shape == ref.shape
    assert torch.equal(out.view(torch.int32), ref.view(torch.int32)), (out - ref).abs().max()
    half = tg.dequantize(raw, int(T[name]), cols, torch.bfloat16)
    assert torch.equal(half.view(torch.int16), ref.to(torch.bfloat16).view(torch.int16))


@pytest.mark.parametrize("m", [1, 3, 8, 33])
@pytest.mark.parametrize("name", TYPES)
def test_products_match_the_reference(tg, name, m):
    """m <= 8: the matrix-vector kernel (split-K at these K); more: the GEMM."""
    cols = _cols(name)
    raw = random_blocks(name, ROWS, cols, seed=m)
    w = ggml.dequantize(raw, int(T[name]), cols)
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m))
    bias = torch.randn(ROWS, generator=torch.Generator().manual_seed(m + 100))
    y = tg.linear(x, QTensor(raw, int(T[name]), (ROWS, cols)), bias)
    ref = x.double() @ w.double().T + bias.double()
    assert y.dtype == torch.float32 and y.shape == (m, ROWS)
    assert ((y.double() - ref).abs() <= 1e-5 * _bound(x, w) + 1e-6).all(), (y.double() - ref).abs().max()


@pytest.mark.parametrize("m", [1, 2, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_both_q4_k_matvec_kernels(tg, monkeypatch, m, dtype):
    """Q4_K's two float matrix-vector kernels (MATVEC_KERNEL "float", the first GPU run's, and
    "words"), on the same blocks: each within float32's rounding of the reference, so either
    may be the default."""
    cols = _cols("Q4_K")
    raw = random_blocks("Q4_K", ROWS, cols, seed=40 + m)
    w = ggml.dequantize(raw, int(T.Q4_K), cols)
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m)).to(dtype)
    ref = x.double() @ w.double().T
    tol = 1e-5 if dtype == torch.float32 else 2**-8
    for kernel in ("float", "words"):
        monkeypatch.setattr(tg, "MATVEC_KERNEL", kernel)
        y = tg.linear_parts(x, [raw], [int(T.Q4_K)], [ROWS]).double()
        assert ((y - ref).abs() <= tol * (_bound(x, w) + ref.abs()) + 1e-6).all(), (kernel, (y - ref).abs().max())


def _q8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What quantize_q8 should give, in torch: (int values [M, K], d [M, K // 32])."""
    blocks = x.float().view(x.shape[0], -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    full = torch.full_like(amax, 127.0)  # tensor / tensor: IEEE division (127.0 / t multiplies by 1 / t)
    inv = torch.where(amax > 0, full / torch.where(amax > 0, amax, 1.0), torch.zeros_like(amax))
    scaled = blocks * inv
    q = torch.where(scaled >= 0, torch.floor(scaled + 0.5), -torch.floor(0.5 - scaled)).clamp(-127, 127)
    return q.view(x.shape).to(torch.int32), (amax / full).view(x.shape[0], -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_quantized_to_8_bits(tg, dtype):
    """quantize_q8: each 32-value block over its max |x| / 127, rounded half away from zero;
    a zero block stays zero; d and d * sum per block."""
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(2)).to(dtype)
    x[1, 32:64] = 0.0
    x[2, :32] = torch.arange(32) - 15.5  # halves: rounded away from zero
    xq, xd = tg.quantize_q8(x)
    q, d = _q8_rows(x)
    assert xq.dtype == torch.int8 and torch.equal(xq.to(torch.int32), q)
    assert torch.equal(xd[:, 0::2], d.float())
    assert torch.allclose(xd[:, 1::2], d.float() * q.view(3, -1, 32).sum(-1).float(), rtol=1e-6, atol=0)
    assert (xq[1, 32:64] == 0).all() and xd[1, 2] == 0 and xd[1, 3] == 0


@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["Q4_K", "Q6_K"])
def test_against_8_bit_rows(tg, monkeypatch, name, m, dtype):
    """MATVEC_KERNEL="q8" (Q4_K and Q6_K): the product of the weights and x as rounded to 8
    bits, to float32's rounding (so the integer sums, zero points and scales are right), and
    within x's rounding of the float product (every block off by at most half of its d)."""
    monkeypatch.setattr(tg, "MATVEC_KERNEL", "q8")
    cols = _cols(name)
    raw = random_blocks(name, ROWS, cols, seed=60 + m)
    w = ggml.dequantize(raw, int(T[name]), cols).double()
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m)).to(dtype)
    bias = torch.randn(ROWS, generator=torch.Generator().manual_seed(9))
    y = tg.linear(x, QTensor(raw, int(T[name]), (ROWS, cols)), bias.to(dtype)).double()
    q, d = _q8_rows(x)
    rounded = (q.view(m, -1, 32).double() * d.double()[..., None]).view(m, cols)
    exact = rounded @ w.T + bias.to(dtype).double()
    bound = rounded.abs() @ w.abs().T
    tol = 1e-5 if dtype == torch.float32 else 2**-8
    assert ((y - exact).abs() <= tol * (bound + exact.abs()) + 1e-6).all(), (y - exact).abs().max()
    half_d = (d.double() / 2).repeat_interleave(32, dim=1)
    ref = x.double() @ w.T + bias.to(dtype).double()
    assert ((y - ref).abs() <= half_d @ w.abs().T + tol * (bound + ref.abs()) + 1e-6).all()


@pytest.mark.parametrize("m", [1, 33])
@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q8_0"])
def test_bfloat16_activations(tg, name, m):
    """bfloat16 in and out: the products of x as given (GEMM: W rounded to bfloat16 in its tile),
    summed in float32, the sum rounded once to bfloat16."""
    cols = _cols(name)
    raw = random_blocks(name, ROWS, cols, seed=7)
    w = ggml.dequantize(raw, int(T[name]), cols)
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    y = tg.linear_parts(x, [raw], [int(T[name])], [ROWS])
    ref = x.double() @ w.double().T
    assert y.dtype == torch.bfloat16
    assert ((y.double() - ref).abs() <= 2**-8 * (_bound(x, w) + ref.abs()) + 1e-6).all()


def _fused(tg_module, monkeypatch) -> tuple[QuantLinear, torch.Tensor, torch.Tensor]:
    """A Q4_K_M-style fused QKV: Q and K in Q4_K, V in Q6_K, with a bias; and its float weight."""
    monkeypatch.setattr(modules, "TRITON_ON_CPU", True)
    monkeypatch.setattr(modules, "_triton", tg_module)
    parts = [QTensor(random_blocks(n, r, 512, seed=i), int(T[n]), (r, 512))
             for i, (n, r) in enumerate([("Q4_K", 16), ("Q4_K", 8), ("Q6_K", 8)])]
    bias = torch.randn(32, generator=torch.Generator().manual_seed(5))
    weight = torch.cat([p.dequantize() for p in parts])
    return QuantLinear(parts, bias), weight, bias


@pytest.mark.parametrize("shape", [(1, 1, 512), (2, 3, 512), (40, 512)])
def test_quant_linear_takes_the_kernels(tg, monkeypatch, shape):
    """QuantLinear's own path: its fused parts (two types), one output, the bias, x's shape."""
    layer, weight, bias = _fused(tg, monkeypatch)
    calls = []
    real = tg.linear_parts
    monkeypatch.setattr(tg, "linear_parts", lambda *a, **k: calls.append(tuple(a[2])) or real(*a, **k))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    y = layer(x)
    assert calls == [(int(T.Q4_K), int(T.Q6_K))], "QuantLinear did not take the Triton kernels"
    assert layer.qtypes == (int(T.Q4_K), int(T.Q6_K))  # the file's layout, not the CPU kernels' interleaved one
    ref = x.double() @ weight.double().T + bias.double()
    assert y.shape == (*shape[:-1], 32)
    assert ((y.double() - ref).abs() <= 1e-5 * _bound(x.reshape(-1, 512), weight).view(ref.shape) + 1e-6).all()


def test_a_moved_layer_reads_the_file_layout(tg, monkeypatch):
    """Built for the CPU kernels (Q4_K interleaved eight rows at a time), then moved where the
    GPU kernels run: the rows are put back in the file's layout, the products unchanged."""
    from wren.engine.inference.quant import kernels

    raw = random_blocks("Q4_K", 16, 512)
    layer = QuantLinear([QTensor(raw, int(T.Q4_K), (16, 512))])
    if not kernels.available() or layer.qtypes == (int(T.Q4_K),):
        pytest.skip("the CPU kernels are not built here (no interleaved layout to move from)")
    monkeypatch.setattr(modules, "TRITON_ON_CPU", True)
    monkeypatch.setattr(modules, "_triton", tg)
    layer.to("cpu")  # what .cuda() does, with the CPU standing in for the GPU
    assert layer.qtypes == (int(T.Q4_K),) and torch.equal(layer.raw0, raw)
    x = torch.randn(2, 512)
    ref = x.double() @ ggml.dequantize(raw, int(T.Q4_K), 512).double().T
    assert ((layer(x).double() - ref).abs() < 1e-3).all()


def test_embedding_rows_are_exact(tg, monkeypatch):
    monkeypatch.setattr(modules, "TRITON_ON_CPU", True)
    monkeypatch.setattr(modules, "_triton", tg)
    raw = random_blocks("Q6_K", 20, 256)
    table = QuantEmbedding(QTensor(raw, int(T.Q6_K), (20, 256)))
    ids = torch.tensor([[3, 19, 0], [7, 7, 2]])
    got = table(ids)
    assert torch.equal(got, ggml.dequantize(raw, int(T.Q6_K), 256)[ids])


def test_bad_weights_get_clear_errors(tg):
    raw = random_blocks("Q4_K", 4, 256)
    with pytest.raises(ValueError, match="do not take Q2_K"):
        tg.dequantize(torch.zeros(4, 84, dtype=torch.uint8), int(T.Q2_K), 256)
    with pytest.raises(ValueError, match=r"uint8 \[rows, 288\]"):
        tg.dequantize(raw, int(T.Q4_K), 512)
    with pytest.raises(ValueError, match="a part of 5 rows holds 4"):
        tg.linear_parts(torch.zeros(1, 256), [raw], [int(T.Q4_K)], [5])
    assert not tg.supports(int(T.Q2_K)) and tg.supports(int(T.Q6_K))


def test_quant_linear_compiles_whole(tg, monkeypatch):
    """Under torch.compile (fullgraph, as the decode step compiles), QuantLinear's kernels are one
    opaque op: no graph break, the same result as eager."""
    layer, weight, bias = _fused(tg, monkeypatch)
    x = torch.randn(2, 512, generator=torch.Generator().manual_seed(2))
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), layer(x))


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K"])
def test_many_rows_take_the_dense_path(tg, monkeypatch, name):
    """From DENSE_MIN_ROWS rows of 16-bit x: W widened a slice at a time (three slices here), then
    torch's matmul; the bias added; each weight rounded to x's dtype, as in the GEMM kernel."""
    monkeypatch.setattr(tg, "DENSE_MIN_ROWS", 16)
    monkeypatch.setattr(tg, "DENSE_CHUNK", 5 * _cols(name))
    cols = _cols(name)
    raw = random_blocks(name, ROWS, cols, seed=11)
    w = ggml.dequantize(raw, int(T[name]), cols)
    x = torch.randn(20, cols, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    bias = torch.randn(ROWS, generator=torch.Generator().manual_seed(6))
    for b in (bias, None):
        y = tg.linear_parts(x, [raw], [int(T[name])], [ROWS], b)
        ref = x.double() @ w.double().T + (0 if b is None else b.double())
        assert y.dtype == torch.bfloat16
        assert ((y.double() - ref).abs() <= 2**-7 * (_bound(x, w) + ref.abs()) + 1e-6).all()
