"""Attention for Wren's torch models: the one implementation every path runs.

Three paths attend: a sequence's prompt and its one-token steps (`Attention.forward`, from
llama.Transformer, and compiled per layer by engine.inference.models.decode), the batched
step of several KV slots (`Attention.forward_rows`, from batched.batch_block, compiled
too), and the fixed-shape step CUDA graphs capture (cuda_graphs.static_decode_step, through
batch_block). They differ only in how positions arrive (a Python int start, or one tensor
position per row) and so in how keys reach the cache. Everything else is written here
once: the Q/K/V split, the query-key norm, RoPE (its tables and their scaling), which keys
a query sees (causal, sliding windows), grouped-query attention and the output projection.
tests/engine/inference/test_attention.py fails if attention or RoPE is computed elsewhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ... import switches
from ..families.family import RING_SLACK
from ..quant import kernels

if TYPE_CHECKING:
    from .args import ModelArgs


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    # Eager float32 on the CPU: Wren's one-call kernel (torch's eager rms_norm dispatches
    # several small ops). Compiled graphs fuse torch's own, unless kernels.ATTEND_ONE asks
    # for the kernel there too, as an opaque op: inductor's fused norm rounds differently
    # (~5e-7), and a verify step's rows then get a compiled decoded token's bits.
    if (kernels.RMS_NORM and weight is not None and x.dtype == torch.float32 and weight.dtype == torch.float32
            and x.device.type == "cpu" and weight.device.type == "cpu"
            and (kernels.ATTEND_ONE or not torch.compiler.is_compiling())):
        return kernels.rms_norm(x, weight, eps)
    # One fused op; for bf16 it accumulates in float32 and rounds once, which tracks the
    # float32 reference at least as closely as HF's normalise-cast-then-scale.
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


# --- RoPE ---------------------------------------------------------------------------------

def rope_inv_freq(args: ModelArgs, context_length: int = 0) -> torch.Tensor:
    """Each rotated pair's angle per position (float64), with the config's rope scaling."""
    dim = rotary_dim(args)
    inv = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = args.rope_scaling
    if scaling is None:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "longrope":
        return inv / _longrope_factors(scaling, context_length)
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv / factor
    if kind == "yarn":
        return _yarn_inv_freq(args, scaling, inv)
    # llama3: long wavelengths are slowed by `factor`, short ones kept, the band between
    # interpolated, so the model keeps local precision while reaching longer contexts.
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    old_len = float(scaling.get("original_max_position_embeddings", 8192))
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def rotary_dim(args: ModelArgs) -> int:
    """How many of each head's dimensions RoPE turns, the first ones (phi3: not all)."""
    return int(args.head_dim * args.partial_rotary_factor)


def _longrope_factors(scaling, context_length: int) -> torch.Tensor:
    """LongRoPE (phi3) slows each frequency by its own factor: the long table's for a cache
    longer than the pretraining length, else the short one's. The choice is made once for
    the cache, as llama.cpp makes it for its context (transformers makes it per forward pass
    from the sequence's length, so the two agree on sequences past the pretraining length)."""
    long = context_length > int(scaling["original_max_position_embeddings"])
    return torch.tensor(scaling["long_factor" if long else "short_factor"], dtype=torch.float64)


def _yarn_inv_freq(args: ModelArgs, scaling, inv: torch.Tensor) -> torch.Tensor:
    """YaRN (gpt-oss): frequencies turning fewer than beta_slow times over the pretraining
    length are slowed by `factor`, those turning more than beta_fast times are kept, and a
    linear ramp over the pair index blends the two between (transformers' formula)."""
    dim, base = rotary_dim(args), args.rope_theta
    factor = float(scaling["factor"])
    original = float(scaling.get("original_max_position_embeddings") or args.max_position_embeddings)

    def pair_of(rotations: float) -> float:  # the pair index that turns `rotations` times
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(float(scaling.get("beta_fast") or 32)), pair_of(float(scaling.get("beta_slow") or 1))
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / ((high - low) or 0.001)).clamp(0, 1)
    return inv / factor * ramp + inv * (1 - ramp)


def rope_attention_factor(args: ModelArgs) -> float:
    """The scale of the rotated part of q and k. LongRoPE: sqrt(1 + ln(s) / ln(original)) for
    a context stretched s times past the pretraining length (or the config's own). YaRN:
    0.1 ln(factor) + 1 (or the config's own)."""
    scaling = args.rope_scaling
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
    if kind == "yarn":
        assert scaling is not None
        if scaling.get("attention_factor") is not None:
            return float(scaling["attention_factor"])
        return _yarn_mscale(float(scaling["factor"]), scaling.get("mscale"), scaling.get("mscale_all_dim"))
    if not scaling or kind != "longrope":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    original = int(scaling["original_max_position_embeddings"])
    factor = args.max_position_embeddings / original
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def _yarn_mscale(factor: float, mscale, mscale_all_dim) -> float:
    def get(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        return get(factor, float(mscale)) / get(factor, float(mscale_all_dim))
    return get(factor)


def rope_tables(args: ModelArgs, context_length: int, device, dtype: torch.dtype
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [positions, 1 (heads), rotary_dim] for `apply_rope`, computed in float64
    and rounded once to `dtype`. The sin table carries rotate-half's minus sign."""
    freqs = torch.outer(torch.arange(context_length, dtype=torch.float64), rope_inv_freq(args, context_length))
    angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    scale = rope_attention_factor(args)
    cos = (angles.cos() * scale).to(device=device, dtype=dtype)
    sin = angles.sin() * scale
    half = sin.shape[-1] // 2
    sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).to(device=device, dtype=dtype)
    return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # rotate-half as a swap of the halves; its minus sign lives in the sin table.
    swapped = x.unflatten(-1, (2, x.shape[-1] // 2)).flip(-2).flatten(-2)
    return x * cos + swapped * sin


# --- which keys a query sees ----------------------------------------------------------------

def visible(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """True where a query at q_pos sees the key at k_pos (broadcast against each other):
    earlier or the same position, and inside the sliding window if there is one."""
    seen = k_pos <= q_pos
    if window is not None:
        seen &= k_pos > q_pos - window
    return seen


def first_visible_key(start: int, window: int | None) -> int:
    """The oldest key position a query at `start` (or later) can see."""
    return 0 if window is None else max(0, start - window + 1)


@functools.lru_cache(maxsize=4)
def causal_mask(length: int, start: int, lo: int, window: int | None, device, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [length, keys]: 0 where a query sees a key, -inf elsewhere. Rows are
    query positions start.., columns key positions lo..start+length-1.

    Every layer of a forward pass asks for the same mask (per window size), so it is built
    once, not once a layer; and as a float mask SDPA uses it as is, where a boolean one is
    converted in every layer. For a 256-token chunk at position ~4,000 on the starter model
    that is 3-8% of the chunk (bench/prefill.py)."""
    q_pos = torch.arange(start, start + length, device=device)[:, None]
    k_pos = torch.arange(lo, start + length, device=device)[None, :]
    mask = torch.zeros((length, k_pos.shape[1]), dtype=dtype, device=device)
    return mask.masked_fill_(~visible(q_pos, k_pos, window), float("-inf"))


# --- the attention product ------------------------------------------------------------------

def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
           mask: torch.Tensor | None = None, causal: bool = False,
           sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Grouped-query attention of q [B, L, heads, head_dim] over keys and values
    [B, kv_heads, T, head_dim]; returns [B, L, heads, head_dim]. `mask` is None (every key
    visible), a boolean [B or 1, 1, L, T] (True: visible) or an additive float [L, T];
    `causal` (with no mask) makes query i see keys 0..i. `sinks` [heads] (gpt-oss): each
    head's learned logit joins its softmax as one more column, whose weight is then
    dropped, so a query may give its keys less than all of its attention."""
    if sinks is not None:
        return _sink_attend(q, keys, values, mask, causal, sinks)
    if q.shape[1] == 1 and q.device.type == "cpu":
        return _one_query(q, keys, values, mask)
    if (q.shape[1] <= _SHORT_QUERIES and q.device.type == "cpu" and not torch.compiler.is_compiling()
            and (mask is None or mask.dtype != torch.bool)):
        return _short_block(q, keys, values, mask, causal)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask,
                                         is_causal=causal, enable_gqa=True)
    return out.transpose(1, 2)


# Prompt chunks in float32 on the CPU attend through Wren's tiled kernel (csrc/attend.cpp);
# WREN_ATTEND=sdpa keeps torch's scaled_dot_product_attention (A/B measurements, users).
_CHUNK_KERNEL = switches.setting("WREN_ATTEND") not in {"sdpa", *switches.OFF}


def chunk_kernel(q: torch.Tensor, keys: torch.Tensor, sinks: torch.Tensor | None) -> bool:
    """Whether a sequence's prompt chunk q [1, L, heads, D] attends through Wren's tiled
    kernel (attend_positions): float32 on the CPU, eager, longer than _SHORT_QUERIES, no
    sinks, and a table with the kernel (x86); else attend() and SDPA, as on CUDA and in bf16."""
    return (q.shape[1] > _SHORT_QUERIES and q.shape[0] == 1 and sinks is None and q.device.type == "cpu"
            and q.dtype == torch.float32 and keys.dtype == torch.float32 and not torch.compiler.is_compiling()
            and chunk_kernel_ready())


def chunk_kernel_ready() -> bool:
    """Whether wren::attend_chunk runs on the kernel table in use (x86 AVX2 and AVX-512; the
    scalar and NEON tables have none) and WREN_ATTEND=sdpa did not turn it off."""
    return (_CHUNK_KERNEL and kernels.available() and hasattr(torch.ops.wren, "attend_supported")
            and bool(torch.ops.wren.attend_supported()))


def attend_positions(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int, lo: int,
                     window: int | None) -> torch.Tensor:
    """attend() for one sequence's chunk by positions: q [1, L, heads, D] at start.. over keys
    and values [1, kv_heads, T, D] at lo.. (causal, and the sliding window if any), through
    Wren's tiled online-softmax kernel: key blocks no query of a tile sees are skipped and
    only the diagonal and window edges are masked, where SDPA with a float mask computes and
    masks every block (csrc/attend.cpp)."""
    out = torch.ops.wren.attend_chunk.default(q[0], keys[0], values[0], start, lo, window or 0,
                                              q.shape[-1] ** -0.5)
    return out.unsqueeze(0)


def _one_query(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               mask: torch.Tensor | None) -> torch.Tensor:
    # torch's CPU flash-attention kernel is 5-15x slower than two small bmm's for one
    # bf16 query over a few hundred keys (query heads grouped over their kv head); for
    # float32 the two are even eagerly, but compiled, the fused loop below saves ~2 ms
    # a token on the starter model (30 layers).
    # Scores stay float32: rounded to bf16 (0.125 apart near 20) they shift softmax
    # weights by several percent, enough to change the starter model's first token.
    batch, _, heads, head_dim = q.shape
    kv_heads = keys.shape[1]
    q = q.reshape(batch, kv_heads, heads // kv_heads, head_dim).float() * head_dim**-0.5
    if mask is None and kernels.ATTEND_ONE and keys.dtype == torch.float32 and values.dtype == torch.float32:
        # Wren's kernel, compiled or not: a verify step's rows then get the compiled
        # decode step's bits (engine.inference.speculative).
        out = torch.ops.wren.attend_one.default(q, keys, values)
    elif torch.compiler.is_compiling():
        # Products and sums that inductor fuses (with a batched step's gather of its slots'
        # rows) into one loop; the bmm form would be pattern-matched back into the slow
        # flash-attention kernel.
        scores = (q[..., None, :] * keys[:, :, None, :, :]).sum(-1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = (probs[..., None] * values[:, :, None, :, :]).sum(-2)
    elif keys.numel() <= _ONE_THREAD_KEYS and torch.get_num_threads() > 1:
        # A short span: the three ops take microseconds each, and on more threads each pays a
        # hand-off to the others (on a busy machine, often a scheduler slice).
        with _one_thread():
            out = _bmm_softmax_bmm(q, keys, values, mask)
    else:
        out = _bmm_softmax_bmm(q, keys, values, mask)
    return out.to(values.dtype).view(batch, 1, heads, head_dim)


if kernels.available() and hasattr(torch.ops.wren, "attend_one"):  # a stale build lacks it
    @torch.library.register_fake("wren::attend_one")
    def _attend_one_fake(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        # q [B, kv_heads, group, D] (scaled) over keys and values [B, kv_heads, T, D]: q's
        # shape. The kernel (csrc/ops.cpp) sums in a fixed order whatever the thread count.
        return q.new_empty(q.shape)


def _sink_attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                 causal: bool, sinks: torch.Tensor) -> torch.Tensor:
    """attend() with attention sinks, in float32 for any number of queries: each kv head's
    query heads stacked into one matrix against its keys (two bmm's: no copy of the keys per
    query head, as a broadcast matmul makes), the sink logit appended to each row of scores
    before the softmax and its column dropped after (SDPA has no place for it)."""
    if q.shape[1] == 1 and keys.numel() <= _ONE_THREAD_KEYS and torch.get_num_threads() > 1:
        with _one_thread():  # a decoding step over a short span: see _one_query
            return _sink_block(q, keys, values, mask, causal, sinks)
    return _sink_block(q, keys, values, mask, causal, sinks)


def _sink_block(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                causal: bool, sinks: torch.Tensor) -> torch.Tensor:
    batch, length, heads, head_dim = q.shape
    kv_heads, span = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    stacked = (q.reshape(batch, length, kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
               .reshape(batch * kv_heads, group * length, head_dim).float() * head_dim**-0.5)
    scores = torch.bmm(stacked, keys.reshape(batch * kv_heads, span, head_dim).float().transpose(1, 2))
    scores = scores.view(batch, kv_heads, group, length, span)
    if causal and mask is None:
        mask = causal_mask(length, 0, 0, None, q.device, torch.float32)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask[:, :, None], float("-inf"))
    elif mask is not None:
        scores = scores + mask
    sink = sinks.float().view(1, kv_heads, group, 1, 1).expand(batch, -1, -1, length, 1)
    probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :span]
    out = torch.bmm(probs.reshape(batch * kv_heads, group * length, span),
                    values.reshape(batch * kv_heads, span, head_dim).float())
    out = out.view(batch, kv_heads, group, length, head_dim).permute(0, 3, 1, 2, 4)
    return out.reshape(batch, length, heads, head_dim).to(values.dtype)


# Up to this many queries (a short message after a cached history, a prompt's last piece)
# attend on a CPU through two batched products instead of torch's flash-attention kernel,
# which is built for long blocks: 18 queries over 2,139 keys of the starter (9 heads over
# 3), 2 threads, 1.9 ms a layer in the kernel against 1.1 ms; 64 over 4,096 about even, 200
# over 2,300 four times slower (so longer blocks keep the kernel).
_SHORT_QUERIES = 32


def _short_block(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                 mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """attend() for a few queries: each kv head's query heads stacked into one matrix, scores
    and softmax in float32, then the values."""
    batch, length, heads, head_dim = q.shape
    kv_heads, span = keys.shape[1], keys.shape[2]
    group = heads // kv_heads
    stacked = (q.reshape(batch, length, kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
               .reshape(batch * kv_heads, group * length, head_dim).float() * head_dim**-0.5)
    scores = torch.bmm(stacked, keys.reshape(batch * kv_heads, span, head_dim).float().transpose(1, 2))
    scores = scores.view(batch * kv_heads, group, length, span)
    if causal:  # query i sees keys 0..i (the whole prompt is the block)
        mask = causal_mask(length, 0, 0, None, q.device, torch.float32)
    if mask is not None:
        scores = scores + mask
    probs = torch.softmax(scores, dim=-1).view(batch * kv_heads, group * length, span)
    out = torch.bmm(probs, values.reshape(batch * kv_heads, span, head_dim).float())
    out = out.view(batch, kv_heads, group, length, head_dim).permute(0, 3, 1, 2, 4)
    return out.reshape(batch, length, heads, head_dim).to(values.dtype)


# Cached key elements (all rows and heads) up to which an eager one-query step runs on one
# thread: 256 positions of Llama-3.2-1B's 8 x 64 (1 MB of float32 keys and values).
# Measured (bench: 1B Q4_0, 2 threads, AVX2 kernels): see README's Performance section.
_ONE_THREAD_KEYS = 1 << 17


@contextlib.contextmanager
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _bmm_softmax_bmm(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                     mask: torch.Tensor | None) -> torch.Tensor:
    batch, kv_heads, _, head_dim = q.shape
    span = keys.shape[2]
    flat_q = q.reshape(batch * kv_heads, -1, head_dim)
    flat_k = keys.reshape(batch * kv_heads, span, head_dim).float()
    scores = torch.bmm(flat_q, flat_k.transpose(1, 2)).view(batch, kv_heads, -1, span)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).view(batch * kv_heads, -1, span)
    return torch.bmm(probs, values.reshape(batch * kv_heads, span, head_dim).float())


# Set while verifying drafted tokens (engine.inference.speculative): a block of rows then
# attends row by row as decoded tokens do. Multi-query attention sums in another order
# (one bmm over all rows, masked), a difference of ~1e-7 that 8-bit activation rounding
# downstream grows into changed greedy picks.
_ROWS_AS_DECODED: contextvars.ContextVar[bool] = contextvars.ContextVar("rows_as_decoded", default=False)


@contextlib.contextmanager
def rows_as_decoded():
    """Within: Attention.forward attends each of a block's rows as a one-token step."""
    token = _ROWS_AS_DECODED.set(True)
    try:
        yield
    finally:
        _ROWS_AS_DECODED.reset(token)


# --- the module -----------------------------------------------------------------------------

class Attention(nn.Module):
    """One decoder layer's self-attention with its KV cache (one cache per KV slot)."""

    # Allocated with the model's cache (None until then; every path below runs after it).
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    k_slots: torch.Tensor
    v_slots: torch.Tensor
    pos_slots: torch.Tensor  # a sliding layer's ring only (None for the others)

    def __init__(self, args: ModelArgs, window: int | None, rope: bool = True) -> None:
        super().__init__()
        # RoPE turns the first rotary_dim of each head (all of it but in phi3; none in
        # smollm3's every fourth layer).
        self.rotary_dim = rotary_dim(args) if rope else 0
        # attend() scales scores by 1/sqrt(head_dim): a family's own scale (granite's
        # attention_multiplier) reaches it through q.
        self.q_scale = args.attention_multiplier * args.head_dim**0.5 if args.attention_multiplier else 1.0
        self.n_heads = args.num_attention_heads
        self.n_kv = args.num_key_value_heads
        self.head_dim = args.head_dim
        self.q_size, self.kv_size = args.q_size, args.kv_size
        self.window = window
        self.eps = args.rms_norm_eps
        self.wqkv = nn.Linear(args.hidden_size, args.q_size + 2 * args.kv_size, bias=args.qkv_bias)
        self.wo = nn.Linear(args.q_size, args.hidden_size, bias=args.o_bias)
        # qwen3's q_norm and k_norm, stacked per head so one op normalises q and k together.
        # olmo2's norm all of q and all of k instead: [q_size + kv_size].
        self.qk_norm_whole = args.qk_norm_whole
        norm_shape = (args.q_size + args.kv_size,) if args.qk_norm_whole else (self.n_heads + self.n_kv, self.head_dim)
        self.qk_norm = nn.Parameter(torch.empty(norm_shape), requires_grad=False) if args.qk_norm else None
        # gpt-oss: each query head's sink logit (attend's `sinks`)
        self.sinks = nn.Parameter(torch.empty(self.n_heads), requires_grad=False) if args.attention_sinks else None
        # Buffers, not plain attributes: a compiled block then takes them as inputs, so
        # one compiled graph serves every layer.
        self.register_buffer("k_cache", None, persistent=False)
        self.register_buffer("v_cache", None, persistent=False)
        # Every slot's cache [slots, n_kv, T, head_dim]; k_cache/v_cache are views of slot 0,
        # so the single-sequence paths (compiled, CUDA graphs, prefix export) never change.
        self.k_slots = None  # type: ignore[assignment]  # see the class annotations
        self.v_slots = None  # type: ignore[assignment]
        # gemma3's sliding layers turn by their own RoPE base: their tables [T, 1, dim],
        # set with the cache (None: the model's, passed in).
        self.register_buffer("rope_cos", None, persistent=False)
        self.register_buffer("rope_sin", None, persistent=False)
        # A sliding layer whose cache is a ring of its last positions (the rings below):
        # each entry's position, -1 for none [slots, size]; pos_cache is slot 0's.
        self.register_buffer("pos_cache", None, persistent=False)
        self.pos_slots = None  # type: ignore[assignment]  # see the class annotations

    def _norm_heads(self, qk: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """Each head of q and k ([..., heads + kv_heads, head_dim]) RMS-normed, times its
        row of qk_norm. Where every q head shares one row and every k head another (the
        families' q_norm and k_norm, stacked), eager float32 on the CPU: two calls of Wren's
        norm kernel. torch's weightless rms_norm and a multiply took ~120 us a layer for one
        decoded token (5 ms a token on Qwen3-30B-A3B's 48 layers)."""
        if (kernels.RMS_NORM and qk.dtype == torch.float32 and qk.device.type == "cpu" and norm.dtype == torch.float32
                and norm.device.type == "cpu" and not torch.compiler.is_compiling()):
            shared = self._shared_qk_rows(norm)
            if shared is not None:
                heads = self.n_heads
                return torch.cat((kernels.rms_norm(qk[..., :heads, :], shared[0], self.eps),
                                  kernels.rms_norm(qk[..., heads:, :], shared[1], self.eps)), dim=-2)
        return rms_norm(qk, None, self.eps) * norm

    def _shared_qk_rows(self, norm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """norm's (qk_norm's) q row and k row where every head's row is one of those two, else
        None (worked out once per weight tensor)."""
        key = (norm.data_ptr(), norm.device.type, norm.dtype)
        cached = self.__dict__.get("_qk_rows")
        if cached is None or cached[0] != key:
            q_row, k_row = norm[0], norm[self.n_heads]
            same = bool((norm[: self.n_heads] == q_row).all()) and bool((norm[self.n_heads :] == k_row).all())
            cached = (key, (q_row.contiguous(), k_row.contiguous()) if same else None)
            self.__dict__["_qk_rows"] = cached
        return cached[1]

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, L, heads, head_dim], k and v [B, L, kv_heads, head_dim] for x [B, L, hidden],
        q and k normed (qwen3) and rotated by cos/sin (broadcast against [B, L, heads, dim])."""
        batch, length = x.shape[0], x.shape[1]
        qkv = self.wqkv(x)
        split = self.q_size + self.kv_size
        if self.qk_norm_whole and self.qk_norm is not None:
            q_size, norm = self.q_size, self.qk_norm
            qkv = torch.cat((rms_norm(qkv[..., :q_size], norm[:q_size], self.eps),
                             rms_norm(qkv[..., q_size:split], norm[q_size:], self.eps), qkv[..., split:]), dim=-1)
        qk = qkv[..., :split].view(batch, length, self.n_heads + self.n_kv, self.head_dim)
        if self.qk_norm is not None and not self.qk_norm_whole:
            qk = self._norm_heads(qk, self.qk_norm)
        if self.rotary_dim == self.head_dim:
            qk = apply_rope(qk, cos, sin)
        elif self.rotary_dim:
            turned = self.rotary_dim
            qk = torch.cat((apply_rope(qk[..., :turned], cos, sin), qk[..., turned:]), dim=-1)
        v = qkv[..., split:].view(batch, length, self.n_kv, self.head_dim)
        q = qk[:, :, : self.n_heads]
        return q if self.q_scale == 1.0 else q * self.q_scale, qk[:, :, self.n_heads :], v

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """The output projection of attend's result [B, L, heads, head_dim]."""
        return self.wo(out.reshape(out.shape[0], out.shape[1], self.q_size))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int,
                slot: int = 0) -> torch.Tensor:
        """One sequence: x [1, L, hidden] at positions start..start+L-1 of `slot`."""
        length = x.shape[1]
        if self.rope_cos is not None:
            cos, sin = self.rope_cos[start : start + length], self.rope_sin[start : start + length]
        q, k, v = self.project(x, cos, sin)
        if length > 1 and _ROWS_AS_DECODED.get():
            # Each row as the one-token step would: its key written, then one query over the
            # span up to its own position (the same ops, so the same bits, as decoding it).
            rows = [self._attend(q[:, i : i + 1], k[:, i : i + 1], v[:, i : i + 1], start + i, slot)
                    for i in range(length)]
            return self.output(torch.cat(rows, dim=1))
        return self.output(self._attend(q, k, v, start, slot))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, slot: int) -> torch.Tensor:
        """Write k and v [1, L, kv_heads, dim] at start.. of `slot`'s cache and attend
        queries q [1, L, heads, dim] over what each sees."""
        length = q.shape[1]
        if self.pos_cache is not None:
            return ring_attend_one(self, q, k, v, start, slot)
        end = start + length
        k_cache, v_cache = (self.k_cache, self.v_cache) if slot == 0 else (
            self.k_slots[slot : slot + 1], self.v_slots[slot : slot + 1])
        k_cache[:, :, start:end] = k.transpose(1, 2)
        v_cache[:, :, start:end] = v.transpose(1, 2)
        # Keys older than the window of the first query are never attended: skip them.
        lo = first_visible_key(start, self.window)
        keys, values = k_cache[:, :, lo:end], v_cache[:, :, lo:end]
        if length == 1:  # one query sees every key in the slice: no mask needed
            return attend(q, keys, values, sinks=self.sinks)
        if chunk_kernel(q, keys, self.sinks):
            return attend_positions(q, keys, values, start, lo, self.window)
        if start == 0 and self.window is None:
            return attend(q, keys, values, causal=True, sinks=self.sinks)
        mask = causal_mask(length, start, lo, self.window, q.device, q.dtype)
        return attend(q, keys, values, mask, sinks=self.sinks)

    def export_slot(self, n: int, slot: int) -> tuple[torch.Tensor, ...]:
        """Copies of `slot`'s first n cached keys and values (a ring: all of it, and the
        positions it holds, a third tensor)."""
        kv = (self.k_slots[slot : slot + 1, :, :n].clone(), self.v_slots[slot : slot + 1, :, :n].clone())
        return kv if self.pos_slots is None else (*kv, self.pos_slots[slot : slot + 1].clone())

    def import_slot(self, state: tuple, n: int, slot: int) -> None:
        """Put export_slot's copies back as `slot`'s first n positions."""
        keys, values = state[0], state[1]
        self.k_slots[slot : slot + 1, :, :n] = keys[:, :, :n]
        self.v_slots[slot : slot + 1, :, :n] = values[:, :, :n]
        if len(state) > 2:
            self.pos_slots[slot : slot + 1] = state[2]

    def forward_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor,
                     slot_ids: torch.Tensor, rows, key_pos: torch.Tensor) -> torch.Tensor:
        """B sequences, one token each: x [B, 1, hidden] at positions pos [B] of slots
        slot_ids [B], whose caches are read through `rows` (a slice of consecutive slots,
        or slot_ids), attending over key positions key_pos [1, span] with a mask that
        hides what lies past each row's own position. Every shape is fixed by B and the
        span, so the step compiles with both symbolic and captures in a CUDA graph."""
        if self.rope_cos is not None:
            cos, sin = self.rope_cos[pos][:, None], self.rope_sin[pos][:, None]
        q, k, v = self.project(x, cos, sin)
        if self.pos_slots is not None:
            return self.output(ring_attend_rows(self, q, k, v, pos, slot_ids, rows, key_pos))
        self.k_slots[slot_ids, :, pos] = k[:, 0]
        self.v_slots[slot_ids, :, pos] = v[:, 0]
        span = key_pos.shape[-1]
        mask = visible(pos[:, None], key_pos, self.window)[:, None, None, :]
        out = attend(q, self.k_slots[rows, :, :span], self.v_slots[rows, :, :span], mask, sinks=self.sinks)
        return self.output(out)


# --- sliding-window rings -------------------------------------------------------------------

# The KV cache of a sliding-window layer: a ring of its last positions, so a long chat
# holds `window + SLACK` positions for each such layer instead of the whole context (Gemma 3:
# five layers in six).
#
# Position p lives at entry p % size, and each entry records the position it holds
# (`Attention.pos_slots`, -1 for none), so which entries a query sees is read from the ring
# itself: the positions in its window, not past it. A prompt's chunk gathers the window
# before it in position order and attends over that and its own keys, then writes its last
# `size` positions. A sequence may go back (a new prompt sharing only part of the cached
# one) as long as the ring still holds the window before the point it resumes from: SLACK
# positions of going back are always possible (the last id of a prompt runs again, a
# template re-renders the end of an answer); further, `ring_resumable` says no and the caller
# starts the sequence over, as llama.cpp does for its sliding-window caches.

SLACK = RING_SLACK  # ring_size (families.family) is window + SLACK, for the memory estimate too


def ring_attend_one(attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int,
               slot: int) -> torch.Tensor:
    """One sequence's queries q [1, L, heads, dim] at start.. over the ring of `slot`,
    after writing k and v [1, L, kv_heads, dim] into it; attend()'s result."""
    if slot == 0:
        k_cache, v_cache, held = attn.k_cache, attn.v_cache, attn.pos_cache
    else:
        k_cache, v_cache = attn.k_slots[slot : slot + 1], attn.v_slots[slot : slot + 1]
        held = attn.pos_slots[slot : slot + 1]
    size, window, length = held.shape[-1], attn.window, q.shape[1]
    assert window is not None
    kt, vt = k.transpose(1, 2), v.transpose(1, 2)
    if length == 1:  # a decoded token: write it, attend over the ring as it lies
        at = start % size  # sliced, not indexed: a compiled step keeps `start` symbolic
        k_cache[:, :, at : at + 1] = kt
        v_cache[:, :, at : at + 1] = vt
        held[:, at : at + 1] = start
        n = min(start + 1, size)
        if start < window:  # entries 0..start hold positions 0..start, all in the window
            return attend(q, k_cache[:, :, :n], v_cache[:, :, :n], sinks=attn.sinks)
        mask = visible(start, held[:, :n], window)[:, None, None, :]
        return attend(q, k_cache[:, :, :n], v_cache[:, :, :n], mask, sinks=attn.sinks)
    # A chunk: the window before it, gathered in position order, then its own keys.
    lo = first_visible_key(start, window)
    before = torch.arange(lo, start, device=k.device) % size
    keys = torch.cat((k_cache[:, :, before], kt), dim=2)
    values = torch.cat((v_cache[:, :, before], vt), dim=2)
    if chunk_kernel(q, keys, attn.sinks):
        out = attend_positions(q, keys, values, start, lo, window)
    else:
        mask = causal_mask(length, start, lo, window, q.device, q.dtype)
        out = attend(q, keys, values, mask, sinks=attn.sinks)
    end = start + length
    first = max(start, end - size)  # older ones would be overwritten within the chunk
    positions = torch.arange(first, end, device=k.device)
    k_cache[:, :, positions % size] = kt[:, :, first - start :]
    v_cache[:, :, positions % size] = vt[:, :, first - start :]
    held[:, positions % size] = positions
    return out


def ring_attend_rows(attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor,
                slot_ids: torch.Tensor, rows, key_pos: torch.Tensor) -> torch.Tensor:
    """Attention.forward_rows over rings: row b writes its key at pos[b] % size of slot
    slot_ids[b] and sees the entries whose positions are in its window."""
    size = attn.pos_slots.shape[-1]
    at = pos % size
    attn.k_slots[slot_ids, :, at] = k[:, 0]
    attn.v_slots[slot_ids, :, at] = v[:, 0]
    attn.pos_slots[slot_ids, at] = pos
    n = min(key_pos.shape[-1], size)
    held = attn.pos_slots[rows, :n]
    mask = (visible(pos[:, None], held, attn.window) & (held >= 0))[:, None, None, :]
    return attend(q, attn.k_slots[rows, :, :n], attn.v_slots[rows, :, :n], mask, sinks=attn.sinks)


def ring_resumable(attn: Attention, start: int, slot: int) -> bool:
    """Whether the ring of `slot` holds every position a query at `start` sees before it."""
    lo = first_visible_key(start, attn.window)
    if start == 0 or lo >= start:
        return True
    size = attn.pos_slots.shape[-1]
    needed = torch.arange(lo, start, device=attn.pos_slots.device)
    return bool((attn.pos_slots[slot, needed % size] == needed).all())
