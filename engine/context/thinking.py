"""Earlier answers' thinking in a context report: never sent back to the model (a chat
template that wants it, as Qwen3's does within a tool-calling turn, strips it from older
turns itself), shown as left out so the inspector can say so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .report import ContextPart, PartKind, PartState

NOTE = "an earlier answer's thinking is not sent back to the model"
CHARS_PER_TOKEN = 4  # an estimate: counting every earlier thinking exactly would slow each Send


def thinking_parts(history: Sequence[Any], kept: Sequence[Any]) -> list[ContextPart]:
    """A DROPPED part for the thinking of each answer in `kept` (the turns in the prompt
    verbatim), with what it would have cost, in the history's order."""
    kept_ids = {m.id for m in kept if m.id is not None}
    out = []
    for item in history:
        reasoning = item.get("reasoning", "") if isinstance(item, dict) else getattr(item, "reasoning", "")
        mid = item.get("id") if isinstance(item, dict) else getattr(item, "id", None)
        if reasoning and isinstance(mid, int) and mid in kept_ids:
            tokens = max(1, len(reasoning) // CHARS_PER_TOKEN)
            out.append(ContextPart(PartKind.THINKING, PartState.DROPPED, tokens, (mid,), "assistant", note=NOTE))
    return out
