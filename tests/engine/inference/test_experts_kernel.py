"""The grouped experts kernel (csrc/experts.cpp, torch.ops.wren.experts_grouped): a chunk's
8-bit rows through every chosen expert in one call, against the layer's torch path (one
kernel call per expert and projection, experts.GROUPED_KERNEL off) on the same routing.

- Q4_K/Q6_K (Qwen3-MoE's Q4_K_M), Q8_0, and MXFP4 with biases and the clamped SwiGLU
  (gpt-oss), file layouts and interleaved copies, 33 tokens (past the decoding kernels' rows) to a few hundred.
- A chunk runs the kernel once and no per-expert product (a decoding step's few rows do not); a registered activation keeps
  the torch path.
- Bad input (an expert id out of range, rows that are not whole experts) is refused, named.
"""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as T

from wren.engine.inference.models import experts as ex
from wren.engine.inference.quant import kernels
from wren.engine.inference.quant.modules import QTensor

pytestmark = pytest.mark.skipif(not kernels.available() or not hasattr(torch.ops.wren, "experts_grouped"),
                                reason="kernels not built")


E, K, HIDDEN, INNER = 8, 3, 256, 512
# Where each type's fp16 scales sit in a block and a value keeping weights ~0.02
SCALES = {T.Q4_K: ((0, 1.4e-4), (2, 1.0e-3)), T.Q6_K: ((208, 1.5e-5),), T.Q8_0: ((0, 2.7e-4),)}


def blocks(qtype: T, rows: int, cols: int, rng: np.random.Generator) -> QTensor:
    block, size = GGML_QUANT_SIZES[qtype]
    n = rows * cols // block
    raw = rng.integers(0, 256, (n, size), dtype=np.uint8)
    for at, value in SCALES[qtype]:
        raw[:, at:at + 2] = (value * rng.uniform(0.5, 1.0, n)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return QTensor(torch.from_numpy(raw.reshape(rows, -1).copy()), int(qtype), (rows, cols))


def args(**over) -> SimpleNamespace:
    return SimpleNamespace(**({"num_experts": E, "num_experts_per_tok": K, "hidden_size": HIDDEN,
                               "moe_intermediate_size": INNER, "expert_router": "softmax_topk",
                               "expert_activation": "swiglu", "router_bias": False, "expert_bias": False} | over))


def mxfp4(rows: int, cols: int, rng: np.random.Generator) -> QTensor:
    """Random MXFP4 blocks with scales 2^-10..2^-5 (finite values of a few hundredths)."""
    n = rows * cols // 32
    raw = rng.integers(0, 256, (n, 17), dtype=np.uint8)
    raw[:, 0] = rng.integers(118, 124, n)
    return QTensor(torch.from_numpy(raw.reshape(rows, -1).copy()), int(T.MXFP4), (rows, cols))


def layer(types: tuple[T, T, T], gpt_oss: bool, seed: int, interleave: bool = False) -> ex.Experts:
    rng = np.random.default_rng(seed)
    over = {"expert_bias": True, "router_bias": True, "expert_activation": "clamped_swiglu",
            "expert_router": "topk_softmax"} if gpt_oss else {}
    moe = ex.Experts(args(**over))
    moe.router.weight.data = torch.from_numpy(rng.standard_normal((E, HIDDEN)).astype(np.float32)) * 0.3
    for name, qtype in zip(ex.PROJECTIONS, types, strict=True):
        rows, cols = (HIDDEN, INNER) if name == "down" else (INNER, HIDDEN)
        weight = mxfp4(E * rows, cols, rng) if qtype == T.MXFP4 else blocks(qtype, E * rows, cols, rng)
        if interleave:
            raw, to = kernels.interleaved(weight.raw, weight.qtype, cols)
            weight = QTensor(raw, to, weight.shape)
        moe.set_blocks(name, weight)
        if gpt_oss:
            moe.router.bias.data = torch.from_numpy(rng.standard_normal(E).astype(np.float32))
            moe.register_buffer(f"{name}_bias", torch.from_numpy(rng.standard_normal((E, rows)).astype(np.float32)) * 0.1)
    return moe.eval()


def both_paths(moe: ex.Experts, x: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's output with the grouped kernel, then with the torch path, same routing."""
    with torch.no_grad():
        weights, ids = moe.route(moe.router(x).float(), moe.top_k)
        assert moe._kernel_runs(x)
        got = moe._grouped(x, weights, ids, False)
        monkeypatch.setattr(ex, "GROUPED_KERNEL", False)
        want = moe._grouped(x, weights, ids, False)
        monkeypatch.setattr(ex, "GROUPED_KERNEL", True)
    return got, want


CASES = [((T.Q4_K, T.Q4_K, T.Q6_K), False), ((T.Q8_0, T.Q4_K, T.Q8_0), False), ((T.MXFP4,) * 3, True),
         ((T.Q6_K, T.Q6_K, T.Q4_K), True)]


@pytest.mark.parametrize(("types", "gpt_oss"), CASES, ids=lambda c: "/".join(t.name for t in c) if
                         isinstance(c, tuple) else ("gpt-oss" if c else "qwen3moe"))
@pytest.mark.parametrize("tokens", [33, 70, 200])
def test_the_kernel_equals_the_per_expert_path(types, gpt_oss, tokens, monkeypatch):
    moe = layer(types, gpt_oss, seed=tokens)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(tokens))
    got, want = both_paths(moe, x, monkeypatch)
    assert want.abs().max() > 0.03  # not a vanishing output
    # the same 8-bit products; the activation's last bit (C++ exp against torch's) can move
    # one value of the down projection's 8-bit input by a step, ~1e-4 of the output's scale
    torch.testing.assert_close(got, want, rtol=1e-4, atol=3e-4 * float(want.abs().max()))


def test_interleaved_copies_of_the_experts_give_the_same_products(monkeypatch):
    moe = layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=11, interleave=True)
    assert moe.qtypes["gate"] != int(T.Q4_K)  # the eight-row layout (csrc/repack.cpp)
    x = torch.randn(70, HIDDEN, generator=torch.Generator().manual_seed(12))
    got, want = both_paths(moe, x, monkeypatch)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=3e-4 * float(want.abs().max()))


def test_a_chunk_is_one_kernel_call_with_no_per_expert_product(monkeypatch):
    moe = layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=13)
    calls: list[int] = []
    grouped = torch.ops.wren.experts_grouped.default

    def counted(*a):
        calls.append(a[0].shape[0])
        return grouped(*a)

    def refused(*_):
        raise AssertionError("a per-expert product ran")

    monkeypatch.setattr(ex.Experts, "_gate_up", refused)
    monkeypatch.setattr(ex, "_matmul", refused)
    monkeypatch.setattr(ex.Experts, "_grouped_kernel", lambda self, rows, w, ids: counted(
        rows, ids, w, self.gate_raw, self.up_raw, self.down_raw, [self.qtypes[n] for n in ex.PROJECTIONS],
        self.inner, self.kernel_act, 1.702, 7.0, None, None, None))
    with torch.no_grad():
        moe(torch.randn(64, HIDDEN))  # a chunk (8-bit rows outside exact_activations)
    assert calls == [64]
    with torch.no_grad():  # a batched decoding step of four sequences keeps the decoding kernels
        assert not moe._kernel_runs(torch.zeros(4, HIDDEN))


@pytest.mark.parametrize(("types", "gpt_oss", "interleave"),
                         [(*case, False) for case in CASES] + [((T.Q4_K, T.Q4_K, T.Q6_K), False, True)],
                         ids=lambda c: "/".join(t.name for t in c) if isinstance(c, tuple) else str(c))
@pytest.mark.parametrize(("tokens", "exact_from"), [(1, 0), (16, 0), (40, 0), (70, 54), (70, 69)])
def test_rows_from_exact_from_on_take_the_per_expert_float_products(types, gpt_oss, interleave, tokens, exact_from,
                                                                    monkeypatch):
    """A prompt's last rows keep float32 activations (quant.modules.prompt_activations): in
    the same call as its 8-bit rows, the kernel gives them the torch path's float products
    (qlinear_exact per expert), the file's rows of an interleaved copy included (only the
    activation's last bits may differ), and the 8-bit rows what they get alone."""
    moe = layer(types, gpt_oss, seed=40 + tokens, interleave=interleave)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(tokens + exact_from))
    with torch.no_grad():
        weights, ids = moe.route(moe.router(x).float(), moe.top_k)
        got = moe._grouped_kernel(x, weights, ids, exact_from)
        want = moe._grouped(x[exact_from:], weights[exact_from:], ids[exact_from:], True)
        rounded = moe._grouped_kernel(x[exact_from:], weights[exact_from:], ids[exact_from:])
        if exact_from:
            alone = moe._grouped_kernel(x[:exact_from], weights[:exact_from], ids[:exact_from])
            torch.testing.assert_close(got[:exact_from], alone, rtol=0, atol=0)  # the same bits
    tail = got[exact_from:]
    assert want.abs().max() > 0.03
    torch.testing.assert_close(tail, want, rtol=1e-5, atol=2e-6 * float(want.abs().max()))
    assert (rounded - want).abs().max() > 10 * (tail - want).abs().max()  # and not the 8-bit products


def test_a_prompt_chunk_s_exact_tail_is_in_the_same_kernel_call(monkeypatch):
    """A chunk whose tail picks the first word: its integer rows and its last
    PROMPT_EXACT_TAIL rows are one kernel call, no per-expert product; a long prompt's
    earlier chunk (exact_tail=False) is one call with no exact rows."""
    from wren.engine.inference.quant import modules

    moe = layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=17)
    calls: list[tuple[int, bool]] = []
    kernel = ex.Experts._grouped_kernel

    def counted(self, rows, weights, ids, exact_from=-1):
        calls.append((rows.shape[0], exact_from))
        return kernel(self, rows, weights, ids, exact_from)

    def refused(*_):
        raise AssertionError("a per-expert product ran")

    monkeypatch.setattr(ex.Experts, "_gate_up", refused)
    monkeypatch.setattr(ex, "_matmul", refused)
    monkeypatch.setattr(ex.Experts, "_grouped_kernel", counted)
    x = torch.randn(100, HIDDEN, generator=torch.Generator().manual_seed(18))
    tail = modules.PROMPT_EXACT_TAIL
    with torch.no_grad(), modules.prompt_activations(exact_tail=True):
        moe(x)
    assert calls == [(100, 100 - tail)]
    calls.clear()
    with torch.no_grad(), modules.prompt_activations(exact_tail=False):
        moe(x)
    assert calls == [(100, -1)]


def test_a_registered_activation_keeps_the_torch_path(monkeypatch):
    monkeypatch.setitem(ex.ACTIVATIONS, "swiglu_copy", lambda gate, up: torch.nn.functional.silu(gate) * up)
    moe = ex.Experts(args(expert_activation="swiglu_copy"))
    assert moe.kernel_act is None and not moe._kernel_runs(torch.zeros(3, HIDDEN))


def test_bad_input_is_refused_with_what_was_wrong():
    moe = layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=14)
    x = torch.randn(3, HIDDEN)
    ids = torch.tensor([[0, 1, E]] * 3)
    weights = torch.full((3, K), 1 / K)
    qtypes = [moe.qtypes[n] for n in ex.PROJECTIONS]
    op = torch.ops.wren.experts_grouped.default
    with pytest.raises(RuntimeError, match=f"expert id {E} of {E}"):
        op(x, ids, weights, moe.gate_raw, moe.up_raw, moe.down_raw, qtypes, INNER, 0, 1.0, 1.0, None, None, None)
    with pytest.raises(RuntimeError, match="not whole experts"):
        op(x, ids.clamp(max=E - 1), weights, moe.gate_raw, moe.up_raw, moe.down_raw, qtypes, INNER + 8, 0, 1.0, 1.0,
           None, None, None)
    with pytest.raises(RuntimeError, match="no integer prompt kernels"):
        op(x, ids.clamp(max=E - 1), weights, moe.gate_raw, moe.up_raw, moe.down_raw, [int(T.Q3_K)] + qtypes[1:],
           INNER, 0, 1.0, 1.0, None, None, None)


@pytest.mark.parametrize(("types", "gpt_oss"), [((T.MXFP4,) * 3, True), ((T.Q8_0, T.Q4_K, T.Q8_0), True),
                                              ((T.Q4_K, T.Q4_K, T.Q6_K), False)], ids=["mxfp4", "q8_0/q4_k", "qwen3moe"])
def test_a_decoded_token_is_one_kernel_call(types, gpt_oss, monkeypatch):
    # a decoded token runs the kernel once (gpt-oss's with its biases), with the same products
    # as the per-expert decoding kernels (the torch path / _one_token) on the same routing
    moe = layer(types, gpt_oss, seed=21)
    x = torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(22))
    with torch.no_grad():
        assert moe._kernel_runs(x)
        weights, ids = moe.route(moe.router(x).float(), moe.top_k)
        monkeypatch.setattr(ex, "GROUPED_KERNEL", False)
        want = moe._grouped(x, weights, ids, False)
        if not gpt_oss:
            torch.testing.assert_close(moe._one_token(x, weights[0], ids[0].tolist(), False), want)
        monkeypatch.setattr(ex, "GROUPED_KERNEL", True)
        calls: list[int] = []
        kernel = ex.Experts._grouped_kernel
        monkeypatch.setattr(ex.Experts, "_grouped_kernel", lambda self, *a: calls.append(1) or kernel(self, *a))
        monkeypatch.setattr(ex.Experts, "_one_token", lambda *_: pytest.fail("_one_token ran"))
        got = moe(x.view(1, 1, HIDDEN)).view(1, HIDDEN)
    assert calls == [1]
    assert want.abs().max() > 0.03
    torch.testing.assert_close(got, want, rtol=1e-4, atol=3e-4 * float(want.abs().max()))


def test_an_exact_token_and_a_registered_activation_keep_one_token(monkeypatch):
    # float32 activations (exact_activations) and an activation the kernel does not compute:
    # Experts._one_token (its gate and up rows of all k experts in one call)
    from wren.engine.inference.quant.modules import exact_activations

    monkeypatch.setitem(ex.ACTIVATIONS, "swiglu_copy", lambda gate, up: torch.nn.functional.silu(gate) * up)
    plain, copied = layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=23), layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=23)
    copied.activation, copied.kernel_act = ex.ACTIVATIONS["swiglu_copy"], None
    one: list[int] = []
    alone = ex.Experts._one_token
    monkeypatch.setattr(ex.Experts, "_one_token", lambda self, *a: one.append(1) or alone(self, *a))
    monkeypatch.setattr(ex.Experts, "_grouped_kernel", lambda *_: pytest.fail("the grouped kernel ran"))
    x = torch.randn(1, 1, HIDDEN, generator=torch.Generator().manual_seed(24))
    with torch.no_grad():
        with exact_activations():
            assert plain(x).abs().max() > 0
        assert copied(x).abs().max() > 0
    assert one == [1, 1]


@pytest.mark.parametrize(("types", "gpt_oss", "tokens"), [((T.Q4_K, T.Q4_K, T.Q6_K), False, 200),
                                                        ((T.MXFP4,) * 3, True, 1), ((T.MXFP4,) * 3, True, 70)],
                         ids=["qwen3moe-chunk", "gpt-oss-token", "gpt-oss-chunk"])
def test_the_same_bits_whatever_the_threads(types, gpt_oss, tokens):
    # each stage's tasks are shared out, then taken from a slower thread's share (csrc/
    # experts.cpp each_task); every task writes only its own rows, so one thread, two, and
    # three on this machine's cores (unequal shares, taken over as threads finish) agree bit for bit
    moe = layer(types, gpt_oss, seed=31 + tokens)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(32))
    threads = torch.get_num_threads()
    outs = []
    try:
        with torch.no_grad():
            weights, ids = moe.route(moe.router(x).float(), moe.top_k)
            for n in (1, 2, 3):
                torch.set_num_threads(n)
                outs.append(moe._grouped_kernel(x, weights, ids))
    finally:
        torch.set_num_threads(threads)
    assert outs[0].abs().max() > 0.03
    for out in outs[1:]:
        assert torch.equal(out, outs[0])


@pytest.mark.parametrize("tokens", [1, 70], ids=["token", "chunk"])
def test_the_team_and_openmp_regions_agree_and_callers_may_overlap(tokens, monkeypatch):
    # the stages run as OpenMP regions (the default), or with WREN_EXPERTS_TEAM=on on
    # experts.cpp's Team (helpers that join a stage if they come in time; OpenMP again while
    # another caller holds it): the same tasks, so the same bits; four callers at once share it
    from concurrent.futures import ThreadPoolExecutor

    moe = layer((T.MXFP4,) * 3, True, seed=41 + tokens)
    x = torch.randn(tokens, HIDDEN, generator=torch.Generator().manual_seed(42))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch.no_grad():
            weights, ids = moe.route(moe.router(x).float(), moe.top_k)
            monkeypatch.setenv("WREN_EXPERTS_TEAM", "off")
            want = moe._grouped_kernel(x, weights, ids)
            monkeypatch.setenv("WREN_EXPERTS_TEAM", "on")
            alone = [moe._grouped_kernel(x, weights, ids) for _ in range(20)]

            def call(_):
                with torch.no_grad():
                    return moe._grouped_kernel(x, weights, ids)

            with ThreadPoolExecutor(4) as pool:
                together = list(pool.map(call, range(40)))
    finally:
        torch.set_num_threads(threads)
    assert want.abs().max() > 0.03
    for out in alone + together:
        assert torch.equal(out, want)


def test_file_rows_of_an_expert_with_many_tokens_take_the_interleaved_products(monkeypatch):
    # mapped experts stay the file's rows; an expert chosen by 16 or more of a chunk's tokens
    # has each task's rows interleaved before its products, so they are those of the copy
    # interleaved at load (plain reads), bit for bit; a decoded token keeps the file's kernel
    monkeypatch.setattr(ex, "MAP_EXPERTS", True)
    mapped = layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=5)
    assert mapped.qtypes["gate"] == int(T.Q4_K)
    loaded = layer((T.Q4_K, T.Q4_K, T.Q6_K), False, seed=5, interleave=True)
    assert loaded.qtypes["gate"] != int(T.Q4_K)
    x = torch.randn(200, HIDDEN, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        weights, ids = mapped.route(mapped.router(x).float(), mapped.top_k)
        assert int(torch.bincount(ids.reshape(-1), minlength=E).min()) >= 16
        assert torch.equal(mapped._grouped(x, weights, ids, False), loaded._grouped(x, weights, ids, False))


def test_repack_off_keeps_the_file_rows_products_in_a_fresh_process():
    # WREN_REPACK=off (A/B measurements) keeps every product in the file's row layout: the
    # kernel's per-task interleaving too, so file rows then differ from an interleaved copy
    code = """
import numpy as np, torch
from wren.engine.inference.quant import kernels
rng = np.random.default_rng(0)
E, F, H, T = 4, 256, 256, 64
def q4k(rows, cols):
    raw = rng.integers(0, 256, (rows * cols // 256, 144), dtype=np.uint8)
    raw[:, 0:2] = np.array([1.4e-4], np.float16).view(np.uint8)
    raw[:, 2:4] = np.array([1.0e-3], np.float16).view(np.uint8)
    return torch.from_numpy(raw.reshape(rows, -1).copy())
gate, up, down = q4k(E * F, H), q4k(E * F, H), q4k(E * H, F)
x = torch.from_numpy(rng.standard_normal((T, H)).astype(np.float32))
ids = torch.tensor([[t % E, (t + 1) % E] for t in range(T)])  # 32 tokens an expert
w = torch.full((T, 2), 0.5)
run = lambda g, u, d, q: torch.ops.wren.experts_grouped(x, ids, w, g, u, d, [q] * 3, F, 0, 1.0, 0.0, None, None, None)
packed = [torch.ops.wren.repack(t, 41, c) for t, c in ((gate, H), (up, H), (down, F))]
print(torch.equal(run(gate, up, down, 12), run(*packed, 41)))
"""
    for value, want in (("off", "False"), ("", "True")):
        env = {**os.environ, "WREN_REPACK": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == want, value
