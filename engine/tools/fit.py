"""Cut an answer's tools to what the model's context window holds, and say what was cut.

Every offered tool's name, description and schema go into the prompt. A server with
thousands of tools (or a small window) cannot have them all: the tools are kept in the plan's
order (the built-in ones first, a tool_choice tool always) up to what leaves a quarter of the
window for the conversation's answer, and the rest are left out with a notice saying how many
and why. Before, one tool too many left out every tool, and said so only in the log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .prompt import ToolPlan

ANSWER_ROOM = 64  # all the tools are offered when this much room is left, as before
_TRIES = 6


@dataclasses.dataclass(frozen=True)
class FittedTools:
    plan: ToolPlan | None  # None: not even one tool fits
    prompt_ids: list[int]  # the first round's prompt with plan's tools (empty when plan is None)
    offered: int  # how many tools the answer asked for
    note: str | None  # what was left out and why; None when every tool fits


def fit_tools(plan: ToolPlan, encode: Callable[[ToolPlan], list[int]], context_length: int) -> FittedTools:
    """`plan` cut to what fits `context_length` tokens; `encode(plan)` is the first round's
    prompt (it runs a few times at most: the count is estimated from two encodings)."""
    entries = _forced_first(plan)
    total = len(entries)
    ids = encode(plan)
    if len(ids) + ANSWER_ROOM <= context_length:
        return FittedTools(plan, ids, total, None)
    budget = context_length - max(ANSWER_ROOM, context_length // 4)
    one = dataclasses.replace(plan, entries=entries[:1])
    one_ids = encode(one)
    if len(one_ids) > budget or total == 1:
        return FittedTools(None, [], total, _note(0, total, context_length))
    per_tool = max(1.0, (len(ids) - len(one_ids)) / (total - 1))
    keep = min(total - 1, 1 + int((budget - len(one_ids)) / per_tool))
    best: tuple[ToolPlan, list[int]] = (one, one_ids)
    for _ in range(_TRIES):
        if keep <= 1:
            break
        cut = dataclasses.replace(plan, entries=entries[:keep])
        cut_ids = encode(cut)
        if len(cut_ids) <= budget:
            best = (cut, cut_ids)
            break
        keep = max(1, int(keep * budget / len(cut_ids)) - 1)  # shrink in proportion, and a bit more
    kept_plan, kept_ids = best
    return FittedTools(kept_plan, kept_ids, total, _note(len(kept_plan.entries), total, context_length))


def _forced_first(plan: ToolPlan) -> list[tuple[Any, Any]]:
    """The plan's entries with the tool_choice tool first, so any cut keeps it."""
    entries = list(plan.entries)
    if plan.forced is not None:
        forced = [e for e in entries if e[0].name == plan.forced]
        entries = forced + [e for e in entries if e[0].name != plan.forced]
    return entries


def _note(kept: int, total: int, context_length: int) -> str:
    why = f"their descriptions do not fit this model's context window ({context_length:,} tokens)"
    if kept == 0:
        return f"None of the {total:,} tools were offered to the model: {why}."
    return (f"{total - kept:,} of the {total:,} tools were left out: {why}, so the model was offered "
            f"the first {kept:,}.")
