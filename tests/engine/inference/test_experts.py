"""The experts layer (engine/inference/models/experts.py) on the file's own blocks: Q4_K and
Q6_K experts, as a Q4_K_M Qwen3-30B-A3B stores them, against the same weights widened to
float32 and run one token and one expert at a time (the plain definition of the layer).

- Every token of a prompt chunk, grouped by expert, gives the per-token reference.
- A decoded token computes only its chosen experts: the others' blocks are poisoned so any
  product with them is NaN, and the output stays finite.
- A chunk or a batched step runs each chosen expert once, for all the tokens that chose it.
- The hooks: a registered router and activation are the ones the layer runs.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as T

from wren.engine.inference.models import experts as ex
from wren.engine.inference.quant import ggml
from wren.engine.inference.quant.modules import QTensor, exact_activations

E, K, HIDDEN, INNER = 8, 3, 256, 512
# Where each type's fp16 scales sit in a block and a value keeping weights ~0.02 (random_gguf's)
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


def layer(seed: int = 0, down: T = T.Q6_K, **over) -> tuple[ex.Experts, dict[str, QTensor]]:
    rng = np.random.default_rng(seed)
    weights = {"gate": blocks(T.Q4_K, E * INNER, HIDDEN, rng), "up": blocks(T.Q4_K, E * INNER, HIDDEN, rng),
               "down": blocks(down, E * HIDDEN, INNER, rng)}
    moe = ex.Experts(args(**over))
    moe.router.weight.data = torch.from_numpy(rng.standard_normal((E, HIDDEN)).astype(np.float32)) * 0.3
    for name, weight in weights.items():
        moe.set_blocks(name, weight)
    return moe.eval(), weights


def reference(moe: ex.Experts, weights: dict[str, QTensor], x: torch.Tensor) -> torch.Tensor:
    """One token and one chosen expert at a time, on the weights widened to float32."""
    dense = {n: w.dequantize() for n, w in weights.items()}
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        probs = torch.softmax(moe.router.weight @ x[t], -1)
        top, ids = torch.topk(probs, K)
        for w, e in zip((top / top.sum()).tolist(), ids.tolist(), strict=True):
            g = dense["gate"][e * INNER:(e + 1) * INNER] @ x[t]
            u = dense["up"][e * INNER:(e + 1) * INNER] @ x[t]
            out[t] += w * (dense["down"][e * HIDDEN:(e + 1) * HIDDEN] @ (torch.nn.functional.silu(g) * u))
    return out


def test_a_prompt_chunk_grouped_by_expert_equals_each_token_alone():
    moe, weights = layer()
    x = torch.randn(40, HIDDEN, generator=torch.Generator().manual_seed(1))
    with exact_activations(), torch.no_grad():
        got = moe(x)
    want = reference(moe, weights, x)
    assert want.abs().max() > 0.1  # not a vanishing output
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def test_decoding_with_8_bit_activations_stays_near_the_reference():
    moe, weights = layer(seed=2, down=T.Q8_0)
    x = torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = moe(x)
    want = reference(moe, weights, x)
    # the kernels' 8-bit activations (QuantLinear's decoding path): ~1% of the output's scale
    assert float((got - want).abs().max()) < 0.03 * float(want.abs().max())


def test_a_decoded_token_reads_only_its_chosen_experts():
    moe, weights = layer(seed=4)
    x = torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        chosen = set(torch.topk(moe.router(x), K).indices[0].tolist())
        clean = moe(x)
        for name in ex.PROJECTIONS:  # fp16 NaN in every scale field of the other experts' rows
            raw = getattr(moe, f"{name}_raw")
            rows = raw.shape[0] // E
            for e in set(range(E)) - chosen:
                raw[e * rows:(e + 1) * rows] = 0xFF
        again = moe(x)
    assert torch.equal(clean, again)  # finite, unchanged: no unchosen byte was multiplied
    with torch.no_grad():  # whereas a token that picks a poisoned expert does see it
        moe.router.weight.data[sorted(set(range(E)) - chosen)[0]] += 100 * x[0]
        assert torch.isnan(moe(x)).any()


def test_each_chosen_expert_runs_once_per_chunk_and_per_batched_step(monkeypatch):
    moe, _ = layer(seed=6)
    calls: list[int] = []  # the expert of each gate/up product
    downs: list[int] = []  # the rows of each down product
    gate_up, matmul = ex.Experts._gate_up, ex._matmul

    def counted(self, expert, x, exact):
        calls.append(expert)
        return gate_up(self, expert, x, exact)

    def counted_down(x, raw, qtype, cols, exact):
        if cols == INNER:  # without the kernels gate and up are products of their own
            downs.append(x.shape[0])
        return matmul(x, raw, qtype, cols, exact)

    monkeypatch.setattr(ex, "GROUPED_KERNEL", False)  # the torch path (the kernel: test_experts_kernel.py)
    monkeypatch.setattr(ex.Experts, "_gate_up", counted)
    monkeypatch.setattr(ex, "_matmul", counted_down)
    x = torch.randn(64, HIDDEN, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        moe(x)  # a chunk: 64 tokens x 3 choices over 8 experts
        assert sorted(calls) == list(range(E)) and len(downs) == E and sum(downs) == 64 * K
        calls.clear()
        downs.clear()
        # four sequences' decoding step, [B, 1, hidden] as the batched step gives it; two
        # of them the same token, so their choices coincide
        step = torch.stack([x[0], x[1], x[0], x[2]]).unsqueeze(1)
        moe(step)
    want = set(torch.topk(moe.router(step.view(4, -1)), K).indices.reshape(-1).tolist())
    assert sorted(calls) == sorted(want) and len(downs) == len(want)  # each expert once, however many rows chose it
    assert sum(downs) == 4 * K


def test_a_registered_router_and_activation_are_the_layers(monkeypatch):
    picked: list[torch.Tensor] = []

    def first_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.arange(k).expand(logits.shape[0], k)
        picked.append(ids)
        return torch.full((logits.shape[0], k), 1.0 / k), ids

    monkeypatch.setitem(ex.ROUTERS, "first_k", first_k)
    monkeypatch.setitem(ex.ACTIVATIONS, "zero", lambda gate, up: torch.zeros_like(up))
    x = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(8))
    moe, _ = layer(seed=9, expert_router="first_k", expert_activation="zero")
    with torch.no_grad():
        assert torch.equal(moe(x), torch.zeros_like(x))  # the activation is the hook's
    assert picked and picked[0].shape == (5, K)
    with pytest.raises(ValueError, match="no expert router 'nope'"):
        ex.Experts(args(expert_router="nope"))


def test_gpt_oss_style_routing_softmax_after_selection():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    weights, ids = ex.topk_softmax(logits, 2)
    assert ids.tolist() == [[1, 3]]
    torch.testing.assert_close(weights, torch.softmax(torch.tensor([[3.0, 2.0]]), -1))
    raw, _ = ex.softmax_topk_raw(logits, 2)
    assert float(raw.sum()) < 1.0 and torch.allclose(ex.softmax_topk(logits, 2)[0].sum(), torch.tensor(1.0))


def test_expert_blocks_are_views_of_the_file_bytes():
    moe, weights = layer(seed=10)
    down = moe.down_raw  # Q6_K: no interleaved layout, the bytes as given
    assert down.data_ptr() == weights["down"].raw.data_ptr()
    part, qtype, rows = moe.blocks("down", 3)
    assert (qtype, rows) == (int(T.Q6_K), HIDDEN)
    assert part.data_ptr() == down.data_ptr() + 3 * HIDDEN * ggml.row_bytes(int(T.Q6_K), INNER)
    assert moe.expert_bytes == sum(w.nbytes for w in weights.values()) // E
