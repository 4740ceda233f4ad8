"""wren::attend_one, a decoded token's attention on the CPU (one query per head), which the
compiled decode step and a verify step's eager rows both call so that the two give the same
bits (engine.inference.speculative): it must agree with a float64 reference to float32
rounding, read strided cache slices, and give the same bits on one thread or two."""

from __future__ import annotations

import pytest
import torch

from wren.engine.inference.models import attention  # noqa: F401  (registers the op's fake)
from wren.engine.inference.quant import kernels

pytestmark = pytest.mark.skipif(not (kernels.available() and hasattr(torch.ops.wren, "attend_one")),
                                reason="the kernels (with attend_one) are not built")


def attend_one(q, keys, values):
    return torch.ops.wren.attend_one.default(q, keys, values)


def reference(q, keys, values):
    scores = torch.einsum("bhgd,bhtd->bhgt", q.double(), keys.double())
    return torch.einsum("bhgt,bhtd->bhgd", torch.softmax(scores, -1), values.double())


@pytest.mark.parametrize("heads,group,dim,span", [(3, 3, 64, 1), (3, 3, 64, 17), (8, 4, 64, 700),
                                                  (2, 1, 80, 33), (4, 2, 128, 300), (1, 5, 7, 41)])
def test_matches_float64_softmax_attention(heads, group, dim, span):
    gen = torch.Generator().manual_seed(span)
    q = torch.randn(1, heads, group, dim, generator=gen) * dim**-0.5 * 3
    cache_k = torch.randn(1, heads, 1024, dim, generator=gen)
    cache_v = torch.randn(1, heads, 1024, dim, generator=gen)
    keys, values = cache_k[:, :, 5 : 5 + span], cache_v[:, :, 5 : 5 + span]  # a cache's slice
    got = attend_one(q, keys, values)
    assert got.shape == q.shape
    torch.testing.assert_close(got.double(), reference(q, keys, values), rtol=1e-5, atol=2e-6)


def test_same_bits_on_one_thread_or_two():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 8, 4, 64, generator=gen) * 0.3
    keys, values = torch.randn(1, 8, 900, 64, generator=gen), torch.randn(1, 8, 900, 64, generator=gen)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = attend_one(q, keys, values)
        torch.set_num_threads(2)
        two = attend_one(q, keys, values)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_compiled_graph_calls_the_kernel():
    """Inductor keeps the op opaque: a compiled function gives the eager call's bits."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 3, 3, 64, generator=gen)
    keys, values = torch.randn(1, 3, 50, 64, generator=gen), torch.randn(1, 3, 50, 64, generator=gen)
    compiled = torch.compile(lambda q, k, v: attend_one(q * 0.125, k, v) + 1.0, fullgraph=True)
    assert torch.equal(compiled(q, keys, values), attend_one(q * 0.125, keys, values) + 1.0)
