"""gpt-oss's two pieces of its experts layer, for the shared experts layer (experts.py) to
call: the router (top k experts by logit, then a softmax over those k only) and the experts'
SwiGLU (clamped, with its own alpha, and up + 1)."""

from __future__ import annotations

import torch

from ..families.gpt_oss import SWIGLU_ALPHA, SWIGLU_LIMIT


def route_top_k_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, experts) [tokens, k] for router logits [tokens, experts] (the router's bias
    already added): the k largest logits, softmaxed among themselves in float32. Ties go to
    the lower expert index, as torch.topk gives them."""
    top, experts = torch.topk(logits.float(), k, dim=-1)
    return torch.softmax(top, dim=-1), experts


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, alpha: float = SWIGLU_ALPHA,
                   limit: float = SWIGLU_LIMIT) -> torch.Tensor:
    """(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit)."""
    g = gate.clamp(max=limit)
    return (up.clamp(-limit, limit) + 1) * (g * torch.sigmoid(g * alpha))
