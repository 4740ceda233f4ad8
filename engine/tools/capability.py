"""Whether a model calls tools, and whether a question looked like one for a tool.

A model calls tools when its chat template has a tool format: the template renders the tools
it is given (the model was trained to see them and answer with a call). Wren still describes
tools to any other model in its own words (engine/tools/prompt.py), but such a model rarely
calls one, so the front ends say so. A remote provider is asked through its API's own tools
field, which the provider's model handles itself."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .prompt import schema_of
from .registry import ToolSpec

if TYPE_CHECKING:
    from ..tokenize import Tokenizer


@dataclass(frozen=True)
class ToolSupport:
    model: str
    calls_tools: bool
    reason: str  # one sentence a front end can show as it is


def tool_support(model: str, tokenizer: Tokenizer | None, *, remote: bool = False) -> ToolSupport:
    """What `model` (its tokenizer's chat template) does with tools."""
    if remote:
        return ToolSupport(model, True, f"{model} is a remote provider's model: tools go through its API")
    template = (tokenizer.chat_template or "") if tokenizer is not None else ""
    if not template:
        return ToolSupport(model, False, f"{model} has no chat template, so it has no tool format: "
                                         "it does not call tools")
    if "tools" in template and _renders_tools(tokenizer):
        return ToolSupport(model, True, f"{model}'s chat template has a tool format: it can call tools")
    return ToolSupport(model, False, f"{model} does not call tools: its chat template has no tool format "
                                     "(Wren describes the tools to it, but it rarely uses them)")


def _renders_tools(tokenizer: Tokenizer | None) -> bool:
    """Whether the template shows a tool it is given (some mention `tools` only to refuse them)."""
    if tokenizer is None:
        return False
    probe = ToolSpec("wren_probe_tool", "a probe", {"type": "object", "properties": {}})
    try:
        shown = tokenizer.render_chat([{"role": "user", "content": "?"}], tools=[schema_of(probe)])
    except Exception:  # a template that fails on tools has no tool format Wren can use
        return False
    return probe.name in shown


# -- questions a tool should have answered ---------------------------------------------------

# Two numbers joined by an operator. A bare "-" or "/" joins dates, ranges and phone numbers
# ("2024-05-01", "1990-2000", "12/05"), so those count only with spaces around them.
_ARITHMETIC = re.compile(r"\d[\d,.]*\s*(?:[+*×÷^−]|\s[-/]\s)\s*\(?\s*-?\d"
                         r"|\b(?:calculate|compute|sum of|product of|square root of)\b[^.?!]*\d", re.IGNORECASE)
_DATE = re.compile(
    r"\b(?:today'?s date|what(?:'s| is) (?:the )?(?:date|day|time)(?: (?:today|now|it is))?|what day is (?:it|today)"
    r"|current (?:date|time)|date today|time (?:is it|now))\b", re.IGNORECASE)


def expected_tool(question: str, offered: list[str] | tuple[str, ...]) -> str | None:
    """The offered built-in tool `question` plainly asks for (arithmetic → calculator, today's
    date or the time → current_datetime), or None. Deliberately narrow: a notice that fires on
    ordinary questions would teach the user to ignore it."""
    if "calculator" in offered and _ARITHMETIC.search(question):
        return "calculator"
    if "current_datetime" in offered and _DATE.search(question):
        return "current_datetime"
    return None


def not_called_text(tool: str, model: str) -> str:
    what = {"calculator": "arithmetic", "current_datetime": "today's date or the time"}.get(tool, tool)
    return (f"{model} answered without calling the {tool} tool, so its answer about {what} is a guess "
            "and may be wrong: check it, or pick a model that calls tools")
