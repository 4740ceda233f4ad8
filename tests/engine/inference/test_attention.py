"""One attention implementation for the torch backend (engine.inference.models.attention).

The prompt, one-token decode, batched decode and fixed-shape (CUDA graph) paths all run
it: a second copy of attention, RoPE or the KV-cache write anywhere in the torch model
code fails here, and the paths must give the same logits for the same tokens."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.fixtures.tiny import make_tiny_model_dir  # noqa: E402
from wren.engine.inference.backends.torch import TorchBackend  # noqa: E402
from wren.engine.inference.models import attention  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
ATTENTION_FILE = Path(attention.__file__).resolve()
TORCH_MODEL_CODE = sorted((ROOT / "engine" / "inference" / "models").glob("*.py")) + sorted(
    (ROOT / "engine" / "inference" / "quant").glob("*.py")) + [ROOT / "engine" / "inference" / "backends" / "torch.py"]

# Calls only attention.py may make: attention products, the softmax over scores, RoPE.
ATTENTION_CALLS = {"scaled_dot_product_attention", "softmax", "apply_rope", "_one_query"}
KV_CACHES = {"k_cache", "v_cache", "k_slots", "v_slots"}
CACHE_WRITES = {"index_copy_", "index_put_", "copy_", "scatter_", "index_fill_"}
# Names that sound like attention but are not it: GGUF's Q/K row order, undone at load.
NOT_ATTENTION = {"_rope_unpermutation"}


def _cache_attribute(node: ast.AST) -> str | None:
    """The KV cache `node` indexes into (`x.k_slots[...]`, `k_cache[...]`), if any."""
    while isinstance(node, ast.Subscript):
        node = node.value
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
    return name if name in KV_CACHES else None


# A mixture's router takes a softmax over its experts' scores, which is not attention.
ROUTER_SOFTMAX = {"experts.py"}


def attention_sites(source: str) -> list[str]:
    """What in `source` computes attention or RoPE, or writes a KV cache, as 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ATTENTION_CALLS:
                found.append(f"{node.lineno}: calls {name}")
            if name in CACHE_WRITES and isinstance(func, ast.Attribute) and _cache_attribute(func.value):
                found.append(f"{node.lineno}: writes {_cache_attribute(func.value)} with {name}")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            lowered = node.name.lower()
            if node.name not in NOT_ATTENTION and any(
                    word in lowered for word in ("attention", "attend", "rope", "rotary")):
                found.append(f"{node.lineno}: defines {node.name}")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and _cache_attribute(target):
                    found.append(f"{node.lineno}: writes {_cache_attribute(target)}")
    return found


def test_attention_rope_and_cache_writes_live_only_in_the_attention_module():
    assert ATTENTION_FILE in [p.resolve() for p in TORCH_MODEL_CODE]
    elsewhere = {
        str(path.relative_to(ROOT)): sites
        for path in TORCH_MODEL_CODE
        if path.resolve() != ATTENTION_FILE and (sites := [
            site for site in attention_sites(path.read_text())
            if not (path.name in ROUTER_SOFTMAX and site.endswith("calls softmax"))])
    }
    assert elsewhere == {}, f"a second attention implementation: {elsewhere}"
    # ...and the one module really is where they are.
    here = attention_sites(ATTENTION_FILE.read_text())
    for what in ("calls scaled_dot_product_attention", "calls softmax", "calls apply_rope",
                 "writes k_slots", "writes k_cache"):
        assert any(what in site for site in here), what


def test_the_scan_finds_each_kind_of_copy():
    """The scan above is only as good as what it recognises: each way a copy of attention
    has been written in this code base is flagged."""
    copies = {
        "sdpa": "out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)",
        "softmax": "probs = torch.softmax(scores, dim=-1)",
        "rope": "qk = apply_rope(qk, cos, sin)",
        "a new rope": "def _rotary(x, cos, sin):\n    return x * cos",
        "slice write": "attn.k_cache[:, :, start:end] = k",
        "gather write": "attn.k_slots[slot_ids, :, pos] = k",
        "index_copy": "attn.v_cache.index_copy_(2, pos, v)",
        "a helper": "def _static_attention(attn, x):\n    return x",
    }
    for name, source in copies.items():
        assert attention_sites(source), name
    assert attention_sites("k[:, :, :n] = keys[:, :, :n]\nh = layer(h, cos, sin, start)") == []


@pytest.mark.parametrize("arch,overrides", [
    ("llama", {}),  # GQA: 4 query heads over 2 kv heads
    ("qwen3", {}),  # query-key norm, head_dim apart from hidden / heads
    ("mistral", {"sliding_window": 5}),  # a window shorter than the sequence
])
def test_prompt_decode_batched_and_fixed_shape_steps_give_the_same_logits(tmp_path, arch, overrides):
    from wren.engine.inference.models.cuda_graphs import static_decode_step

    model = TorchBackend().load(make_tiny_model_dir(tmp_path, arch, seed=3, **overrides),
                                dtype="float32", slots=4, context_length=64, compile="off")
    m = model._model
    assert m.args.num_key_value_heads < m.args.num_attention_heads
    rng = np.random.default_rng(7)
    seq = [int(t) for t in rng.integers(3, 300, 20)]
    n = len(seq)

    def close(got, want, what):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4, err_msg=what)

    # 1. The prompt path, every position at once, in slot 0.
    with torch.inference_mode():
        full = m.forward(torch.tensor([seq]), 0, last_only=False).numpy()
    assert full.shape == (n, model.vocab_size)
    # 2. One-token decode steps, in slot 1 (a prompt of two tokens, then one at a time).
    close(model.prefill(seq[:2], 0, slot=1), full[1], "prefill in slot 1")
    for p in range(2, n):
        close(model.decode(seq[p], p, slot=1), full[p], f"decode at {p}")
    # 3. The batched step: two rows at different positions, in slots taken in and out of
    # order (a view of consecutive rows, or a gather).
    model.prefill(seq[:3], 0, slot=2)
    model.prefill(seq[:8], 0, slot=3)
    for i in range(n - 8):
        a, b = 3 + i, 8 + i
        order = [(2, a), (3, b)] if i % 2 else [(3, b), (2, a)]
        logits = model.decode_batch([seq[p] for _, p in order], [p for _, p in order], [s for s, _ in order])
        for row, (_, p) in zip(logits, order):
            close(row, full[p], f"batched row at {p}")
    # 4. The fixed-shape step CUDA graphs capture, over slot 0 whose later positions are
    # already written: the mask must hide them.
    with torch.inference_mode():
        for p in (2, 9, n - 1):
            for span in (p + 1, 32, 64):
                got = static_decode_step(m, torch.tensor([[seq[p]]]), torch.tensor([p]), span)
                close(got.numpy(), full[p], f"fixed-shape step at {p} over {span} keys")


def test_rope_tables_rotate_pairs_by_position_times_frequency():
    """apply_rope with rope_tables rotates each (i, i + dim/2) pair by position x frequency,
    the frequencies scaled by the config's rope_scaling (here linear, factor 4)."""
    from wren.engine.inference.models.llama import ModelArgs

    args = ModelArgs(model_type="llama", vocab_size=8, hidden_size=16, intermediate_size=8,
                     num_hidden_layers=1, num_attention_heads=2, rope_theta=100.0,
                     rope_scaling={"rope_type": "linear", "factor": 4.0})
    cos, sin = attention.rope_tables(args, 12, "cpu", torch.float64)
    x = torch.randn(12, 2, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = attention.apply_rope(x, cos, sin)
    inv = 1.0 / (100.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8)) / 4.0
    angle = torch.arange(12, dtype=torch.float64)[:, None, None] * inv
    a, b = x[..., :4], x[..., 4:]
    want = torch.cat((a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()), dim=-1)
    torch.testing.assert_close(got, want)


def test_one_query_attention_equals_the_softmax_formula_with_grouped_heads_and_a_mask():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 1, 6, 8, generator=gen)  # 2 rows, 6 query heads
    keys = torch.randn(2, 3, 5, 8, generator=gen)  # 3 kv heads: 2 query heads each
    values = torch.randn(2, 3, 5, 8, generator=gen)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])[:, None, None, :]
    got = attention.attend(q, keys, values, mask)
    for row in range(2):
        for head in range(6):
            k, v = keys[row, head // 2], values[row, head // 2]
            scores = (k @ q[row, 0, head]) / 8**0.5
            scores = scores.masked_fill(~mask[row, 0, 0], float("-inf"))
            want = torch.softmax(scores, dim=0) @ v
            torch.testing.assert_close(got[row, 0, head], want, rtol=1e-5, atol=1e-5)
    # The general path (several queries: torch's SDPA) agrees with it row by row.
    sdpa = attention.attend(q.expand(2, 2, 6, 8), keys, values, mask.expand(2, 1, 2, 5))
    torch.testing.assert_close(sdpa[:, :1], got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [2, 17, attention._SHORT_QUERIES, attention._SHORT_QUERIES + 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_short_block_of_queries_attends_as_torchs_kernel_does(length, dtype):
    """A few queries (after a cached history, or a whole short prompt) take two batched
    products on a CPU; they agree with torch's SDPA for a float mask, causal, and grouped heads."""
    gen = torch.Generator().manual_seed(length)
    span, start = 300, 300 - length
    q = torch.randn(1, length, 6, 16, generator=gen).to(dtype)
    keys = torch.randn(1, 2, span, 16, generator=gen).to(dtype)
    values = torch.randn(1, 2, span, 16, generator=gen).to(dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}

    def sdpa(k, v, **kw):
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2).float(), k.float(), v.float(), enable_gqa=True, **kw).transpose(1, 2)

    mask = attention.causal_mask(length, start, 0, None, q.device, dtype)
    got = attention.attend(q, keys, values, mask)
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got.float(), sdpa(keys, values, attn_mask=mask.float()), **tol)
    window = attention.causal_mask(length, start, 100, 64, q.device, dtype)  # a sliding window
    got = attention.attend(q, keys[:, :, 100:], values[:, :, 100:], window)
    torch.testing.assert_close(got.float(), sdpa(keys[:, :, 100:], values[:, :, 100:], attn_mask=window.float()), **tol)
    got = attention.attend(q, keys[:, :, :length], values[:, :, :length], causal=True)
    torch.testing.assert_close(got.float(), sdpa(keys[:, :, :length], values[:, :, :length], is_causal=True), **tol)


@pytest.mark.slow
def test_compiled_steps_give_the_logits_of_the_prompt_path(tmp_path):
    """The compiled one-sequence and batched graphs (attention's fused loop) agree with the
    eager prompt path on a GQA model."""
    from wren.engine.inference.models.decode import compile_cpu_decode

    model = TorchBackend().load(make_tiny_model_dir(tmp_path, "llama", seed=4), dtype="float32",
                                slots=2, context_length=32, compile="off")
    m = model._model
    assert compile_cpu_decode(m) is not None and m.decode_block is not None
    seq = [int(t) for t in np.random.default_rng(2).integers(3, 300, 14)]
    with torch.inference_mode():
        full = m.forward(torch.tensor([seq]), 0, last_only=False).numpy()
    model.prefill(seq[:2], 0, slot=1)
    for p in range(2, len(seq)):
        assert m.decode_block.ranges(m.layers[0]) and any(a <= p <= b for a, b in m.decode_block.ranges(m.layers[0]))
        np.testing.assert_allclose(model.decode(seq[p], p, slot=1), full[p], rtol=1e-4, atol=1e-4)
    model.prefill(seq[:4], 0, slot=0)
    model.prefill(seq[:7], 0, slot=1)
    for i in range(len(seq) - 7):
        logits = model.decode_batch([seq[4 + i], seq[7 + i]], [4 + i, 7 + i], [0, 1])
        np.testing.assert_allclose(logits[0], full[4 + i], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(logits[1], full[7 + i], rtol=1e-4, atol=1e-4)


def test_per_head_q_k_norms_take_the_kernel_where_heads_share_a_row():
    """Qwen3's and Gemma 3's q/k norms (one weight row for every q head, one for every k head):
    Wren's norm kernel, two calls, within float32 rounding of torch's weightless norm times
    the rows; a weight whose heads' rows differ keeps torch's path, bit for bit."""
    import types

    import torch.nn.functional as F

    from wren.engine.inference.quant import kernels

    if not (kernels.available() and kernels.RMS_NORM):
        pytest.skip("the norm kernel is not built")
    gen = torch.Generator().manual_seed(5)
    heads, kv, dim, eps = 4, 2, 128, 1e-6
    qk = torch.randn(1, 3, heads + kv, dim, generator=gen) * 3
    q_row, k_row = torch.rand(dim, generator=gen) + 0.5, torch.rand(dim, generator=gen) + 0.5
    shared = torch.cat((q_row.expand(heads, -1), k_row.expand(kv, -1)))
    obj = types.SimpleNamespace(n_heads=heads, eps=eps)
    obj._shared_qk_rows = types.MethodType(attention.Attention._shared_qk_rows, obj)
    got = attention.Attention._norm_heads(obj, qk, shared)
    want = F.rms_norm(qk, (dim,), None, eps) * shared
    assert got.shape == qk.shape
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6)
    assert torch.equal(got[..., :heads, :], kernels.rms_norm(qk[..., :heads, :], q_row, eps))
    # every head its own row: torch's path, and the cached rows follow the new weight
    other = torch.rand(heads + kv, dim, generator=gen) + 0.5
    assert obj._shared_qk_rows(other) is None
    assert torch.equal(attention.Attention._norm_heads(obj, qk, other), F.rms_norm(qk, (dim,), None, eps) * other)
