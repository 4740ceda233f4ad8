"""A mixture-of-experts MLP (`Experts`) over the file's own blocks, for the torch CPU path.

A GGUF stores each projection of all E experts as one 3-D tensor (`ffn_gate_exps`,
`ffn_up_exps`, `ffn_down_exps`: [E, rows, cols]); its bytes are E * rows GGUF rows, so expert
e is rows e*rows .. (e+1)*rows - 1: a view of the blocks, never a dequantized copy. A token
reads only the rows of the experts its router picked (bytes per token ~ active parameters).
Tokens are grouped by expert, so a prompt chunk or a batched decoding step reads each chosen
expert's weights once, for all the tokens that chose it (one quantized matmul per expert and
projection, through the same kernels as QuantLinear).

Hook points (what a family plugs in; ModelArgs names them, the family's `model_args` sets them):
- `ROUTERS[name]`: `route(logits [T, E] float32, k) -> (weights [T, k] float32, ids [T, k] long)`,
  where logits are the router's (`mlp.router`, its bias added when `ModelArgs.router_bias`).
  Chosen by `ModelArgs.expert_router`. Here: "softmax_topk" (softmax over all E, the top k,
  renormalised: Qwen3-MoE with norm_topk_prob) and "softmax_topk_raw" (the same, not
  renormalised); "topk_softmax" (the top k logits, softmax over those only: gpt-oss).
- `ACTIVATIONS[name]`: `act(gate [n, I], up [n, I]) -> [n, I]`, gate and up each expert's
  projections of its tokens (their biases added when `ModelArgs.expert_bias`). Chosen by
  `ModelArgs.expert_activation`; here "swiglu" (silu(gate) * up). A family registers its own
  (gpt-oss's clamped SwiGLU) with `register_activation` / `register_router` in its module.
- Biases (gpt-oss): `mlp.experts.{gate,up,down}_proj.bias` [E, rows] and `mlp.router.bias` [E],
  read when `ModelArgs.expert_bias` / `router_bias` say so.
The tensors come from weights.get as `mlp.<router_name>` and `mlp.<experts_name>.<proj>_proj`
(ModelArgs; a family's layer_tensors maps the GGUF parts to them, by default mlp.router and
mlp.experts), each a QTensor of all experts' rows [E * rows, cols] (GGUFWeights.get gives a
3-D tensor so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..families.gpt_oss import SWIGLU_ALPHA, SWIGLU_LIMIT
from ..quant import ggml, kernels, modules
from ..quant.modules import QTensor
from .gpt_oss_ffn import clamped_swiglu
from .weights import MAP_EXPERTS

Router = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]
Activation = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

PROJECTIONS = ("gate", "up", "down")
# Whether a chunk's 8-bit rows (more than kernels.max_gemv_rows) go through the grouped
# kernel, csrc/experts.cpp (one call per layer), where it can run them; False keeps one kernel call per expert and projection (tests compare the two).
GROUPED_KERNEL = True
# An expert chosen by this many of a chunk's tokens multiplies file rows in their interleaved
# layout's order (csrc/experts.cpp's kRepackTokens puts each task's rows into it): mapped
# experts then give the products of the copies interleaved at load (plain reads).
PACK_TOKENS = 16


def softmax_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over every expert, the k largest, renormalised to sum to 1 (Qwen3-MoE)."""
    weights, ids = softmax_topk_raw(logits, k)
    return weights / weights.sum(dim=-1, keepdim=True), ids


def softmax_topk_raw(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over every expert and the k largest probabilities, as they are."""
    return torch.topk(torch.softmax(logits.float(), dim=-1), k, dim=-1)


def topk_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest logits, then a softmax over those k only (gpt-oss)."""
    top, ids = torch.topk(logits.float(), k, dim=-1)
    return torch.softmax(top, dim=-1), ids


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


ROUTERS: dict[str, Router] = {"softmax_topk": softmax_topk, "softmax_topk_raw": softmax_topk_raw,
                              "topk_softmax": topk_softmax}
ACTIVATIONS: dict[str, Activation] = {"swiglu": swiglu, "clamped_swiglu": clamped_swiglu}  # the latter: gpt-oss
# The activations the grouped kernel (csrc/experts.cpp) computes itself, by its number
# (these functions, not their names: one registered under a known name is another function,
# and a layer with it keeps the torch path for its chunks).
KERNEL_ACTIVATIONS: dict[Activation, int] = {swiglu: 0, clamped_swiglu: 1}


def register_router(name: str, route: Router) -> None:
    """Make `route` available as ModelArgs.expert_router `name` (a family module calls it)."""
    ROUTERS[name] = route


def register_activation(name: str, act: Activation) -> None:
    """Make `act` available as ModelArgs.expert_activation `name` (a family module calls it)."""
    ACTIVATIONS[name] = act


class Experts(nn.Module):
    """The MoE MLP of one block: a router over `num_experts`, each token through its
    `num_experts_per_tok` chosen experts (gate/up, the activation, down), their outputs
    summed by the router's weights. Built on `meta`; `install_experts` gives it its blocks."""

    gelu = False  # Block.compiled_traits reads it of every MLP

    def __init__(self, args: Any) -> None:
        super().__init__()
        self.num_experts = args.num_experts
        self.top_k = args.num_experts_per_tok
        self.hidden = args.hidden_size
        self.inner = args.moe_intermediate_size
        if not 0 < self.top_k <= self.num_experts:
            raise ValueError(f"{self.top_k} experts per token of {self.num_experts}")
        if args.expert_router not in ROUTERS:
            raise ValueError(f"no expert router {args.expert_router!r}; known: {', '.join(sorted(ROUTERS))}")
        if args.expert_activation not in ACTIVATIONS:
            raise ValueError(f"no expert activation {args.expert_activation!r}; known: {', '.join(sorted(ACTIVATIONS))}")
        self.route = ROUTERS[args.expert_router]
        self.activation = ACTIVATIONS[args.expert_activation]
        self.kernel_act = KERNEL_ACTIVATIONS.get(self.activation)
        self.router = nn.Linear(self.hidden, self.num_experts, bias=args.router_bias)
        self.qtypes: dict[str, int] = {}
        self.has_bias = args.expert_bias
        # The last routing, [T, k] ids, kept when `record` is a list (tests compare routers).
        self.record: list[torch.Tensor] | None = None

    # --- weights --------------------------------------------------------------------------

    def set_blocks(self, name: str, weight: QTensor) -> None:
        """All experts' rows of projection `name` ("gate", "up", "down") as one buffer."""
        rows, cols = (self.inner, self.hidden) if name != "down" else (self.hidden, self.inner)
        if weight.shape != (self.num_experts * rows, cols):
            raise ValueError(f"mlp.experts.{name}_proj is {weight.shape[0]}x{weight.shape[1]}, config.json makes it "
                             f"{self.num_experts} experts x {rows}x{cols}")
        raw, qtype = weight.raw, weight.qtype
        if weight.raw.device.type == "cpu" and not MAP_EXPERTS:
            # decoding reads Q4_K/Q4_0/Q4_1 eight rows per pass (csrc/repack.cpp): whole groups
            # of rows stay within one expert, as rows is a multiple of 8. Mapped experts
            # (weights.MAP_EXPERTS) stay the file's pages: a repacked copy would be memory.
            raw, qtype = kernels.interleaved(raw, qtype, cols)
        self.register_buffer(f"{name}_raw", raw)
        self.qtypes[name] = qtype

    def blocks(self, name: str, expert: int) -> tuple[torch.Tensor, int, int]:
        """Expert `expert`'s rows of projection `name`: (a view of the bytes, type, rows)."""
        rows = self.inner if name != "down" else self.hidden
        raw: torch.Tensor = getattr(self, f"{name}_raw")
        return raw[expert * rows : (expert + 1) * rows], self.qtypes[name], rows

    def _blocks_for(self, name: str, expert: int, tokens: int, exact: bool) -> tuple[torch.Tensor, int, int]:
        """blocks(), interleaved (a copy) for `tokens` 8-bit rows where the kernel interleaves them."""
        raw, qtype, rows = self.blocks(name, expert)
        if tokens >= PACK_TOKENS and not exact:
            raw, qtype = kernels.interleaved(raw, qtype, self.hidden if name != "down" else self.inner)
        return raw, qtype, rows

    @property
    def expert_bytes(self) -> int:
        """Bytes of one expert's three projections (what a token reads per chosen expert)."""
        return sum(getattr(self, f"{n}_raw").numel() for n in PROJECTIONS) // self.num_experts

    # --- forward --------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, self.hidden)
        if rows.dtype != torch.float32:
            rows = rows.float()
        rows = rows.contiguous()
        weights, ids = self.route(self.router(rows).float(), self.top_k)
        if self.record is not None:
            self.record.append(ids.detach().clone())
        exact_from = _exact_from(rows.shape[0])
        one = rows.shape[0] == 1 and not self.has_bias and kernels.available() and rows.device.type == "cpu"
        if one and (exact_from == 0 or not self._kernel_runs(rows)):  # else _grouped's kernel call
            return self._one_token(rows, weights[0], ids[0].tolist(), exact_from == 0).view(shape).to(x.dtype)
        if 0 < exact_from < rows.shape[0] and self._kernel_runs(rows):
            # a prompt's last rows keep float32 activations: in the same kernel call, which
            # reads each chosen expert once for both and makes no per-expert call. The 16-row
            # tail still costs ~10% of a 512-token chunk (4-layer Qwen3-30B-A3B shape), as
            # it did through per-expert torch calls: its cost is the float products.
            out = self._grouped_kernel(rows, weights, ids, exact_from)
        elif 0 < exact_from < rows.shape[0]:
            out = torch.cat((self._grouped(rows[:exact_from], weights[:exact_from], ids[:exact_from], False),
                             self._grouped(rows[exact_from:], weights[exact_from:], ids[exact_from:], True)))
        else:
            out = self._grouped(rows, weights, ids, exact_from == 0)
        return out.view(shape).to(x.dtype)

    def _grouped(self, rows: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, exact: bool) -> torch.Tensor:
        """Tokens [T, hidden] through their chosen experts, grouped: the (token, choice) pairs
        sorted by expert, so each chosen expert multiplies all its rows in one call per
        projection; the elementwise work (biases, activation, weighting) and the scatter back
        to the tokens run once over all pairs (each small op costs a thread hand-off)."""
        if not exact and self._kernel_runs(rows):
            return self._grouped_kernel(rows, weights, ids)
        k = ids.shape[1]
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        experts = flat[order]
        tokens = order // k
        xs = rows.index_select(0, tokens)
        segments = [(e, n) for e, n in enumerate(torch.bincount(flat, minlength=self.num_experts).tolist()) if n]
        both = torch.cat([self._gate_up(e, part, exact) for (e, _), part in
                          zip(segments, xs.split([n for _, n in segments]), strict=True)])
        gate, up = both[:, : self.inner], both[:, self.inner :]
        if self.has_bias:
            gate, up = gate + self.gate_bias.index_select(0, experts), up + self.up_bias.index_select(0, experts)
        h = self.activation(gate, up).contiguous()
        ys = torch.cat([_matmul(part, *self._blocks_for("down", e, len(part), exact)[:2], self.inner, exact)
                        for (e, _), part in zip(segments, h.split([n for _, n in segments]), strict=True)])
        if self.has_bias:
            ys = ys + self.down_bias.index_select(0, experts)
        ys = ys * weights.reshape(-1).index_select(0, order).unsqueeze(1)
        return torch.zeros_like(rows).index_add_(0, tokens, ys)

    def _kernel_runs(self, rows: torch.Tensor) -> bool:
        """Whether the grouped kernel takes these 8-bit rows: built, on the CPU, the layer's
        activation one it computes, and each projection's type one with integer prompt kernels."""
        if not GROUPED_KERNEL or self.kernel_act is None or rows.device.type != "cpu" or not kernels.available():
            return False
        # A prompt's chunk, or a decoded token: on a 24-layer gpt-oss-20b shape a 4-sequence
        # decoding step measured 5.3 tok/s through it against 8.5 through the per-expert
        # decoding kernels (one run each, load ~1.8), so a batched step's few rows stay there.
        # A token alone is one call (four thread hand-offs) instead of the torch grouped path
        # (gpt-oss: some thirty small ops and 2k kernel calls a layer) or _one_token (k + 1
        # kernel calls and 2k small ops): 4-layer Qwen3-30B-A3B shape, 2 cores, load ~13,
        # 433 ms a token against 714 (interleaved, one process).
        if 1 < rows.shape[0] <= kernels.max_gemv_rows():
            return False
        if not hasattr(torch.ops.wren, "experts_grouped") or self.gate_raw.device.type != "cpu":
            return False
        return all(kernels.integer_prompt(self.qtypes[n]) for n in PROJECTIONS)

    def _grouped_kernel(self, rows: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                        exact_from: int = -1) -> torch.Tensor:
        """The same product as _grouped's torch path in one kernel call (csrc/experts.cpp):
        the pairs sorted by expert, x quantized once (rows from `exact_from` on: never, their
        products float32, as _grouped's exact path), each chosen expert's gate/up, the
        activation, down, and the weighted sum back to the tokens, multi-threaded inside."""
        biases = [getattr(self, f"{n}_bias") if self.has_bias else None for n in PROJECTIONS]
        return torch.ops.wren.experts_grouped.default(
            rows, ids, weights.float().contiguous(), self.gate_raw, self.up_raw, self.down_raw,
            [self.qtypes[n] for n in PROJECTIONS], self.inner, self.kernel_act, SWIGLU_ALPHA, SWIGLU_LIMIT, *biases,
            exact_from)

    def _gate_up(self, expert: int, x: torch.Tensor, exact: bool) -> torch.Tensor:
        """x [n, hidden] through one expert's gate and up projections: [n, 2 * inner]."""
        gate, g_type, n = self._blocks_for("gate", expert, len(x), exact)
        up, u_type, _ = self._blocks_for("up", expert, len(x), exact)
        if kernels.available() and gate.device.type == "cpu":
            return kernels.qlinear_parts(x, [gate, up], [g_type, u_type], [n, n], exact)
        return torch.cat((_matmul(x, gate, g_type, self.hidden, exact), _matmul(x, up, u_type, self.hidden, exact)), 1)

    def _one_token(self, x: torch.Tensor, weights: torch.Tensor, chosen: list[int], exact: bool) -> torch.Tensor:
        """A decoded token: the gate and up rows of all its k experts in one kernel call (one
        pass over just those rows), then each expert's down projection, summed by weight."""
        raws, types, sizes = [], [], []
        for expert in chosen:
            for name in ("gate", "up"):
                raw, qtype, rows = self.blocks(name, expert)
                raws.append(raw)
                types.append(qtype)
                sizes.append(rows)
        both = kernels.qlinear_parts(x, raws, types, sizes, exact).view(len(chosen), 2, self.inner)
        h = self.activation(both[:, 0], both[:, 1]).contiguous()
        out = torch.zeros_like(x)
        for i, expert in enumerate(chosen):
            down, d_type, rows = self.blocks("down", expert)
            out += weights[i] * _matmul(h[i : i + 1], down, d_type, self.inner, exact)
        return out

    def extra_repr(self) -> str:
        types = "/".join(ggml.type_name(self.qtypes[n]) for n in PROJECTIONS if n in self.qtypes)
        return f"experts={self.num_experts}, top_k={self.top_k}, inner={self.inner}, {types}"


def _exact_from(rows: int) -> int:
    """The first row that keeps float32 activations, QuantLinear's policy (quant.modules):
    every row under exact_activations, the last PROMPT_EXACT_TAIL of a prompt's chunk
    whose tail picks the first word, none of a long prompt's earlier chunk (its last rows
    pick no token: prompt_activations(exact_tail=False)) or of a decoding step."""
    state = modules._exact  # the same per-thread switch QuantLinear reads
    if modules.EXACT_EVERYWHERE or getattr(state, "on", False):
        return 0
    if getattr(state, "prompt", False) and getattr(state, "tail", True):
        return max(0, rows - modules.PROMPT_EXACT_TAIL)
    return rows


def _matmul(x: torch.Tensor, raw: torch.Tensor, qtype: int, cols: int, exact: bool) -> torch.Tensor:
    rows = raw.shape[0]
    if kernels.available() and raw.device.type == "cpu":
        run = kernels.qlinear_exact if exact else kernels.qlinear
        return run(x, raw, qtype, rows)
    return F.linear(x, ggml.dequantize(raw, qtype, cols))


def install_experts(block: nn.Module, state: dict) -> None:
    """Give the block's Experts the QTensors `state` holds for them ("feed_forward.<proj>_exps"),
    and their biases; their entries leave `state`, which gets the buffers' names instead,
    so the block's strict load still checks that nothing is missing."""
    experts = block.feed_forward
    if not isinstance(experts, Experts):
        return
    for name in PROJECTIONS:
        weight = state.pop(f"feed_forward.{name}_exps")
        if not isinstance(weight, QTensor):
            raise ValueError(f"mlp.experts.{name}_proj must be a 3-D weight of the file, got a dense tensor")
        experts.set_blocks(name, weight)
        state[f"feed_forward.{name}_raw"] = getattr(experts, f"{name}_raw")
        if experts.has_bias:
            rows = experts.hidden if name == "down" else experts.inner
            bias = state.pop(f"feed_forward.{name}_exps_bias").float().reshape(experts.num_experts, rows)
            experts.register_buffer(f"{name}_bias", bias)
            state[f"feed_forward.{name}_bias"] = bias


def experts_state(get: Callable[[str], Any], mlp: str, args: Any) -> dict:
    """The block-state entries of a MoE layer's MLP (names under `mlp`, "model.layers.N.mlp.")."""
    router, experts = f"{mlp}{args.router_name}.", f"{mlp}{args.experts_name}."
    state = {"feed_forward.router.weight": get(router + "weight")}
    if args.router_bias:
        state["feed_forward.router.bias"] = get(router + "bias")
    for name in PROJECTIONS:
        state[f"feed_forward.{name}_exps"] = get(f"{experts}{name}_proj.weight")
        if args.expert_bias:
            state[f"feed_forward.{name}_exps_bias"] = get(f"{experts}{name}_proj.bias")
    return state


__all__ = [
    "ACTIVATIONS",
    "ROUTERS",
    "Experts",
    "experts_state",
    "install_experts",
    "register_activation",
    "register_router",
    "softmax_topk",
    "topk_softmax",
]
