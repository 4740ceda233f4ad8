"""wren::attend_chunk, the tiled online-softmax attention of a prompt chunk (csrc/attend.cpp),
against a float64 reference on random inputs: head_dim 64/80/128 (and one not a multiple of
any vector), groups of 1, 3 and 4 query heads per kv head, chunks at position 0 and later,
sliding windows, lengths that are not a multiple of the kernel's blocks; on every x86 table
this CPU runs (the scalar and NEON tables have no kernel: Wren keeps SDPA there)."""

from __future__ import annotations

import pytest
import torch

from wren.engine.inference.models import attention
from wren.engine.inference.quant import kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="Wren's kernels are not built")


def reference(q, keys, values, start, lo, window):
    """float64 softmax(q k^T / sqrt(d)) v with each query's visible keys by position."""
    length, heads, dim = q.shape
    group = heads // keys.shape[0]
    k = keys.double().repeat_interleave(group, 0)
    v = values.double().repeat_interleave(group, 0)
    scores = torch.einsum("lhd,htd->hlt", q.double(), k) * dim**-0.5
    q_pos = torch.arange(start, start + length)[:, None]
    k_pos = torch.arange(lo, lo + keys.shape[1])[None, :]
    scores = scores.masked_fill(~attention.visible(q_pos, k_pos, window), float("-inf"))
    return torch.einsum("hlt,htd->lhd", torch.softmax(scores, -1), v)


def inputs(length, start, window, kv_heads, group, dim, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lo = attention.first_visible_key(start, window)
    span = start + length - lo
    q = torch.randn(length, kv_heads * group, dim, generator=gen) * 2
    keys = torch.randn(kv_heads, span, dim, generator=gen)
    values = torch.randn(kv_heads, span, dim, generator=gen)
    return q, keys, values, lo


def attend_chunk(q, keys, values, start, lo, window):
    return torch.ops.wren.attend_chunk(q, keys, values, start, lo, window or 0, q.shape[-1] ** -0.5)


def needs_kernel(isa):
    if not attention.chunk_kernel_ready():
        assert isa not in ("avx2", "avx-vnni", "avx512-vnni")  # the x86 tables all have it
        pytest.skip(f"no attend_chunk kernel in the {isa} table")


# (length, start, window): a whole prompt, chunks further on, sliding windows cutting into
# the chunk's keys, lengths that are not a multiple of the 64-key blocks or the query tiles
CASES = [(100, 0, None), (77, 300, None), (129, 1300, None), (150, 500, 128), (65, 0, 40)]


@pytest.mark.parametrize("dim", [64, 80, 128, 36])
@pytest.mark.parametrize("group", [1, 3, 4])
def test_attend_chunk_matches_float64(isa, dim, group):
    needs_kernel(isa)
    for length, start, window in CASES:
        q, keys, values, lo = inputs(length, start, window, 2, group, dim)
        out = attend_chunk(q, keys, values, start, lo, window)
        want = reference(q, keys, values, start, lo, window)
        err = (out.double() - want).abs().max().item()
        assert err < 1e-5 * max(1.0, want.abs().max().item()), (length, start, window, err)


def test_attend_chunk_long_span_on_two_threads(isa):
    """1B-shaped heads (32 over 8) over ~1,500 keys, the tasks shared by two threads."""
    needs_kernel(isa)
    q, keys, values, lo = inputs(300, 1200, None, 8, 4, 64, seed=1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = attend_chunk(q, keys, values, 1200, lo, None)
    finally:
        torch.set_num_threads(before)
    want = reference(q, keys, values, 1200, lo, None)
    assert (out.double() - want).abs().max().item() < 1e-5


def test_strided_cache_slices_and_query_views(isa):
    """The model passes q as a view of the fused projection (heads apart by heads + kv_heads)
    and keys as a slice of the cache (positions lo..end of a longer buffer)."""
    needs_kernel(isa)
    gen = torch.Generator().manual_seed(2)
    length, start, window, dim = 90, 200, 64, 64
    qk = torch.randn(length, 12 + 4, dim, generator=gen)
    cache_k = torch.randn(4, 1024, dim, generator=gen)
    cache_v = torch.randn(4, 1024, dim, generator=gen)
    lo = attention.first_visible_key(start, window)
    q, keys, values = qk[:, :12], cache_k[:, lo : start + length], cache_v[:, lo : start + length]
    out = attend_chunk(q, keys, values, start, lo, window)
    want = reference(q.contiguous(), keys.contiguous(), values.contiguous(), start, lo, window)
    assert (out.double() - want).abs().max().item() < 1e-5


def test_keys_no_query_sees_are_never_read(isa):
    """NaN in the keys and values older than every query's window, the kernel handed all of
    them from position 0: the output stays finite and right, since blocks no query of a tile
    sees are skipped, not masked (SDPA with the float mask gives NaN here)."""
    needs_kernel(isa)
    length, start, window, dim = 96, 640, 256, 64
    q, _, _, _ = inputs(length, start, window, 2, 4, dim, seed=3)
    lo, span = 0, start + length
    keys, values = torch.randn(2, span, dim), torch.randn(2, span, dim)
    poisoned_k, poisoned_v = keys.clone(), values.clone()
    poisoned_k[:, : start - window] = float("nan")  # older than every query's window
    poisoned_v[:, : start - window] = float("nan")
    out = attend_chunk(q, poisoned_k, poisoned_v, start, lo, window)
    want = reference(q, keys, values, start, lo, window)
    assert torch.isfinite(out).all()
    assert (out.double() - want).abs().max().item() < 1e-5


def test_model_chunk_takes_the_kernel_and_matches_sdpa(isa, monkeypatch):
    """Attention._attend's route: a chunk past the start with a window through the kernel
    equals attend()'s SDPA path with the float mask (WREN_ATTEND=sdpa's path)."""
    needs_kernel(isa)
    length, start, window, dim = 64, 300, 100, 64
    q, keys, values, lo = inputs(length, start, window, 2, 3, dim, seed=4)
    q4, k4, v4 = q[None], keys[None], values[None]
    assert attention.chunk_kernel(q4, k4, None)
    assert not attention.chunk_kernel(q4[:, :8], k4, None)  # short blocks keep _short_block
    assert not attention.chunk_kernel(q4, k4, torch.zeros(6))  # sinks keep their path
    assert not attention.chunk_kernel(q4.bfloat16(), k4.bfloat16(), None)
    ours = attention.attend_positions(q4, k4, v4, start, lo, window)
    mask = attention.causal_mask(length, start, lo, window, q.device, q.dtype)
    theirs = attention.attend(q4, k4, v4, mask)
    assert (ours - theirs).abs().max().item() < 1e-5
    monkeypatch.setattr(attention, "_CHUNK_KERNEL", False)
    assert not attention.chunk_kernel(q4, k4, None)


def test_scalar_table_has_no_kernel():
    try:
        assert kernels.use_isa("scalar") == "scalar"
        assert not attention.chunk_kernel_ready()
        assert not attention.chunk_kernel(torch.zeros(1, 40, 2, 8), torch.zeros(1, 1, 40, 8), None)
        with pytest.raises(RuntimeError):
            attend_chunk(torch.zeros(4, 2, 8), torch.zeros(1, 4, 8), torch.zeros(1, 4, 8), 0, 0, None)
    finally:
        kernels.use_isa("")
