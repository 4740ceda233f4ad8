"""wren::rms_norm, the one-call RMS norm eager float32 CPU models use (torch's eager
rms_norm dispatches several small ops). It must agree with torch's to float32 rounding,
check its input, and stay out of compiled graphs (inductor fuses torch's own)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from wren.engine.inference.models import attention
from wren.engine.inference.quant import kernels

pytestmark = pytest.mark.skipif(not kernels.has_rms_norm(), reason="the kernels (with rms_norm) are not built")


@pytest.mark.parametrize("shape", [(1, 1, 2048), (3, 7, 576), (64, 4096), (5,)])
def test_agrees_with_torch(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape) * 3
    w = torch.randn(shape[-1])
    got = kernels.rms_norm(x, w, 1e-6)
    want = F.rms_norm(x.double(), (shape[-1],), w.double(), 1e-6)
    assert got.shape == x.shape and got.dtype == torch.float32
    # float32 rounding of (x * inv) * w: within a few units in the last place
    assert ((got.double() - want).abs() <= 4e-7 * want.abs() + 1e-30).all()
    assert torch.allclose(got, F.rms_norm(x, (shape[-1],), w, 1e-6), rtol=1e-6, atol=1e-7)


def test_a_zero_row_and_a_strided_input():
    x = torch.zeros(2, 8)
    assert torch.equal(kernels.rms_norm(x, torch.ones(8), 1e-5), torch.zeros(2, 8))
    y = torch.randn(8, 6).t()  # not contiguous
    assert torch.allclose(kernels.rms_norm(y, torch.ones(8), 1e-5), F.rms_norm(y, (8,), torch.ones(8), 1e-5),
                          rtol=1e-6, atol=1e-7)


def test_bad_input_says_what_is_wrong():
    with pytest.raises(RuntimeError, match="x must be float32"):
        kernels.rms_norm(torch.zeros(2, 4, dtype=torch.float64), torch.ones(4), 1e-5)
    with pytest.raises(RuntimeError, match=r"weight must be float32 \[4\]"):
        kernels.rms_norm(torch.zeros(2, 4), torch.ones(5), 1e-5)


@pytest.mark.parametrize("in_graphs", [True, False])
def test_models_use_it_eagerly_and_in_compiled_graphs_with_attend_one(monkeypatch, in_graphs):
    """kernels.ATTEND_ONE (WREN_KERNEL_ATTEND=on): compiled decode steps call the kernel too, so verify
    rows get their bits; off, a compiled graph traces torch's own op."""
    monkeypatch.setattr(kernels, "ATTEND_ONE", in_graphs)
    calls = []
    real = kernels.rms_norm
    monkeypatch.setattr(kernels, "rms_norm", lambda *a: calls.append(1) or real(*a))
    x, w = torch.randn(2, 16), torch.randn(16)
    eager = attention.rms_norm(x, w, 1e-6)
    assert calls == [1]
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: attention.rms_norm(a, b, 1e-6), backend="eager", fullgraph=True)(x, w)
    assert calls == ([1, 1] if in_graphs else [1])
    assert torch.allclose(eager, compiled, rtol=1e-6, atol=1e-7)
    assert attention.rms_norm(x.bfloat16(), w.bfloat16(), 1e-6).dtype == torch.bfloat16  # other dtypes: torch's
    assert len(calls) == (2 if in_graphs else 1)
