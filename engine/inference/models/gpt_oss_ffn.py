"""gpt-oss's expert activation, which the experts layer (experts.py) runs as
ModelArgs.expert_activation "clamped_swiglu"; its router is experts.topk_softmax (the top k
experts by logit, then a softmax over those k only)."""

from __future__ import annotations

import torch

from ..families.gpt_oss import SWIGLU_ALPHA, SWIGLU_LIMIT


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, alpha: float = SWIGLU_ALPHA,
                   limit: float = SWIGLU_LIMIT) -> torch.Tensor:
    """(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit)."""
    g = gate.clamp(max=limit)
    return (up.clamp(-limit, limit) + 1) * (g * torch.sigmoid(g * alpha))
