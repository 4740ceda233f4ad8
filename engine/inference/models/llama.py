"""Llama-shaped decoder for the torch backend, run for every family in engine.inference.families
(what differs between them, its flags on `Family`).

gpt-fast style: a config dataclass, weights built on `meta` and loaded with `assign=True`,
a static KV cache allocated once per load, and separate prefill / one-token decode paths.
Q/K/V and gate/up projections are fused at load time so a decoded token costs few ops.
Attention (with RoPE and the KV cache) is engine.inference.models.attention's, the one
implementation the prompt, decode, batched and CUDA-graph paths share.
"""

from __future__ import annotations

import copy
import math
import mmap
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ModelFileError
from ..families.family import ring_size
from ..quant.modules import QTensor, QuantEmbedding, QuantLinear, prompt_activations
from .args import ModelArgs
from .attention import Attention, ring_resumable, rms_norm, rope_tables, rows_as_decoded
from .experts import Experts, experts_state, install_experts
from .stages import Stages


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.w13 = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=args.mlp_bias)
        self.w2 = nn.Linear(args.intermediate_size, args.hidden_size, bias=args.mlp_bias)
        self.gelu = args.hidden_act != "silu"  # gemma3: GELU, tanh approximation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2((F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)) * up)


class Block(nn.Module):
    def __init__(self, args: ModelArgs, window: int | None, rope: bool = True) -> None:
        super().__init__()
        self.attention = Attention(args, window, rope)
        self.residual = args.residual_multiplier  # granite scales what each half adds
        self.feed_forward: FeedForward | Experts = Experts(args) if args.num_experts else FeedForward(args)
        # Where the norms sit (args.norm_placement): before attention and the MLP ("pre");
        # before and after both ("sandwich", gemma3); after both ("post", olmo2, whose
        # attention_norm and ffn_norm then take the outputs).
        self.placement = args.norm_placement
        self.attention_norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.ffn_norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        sandwich = self.placement == "sandwich"
        self.post_attention_norm = RMSNorm(args.hidden_size, args.rms_norm_eps) if sandwich else None
        self.post_ffn_norm = RMSNorm(args.hidden_size, args.rms_norm_eps) if sandwich else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int,
                slot: int = 0) -> torch.Tensor:
        h = x + self.attn_out(self.attention(self.attn_in(x), cos, sin, start, slot))
        return h + self.mlp(h)

    def attn_in(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.placement == "post" else self.attention_norm(x)

    def attn_out(self, a: torch.Tensor) -> torch.Tensor:
        """What the attention adds to the residual stream."""
        if self.placement == "post":
            a = self.attention_norm(a)
        elif self.post_attention_norm is not None:
            a = self.post_attention_norm(a)
        return a if self.residual == 1.0 else a * self.residual  # granite

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        """What the MLP adds to the residual stream h."""
        if self.placement == "post":
            out = self.ffn_norm(self.feed_forward(h))
        else:
            out = self.feed_forward(self.ffn_norm(h))
            if self.post_ffn_norm is not None:
                out = self.post_ffn_norm(out)
        return out if self.residual == 1.0 else out * self.residual

    def compiled_traits(self) -> tuple:
        """What a compiled block bakes in besides its tensors' layout (engine.inference.models.
        decode groups layers by it, precompile keys saved graphs by it): layers that differ in
        any of these need graphs of their own."""
        attention = self.attention
        # gemma3/olmo2: the norms' placement, GELU, whole-projection q/k norms, the sliding
        # layers' own RoPE tables and ring caches
        quirks = (self.placement, self.feed_forward.gelu, attention.qk_norm_whole,
                  attention.rope_cos is not None, attention.pos_slots is not None)
        return attention.window, attention.rotary_dim, attention.q_scale, self.residual, quirks

    def with_caches(self, k_cache: torch.Tensor, v_cache: torch.Tensor, pos_cache: torch.Tensor | None = None
                    ) -> Block:
        """A copy of this block sharing its weights but reading and writing the given
        caches as its slot 0 (a compiled one-token step takes the block as its input). A
        ring layer's positions (models.attention) are `pos_cache`, or a ring of the copy's own."""
        attention = copy.copy(self.attention)
        attention._buffers = dict(attention._buffers)
        attention.k_cache, attention.v_cache = k_cache, v_cache
        if attention.pos_slots is not None:
            if pos_cache is None:
                attention.pos_slots = torch.full_like(attention.pos_slots, -1)
                pos_cache = attention.pos_slots[0:1]
            attention.pos_cache = pos_cache
        block = copy.copy(self)
        block._modules = dict(self._modules)
        block._modules["attention"] = attention
        return block


class Transformer(nn.Module):
    # The rotary tables and the decode step's token buffer: set with the cache (None before).
    _cos: torch.Tensor
    _sin: torch.Tensor
    _token: torch.Tensor
    # Layer indices where a split model's next device starts (engine.inference.models.offload).
    cuts: tuple[int, ...] = ()

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        # Built on `meta` and assigned from the file: a given (empty) weight skips the random
        # init, whose meta path imports torch._dynamo (~1.5 s of CPU at every start).
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.hidden_size,
                                           _weight=torch.empty(args.vocab_size, args.hidden_size))
        self.layers = nn.ModuleList(Block(args, w, r) for w, r in zip(args.sliding_windows, args.rope_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.output = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.context_length = 0
        self.slots = 1
        self._cos = self._sin = self._token = None  # type: ignore[assignment]  # set with the cache
        # Set by engine.inference.models.decode to run decoded tokens through compiled
        # blocks; prefill stays eager (it is compute-bound, op overhead is amortised).
        self.decode_block: Callable | None = None
        # The same for batched steps (engine.inference.models.batched.batch_block's signature).
        self.batch_block: Callable | None = None
        self._slot_layers: dict[int, list[Block]] = {}
        self.stages = Stages([])  # runs of layers by device, set with the cache

    def setup_cache(self, context_length: int, slots: int = 1) -> None:
        """Allocate the KV cache (`slots` sequences of context_length) and RoPE tables
        once, on the weights' device and dtype."""
        args = self.args
        for layer in self.layers:
            attention = layer.attention
            # A sliding-window layer keeps a ring of its last positions (models.attention).
            size = ring_size(attention.window, context_length)
            shape = (slots, args.num_key_value_heads, size or context_length, args.head_dim)
            attention.pos_slots = torch.full((slots, size), -1, dtype=torch.long,
                                             device=layer.attention_norm.weight.device) if size else None
            attention.pos_cache = attention.pos_slots[0:1] if size else None
            # Each layer's cache on its layer's device, in its activation dtype (a model split
            # between a GPU and the CPU: engine.inference.models.offload).
            weight = layer.attention_norm.weight
            # Zeros, not empty: a masked key still multiplies its value by 0, and 0 * NaN
            # from stale memory would poison the row.
            attention.k_slots = _zeros_on_demand(shape, weight.dtype, weight.device)
            attention.v_slots = _zeros_on_demand(shape, weight.dtype, weight.device)
            attention.k_cache = attention.k_slots[0:1]
            attention.v_cache = attention.v_slots[0:1]
        self.slots = slots
        # Each other slot's view of the blocks, made here once (not lazily from two threads).
        self._slot_layers = {
            slot: [layer.with_caches(layer.attention.k_slots[slot : slot + 1],
                                     layer.attention.v_slots[slot : slot + 1],
                                     _row(layer.attention.pos_slots, slot)) for layer in self.layers]
            for slot in range(1, slots)
        }
        self.stages = Stages(self.layers, self.cuts)
        first = self.layers[0].attention_norm.weight if len(self.layers) else self.norm.weight
        self._cos, self._sin = rope_tables(args, context_length, first.device, first.dtype)
        self._sliding_tables(context_length)
        self._token = torch.zeros((1, 1), dtype=torch.long, device=_device_of(self.tok_embeddings))
        self.context_length = context_length

    def _sliding_tables(self, context_length: int) -> None:
        """gemma3's sliding layers turn by their own base (local_rope_theta), unscaled."""
        local = self.args.local_rope_theta
        tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        for layer in self.layers:
            attention, weight = layer.attention, layer.attention_norm.weight
            if local and attention.window is not None:
                if weight.device not in tables:
                    args = replace(self.args, rope_theta=local, rope_scaling=None)
                    tables[weight.device] = rope_tables(args, context_length, weight.device, weight.dtype)
                attention.rope_cos, attention.rope_sin = tables[weight.device]
            else:
                attention.rope_cos = attention.rope_sin = None

    def kv_resumable(self, start: int, slot: int = 0) -> bool:
        """Whether a sequence of `slot` may go on from position `start` (its earlier
        positions cached): false where a sliding-window ring lost what `start` sees."""
        return all(ring_resumable(layer.attention, start, slot) for layer in self.layers
                   if layer.attention.pos_slots is not None)

    def export_kv(self, n: int, slot: int = 0) -> tuple[list, int]:
        """Copies of the first `n` cached positions of every layer in `slot` (a ring layer:
        its whole ring and the positions it holds), and their size in bytes."""
        state = [layer.attention.export_slot(n, slot) for layer in self.layers]
        return state, sum(tensor.nbytes for saved in state for tensor in saved)

    def import_kv(self, state: list, n: int, slot: int = 0) -> None:
        """Put a state from `export_kv` back as the first `n` positions of `slot`."""
        for layer, saved in zip(self.layers, state, strict=True):
            layer.attention.import_slot(saved, n, slot)

    def layers_for(self, slot: int) -> Sequence[Block]:
        """The blocks as seen from `slot`: for slot 0 the model's own, for another slot
        copies whose slot-0 caches are that slot's."""
        return self.layers if slot == 0 else self._slot_layers[slot]

    def forward(self, ids: torch.Tensor, start: int, last_only: bool = True,
                block: Callable | None = None, slot: int = 0) -> torch.Tensor:
        """Logits for ids [1, L] at positions start..start+L-1 of `slot`: [vocab] for the
        last position, or [L, vocab] with last_only=False. `block(layer, h, cos, sin,
        start)` replaces calling each layer (given `layers_for(slot)`)."""
        length = ids.shape[1]
        if start < 0 or start + length > self.context_length:
            raise ValueError(
                f"positions {start}..{start + length - 1} are outside the "
                f"{self.context_length}-token KV cache"
            )
        cos = self._cos[start : start + length]
        sin = self._sin[start : start + length]
        h = self.embed(ids)
        if block is None:
            h = self.stages.run(self.layers, h, (cos, sin, start, slot), _call_layer)
        else:
            h = self.stages.run(self.layers_for(slot), h, (cos, sin, start), block)
        return self.head(h[0, -1] if last_only else h[0])

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits for the last layer's hidden states (moved to the head's device and dtype)."""
        weight = self.norm.weight
        logits = self.output(self.norm(h.to(weight.device, weight.dtype)))
        cap = self.args.final_logit_softcap
        return logits if not cap else torch.tanh(logits / cap) * cap

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The hidden states the first layer takes for ids (granite scales them)."""
        h = self.tok_embeddings(ids)
        return h if self.args.embedding_multiplier == 1.0 else h * self.args.embedding_multiplier

    def prefill(self, ids: list[int] | torch.Tensor, start: int, slot: int = 0, final: bool = True) -> torch.Tensor:
        """Logits after the last of `ids`; `final` False: a long prompt's earlier chunk,
        whose last rows pick no token, so none keep float32 activations (prompt_activations)."""
        ids = torch.as_tensor(ids, dtype=torch.long, device=self._token.device).view(1, -1)
        with prompt_activations(exact_tail=final):  # the prompt's last logits pick the first word: see there
            return self.forward(ids, start, slot=slot)

    def verify(self, ids: torch.Tensor, start: int, slot: int = 0) -> torch.Tensor:
        """Logits [L, vocab] after each of ids [1, L] (drafted tokens checked in one pass:
        engine.inference.speculative). The linears read each weight once for all rows and
        give each row a decoded token's bits (their kernels' rows are independent); the
        attention runs row by row as decoding does (attention.rows_as_decoded). Eager: a
        compiled decode step's fused loops round differently (TorchModel.verifies_exactly)."""
        with rows_as_decoded():
            return self.forward(ids, start, last_only=False, slot=slot)

    def decode_one(self, token: int, pos: int, slot: int = 0) -> torch.Tensor:
        self._token.fill_(token)
        return self.forward(self._token, pos, block=self.decode_block, slot=slot)


def _row(slots: torch.Tensor | None, slot: int) -> torch.Tensor | None:
    return None if slots is None else slots[slot : slot + 1]


def _call_layer(layer: Block, h: torch.Tensor, *inputs) -> torch.Tensor:
    return layer(h, *inputs)


def _device_of(module: nn.Module) -> torch.device:
    """Where a module's first tensor lives (an embedding's table, quantized or not)."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def _zeros_on_demand(shape: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """Zeros whose memory is committed as it is written. On a CPU an anonymous mapping
    reads as zeros and the OS backs each page on its first write, so every slot's
    full-context cache costs what its conversations have used (torch.zeros would touch,
    and so commit, all of it: ~380 MB a slot for the starter model at 8k tokens). (On
    Windows the whole mapping counts against the commit limit at once; the pages it uses
    still come as they are written.)"""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, device=device, dtype=dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    region = mmap.mmap(-1, max(nbytes, 1))  # page-aligned, so aligned for any vector load
    return torch.frombuffer(region, dtype=torch.uint8, count=nbytes).view(dtype).view(shape)


def build_model(
    args: ModelArgs,
    get: Callable[[str], torch.Tensor | QTensor],
    *,
    tied: bool,
    context_length: int | None = None,
    prepare: Callable[[nn.Module], object] | None = None,
    slots: int = 1,
    dtype: torch.dtype = torch.float32,
) -> Transformer:
    """Build the model from HF-named tensors and allocate its KV cache. `get(name)` returns
    a dense tensor already on the target device and dtype, or a 2-D weight as a QTensor
    (the file's blocks, docs/weights.md), which becomes a QuantLinear / QuantEmbedding.
    `dtype` is the activation dtype quantized embeddings produce.

    `prepare(module)` runs on each block as soon as its weights are in, then on the whole
    model: weight-only quantization hooks in there, so the full-precision weights of all
    blocks never sit in memory at once."""
    with torch.device("meta"):
        model = Transformer(args)
    try:
        for i, layer in enumerate(model.layers):
            state = _layer_state(args, get, i)
            install_experts(layer, state)  # a mixture's experts stay the file's 3-D blocks
            _install_quantized(layer, state)
            layer.load_state_dict(state, strict=True, assign=True)
            if prepare is not None:
                prepare(layer)
        embeddings = get("model.embed_tokens.weight")
        if isinstance(embeddings, QTensor):
            model.tok_embeddings = QuantEmbedding(embeddings, dtype)
        else:
            model.tok_embeddings.load_state_dict({"weight": embeddings}, assign=True)
        norm = get("model.norm.weight")
        # Dividing the logits (granite) is dividing the final norm's weight: no step at run time.
        if args.logits_scaling != 1.0:
            if isinstance(norm, QTensor):
                raise ValueError("the final norm weight must be dense, not quantized blocks")
            norm = norm / args.logits_scaling
        model.norm.load_state_dict({"weight": norm}, assign=True)
        head = embeddings if tied else get("lm_head.weight")
        if isinstance(head, QTensor):
            # A tied head shares the embedding's bytes. Its logits pick the next token, where
            # 8-bit rounded activations flipped the starter's first word on 2 of 5 reference
            # prompts: it multiplies float32 activations.
            model.output = QuantLinear([head], exact=True)
        else:
            model.output.load_state_dict({"weight": head}, assign=True)
    except (RuntimeError, ValueError) as exc:  # shapes in the files disagree with config.json
        raise ModelFileError(f"weights do not match config.json: {exc}") from None
    if prepare is not None:
        prepare(model)
    model.requires_grad_(False)
    model.setup_cache(context_length or args.default_context_length, slots)
    return model.eval()


def _install_quantized(layer: nn.Module, state: dict) -> None:
    """Swap each linear whose weight came as QTensors for a QuantLinear over them; its
    entries leave `state`, which then holds only dense tensors."""
    for key in [k for k, v in state.items() if isinstance(v, (QTensor, tuple))]:
        path = key.removesuffix(".weight")
        parts = state.pop(key)
        parts = list(parts) if isinstance(parts, tuple) else [parts]
        module = QuantLinear(parts, state.pop(path + ".bias", None))
        linear = layer.get_submodule(path)
        if (linear.in_features, linear.out_features) != (module.in_features, module.out_features):
            raise ValueError(
                f"{path} is {module.out_features}x{module.in_features}, config.json says "
                f"{linear.out_features}x{linear.in_features}"
            )
        parent, _, name = path.rpartition(".")
        setattr(layer.get_submodule(parent) if parent else layer, name, module)
        # its tensors, so the strict load below still checks that nothing is missing
        state.update({f"{path}.{key}": buf for key, buf in module.named_buffers() if buf is not None})


def _fuse(parts: list) -> torch.Tensor | tuple:
    """Q/K/V or gate/up as one weight: dense ones concatenated, QTensors kept as parts."""
    if any(isinstance(p, QTensor) for p in parts):
        if not all(isinstance(p, QTensor) for p in parts):
            raise ValueError("a fused weight mixes quantized and dense parts")
        return tuple(parts)
    return torch.cat(parts)


# Each placement's norms (Block's names) and the HF checkpoint's names for them.
_NORMS = {
    "pre": {"attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"},
    "sandwich": {"attention_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
                 "ffn_norm": "pre_feedforward_layernorm", "post_ffn_norm": "post_feedforward_layernorm"},
    "post": {"attention_norm": "post_attention_layernorm", "ffn_norm": "post_feedforward_layernorm"},
}


def _layer_state(args: ModelArgs, get: Callable[[str], torch.Tensor | QTensor], i: int) -> dict:
    """Block i's tensors under our fused names: q/k/v and gate/up together."""
    hf = f"model.layers.{i}."
    attn, mlp = hf + "self_attn.", hf + "mlp."
    sd: dict = {
        **{f"{ours}.weight": get(f"{hf}{theirs}.weight") for ours, theirs in _NORMS[args.norm_placement].items()},
        # phi3 stores them fused already, in the same order (q, k, v; gate, up)
        "attention.wqkv.weight": get(attn + "qkv_proj.weight") if args.fused_projections
        else _fuse([get(f"{attn}{x}_proj.weight") for x in "qkv"]),
        "attention.wo.weight": get(attn + "o_proj.weight"),
    }
    if args.num_experts:
        sd |= experts_state(get, mlp, args)
    else:
        sd["feed_forward.w13.weight"] = get(mlp + "gate_up_proj.weight") if args.fused_projections else _fuse(
            [get(mlp + "gate_proj.weight"), get(mlp + "up_proj.weight")])
        sd["feed_forward.w2.weight"] = get(mlp + "down_proj.weight")
    if args.qkv_bias:
        sd["attention.wqkv.bias"] = torch.cat([get(f"{attn}{x}_proj.bias") for x in "qkv"])
    if args.o_bias:
        sd["attention.wo.bias"] = get(attn + "o_proj.bias")
    if args.attention_sinks:  # gpt-oss
        sd["attention.sinks"] = get(attn + "sinks.weight")
    if args.mlp_bias:
        sd["feed_forward.w13.bias"] = torch.cat([get(mlp + "gate_proj.bias"), get(mlp + "up_proj.bias")])
        sd["feed_forward.w2.bias"] = get(mlp + "down_proj.bias")
    if args.qk_norm:
        q_norm, k_norm = get(attn + "q_norm.weight"), get(attn + "k_norm.weight")
        if isinstance(q_norm, QTensor) or isinstance(k_norm, QTensor):
            raise ValueError("the q/k norm weights must be dense, not quantized blocks")
        sd["attention.qk_norm"] = torch.cat([q_norm, k_norm]) if args.qk_norm_whole else torch.cat(
            [q_norm.expand(args.num_attention_heads, -1), k_norm.expand(args.num_key_value_heads, -1)]
        )
    return sd
