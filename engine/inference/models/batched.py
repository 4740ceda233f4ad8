"""One decode step for several sequences at once, each in its own KV-cache slot.

Decoding one token reads every weight once; on a CPU that memory traffic, not the
arithmetic, bounds the speed, so B rows in one step cost little more than one row. Rows
sit at different positions: RoPE is taken per row, each row writes its key/value at its
own position of its slot, and attends over the longest row's span with a mask that hides
what lies past its own position. B and the span change from step to step; a compiled step
(engine.inference.models.decode) takes both as symbolic sizes.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from engine.inference.backend import check_batch
from engine.inference.models.llama import Attention, Transformer, _rms_norm, _rope


def decode_batch(model: Transformer, tokens: Sequence[int], positions: Sequence[int],
                 slots: Sequence[int]) -> torch.Tensor:
    """Logits [B, vocab]: row b appends tokens[b] at positions[b] to slot slots[b]."""
    slots = [int(s) for s in slots]
    check_batch(tokens, positions, slots, model.slots, model.context_length)
    device = model._token.device
    ids = torch.tensor([int(t) for t in tokens], dtype=torch.long, device=device).view(-1, 1)
    pos = torch.tensor([int(p) for p in positions], dtype=torch.long, device=device)
    slot_ids = torch.tensor(slots, dtype=torch.long, device=device)
    # Consecutive slots read the cache through a view; any other set is gathered (a copy).
    consecutive = slots == list(range(slots[0], slots[0] + len(slots)))
    rows = slice(slots[0], slots[0] + len(slots)) if consecutive else slot_ids
    cos = model._cos[pos][:, None]  # [B, 1 (length), 1 (heads), head_dim]
    sin = model._sin[pos][:, None]
    span = int(pos.max()) + 1
    key_pos = torch.arange(span, device=device)[None, :]
    h = model.tok_embeddings(ids)
    block = model.batch_block or batch_block
    for layer in model.layers:
        h = block(layer, h, cos, sin, pos, slot_ids, rows, key_pos)
    return model.output(model.norm(h[:, -1]))


def batch_block(layer, h, cos, sin, pos, slot_ids, rows, key_pos) -> torch.Tensor:
    """One decoder block for B rows: h [B, 1, hidden] at positions pos [B] of slots
    slot_ids [B], read through `rows` (a slice of consecutive slots, or slot_ids),
    attending over key positions key_pos [1, span]."""
    x = layer.attention_norm(h)
    h = h + _attention(layer.attention, x, cos, sin, pos, slot_ids, rows, key_pos)
    return h + layer.feed_forward(layer.ffn_norm(h))


def _attention(attn: Attention, x, cos, sin, pos, slot_ids, rows, key_pos) -> torch.Tensor:
    batch = x.shape[0]
    qkv = attn.wqkv(x)
    split = attn.q_size + attn.kv_size
    qk = qkv[..., :split].view(batch, 1, attn.n_heads + attn.n_kv, attn.head_dim)
    if attn.qk_norm is not None:
        qk = _rms_norm(qk, None, attn.eps) * attn.qk_norm
    qk = _rope(qk, cos, sin)
    q = qk[:, :, : attn.n_heads].transpose(1, 2)  # [B, heads, 1, head_dim]
    attn.k_slots[slot_ids, :, pos] = qk[:, 0, attn.n_heads :]
    attn.v_slots[slot_ids, :, pos] = qkv[:, 0, split:].view(batch, attn.n_kv, attn.head_dim)
    span = key_pos.shape[1]
    visible = key_pos <= pos[:, None]
    if attn.window is not None:
        visible &= key_pos > pos[:, None] - attn.window
    keys = attn.k_slots[rows, :, :span]
    values = attn.v_slots[rows, :, :span]
    if torch.compiler.is_compiling():
        # Products and sums that inductor fuses, with the rows' gather, into one loop over
        # the slots' caches (scores in float32, as the one-sequence step keeps them).
        q = q.reshape(batch, attn.n_kv, -1, attn.head_dim).float() * attn.head_dim**-0.5
        scores = (q[:, :, :, None, :] * keys[:, :, None, :, :]).sum(-1)
        scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = (probs[..., None] * values[:, :, None, :, :]).sum(-2).to(x.dtype)
        return attn.wo(out.reshape(batch, 1, attn.q_size))
    out = F.scaled_dot_product_attention(
        q, keys, values, attn_mask=visible[:, None, None, :], enable_gqa=True)
    return attn.wo(out.transpose(1, 2).reshape(batch, 1, attn.q_size))
