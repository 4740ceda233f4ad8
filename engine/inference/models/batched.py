"""One decode step for several sequences at once, each in its own KV-cache slot.

Decoding one token reads every weight once; on a CPU that memory traffic, not the
arithmetic, bounds the speed, so B rows in one step cost little more than one row. Rows
sit at different positions: RoPE is taken per row, each row writes its key/value at its
own position of its slot, and attends over the longest row's span with a mask that hides
what lies past its own position. B and the span change from step to step; a compiled step
(engine.inference.models.decode) takes both as symbolic sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..backend import check_batch
from .llama import Transformer


def decode_batch(model: Transformer, tokens: Sequence[int], positions: Sequence[int],
                 slots: Sequence[int]) -> torch.Tensor:
    """Logits [B, vocab]: row b appends tokens[b] at positions[b] to slot slots[b]."""
    slots = [int(s) for s in slots]
    check_batch(tokens, positions, slots, model.slots, model.context_length)
    # ids where the embedding is; the rest where the first layer is (a split model moves
    # them on to the later layers' device: engine.inference.models.stages)
    ids = torch.tensor([int(t) for t in tokens], dtype=torch.long, device=model._token.device).view(-1, 1)
    device = model._cos.device
    pos = torch.tensor([int(p) for p in positions], dtype=torch.long, device=device)
    slot_ids = torch.tensor(slots, dtype=torch.long, device=device)
    # Consecutive slots read the cache through a view; any other set is gathered (a copy).
    consecutive = slots == list(range(slots[0], slots[0] + len(slots)))
    rows = slice(slots[0], slots[0] + len(slots)) if consecutive else slot_ids
    cos = model._cos[pos][:, None]  # [B, 1 (length), 1 (heads), head_dim]
    sin = model._sin[pos][:, None]
    span = int(pos.max()) + 1
    key_pos = torch.arange(span, device=device)[None, :]
    h = model.embed(ids)
    block = model.batch_block or batch_block
    h = model.stages.run(model.layers, h, (cos, sin, pos, slot_ids, rows, key_pos), block)
    return model.head(h[:, -1])


def batch_block(layer, h, cos, sin, pos, slot_ids, rows, key_pos) -> torch.Tensor:
    """One decoder block for B rows: h [B, 1, hidden] at positions pos [B] of slots
    slot_ids [B], read through `rows` (a slice of consecutive slots, or slot_ids),
    attending over key positions key_pos [1, span] (attention.Attention.forward_rows)."""
    out = layer.attention.forward_rows(layer.attn_in(h), cos, sin, pos, slot_ids, rows, key_pos)
    h = h + layer.attn_out(out)  # norms and multipliers as the block's own (llama.Block)
    return h + layer.mlp(h)
