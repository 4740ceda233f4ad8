"""Which thinking format a loaded model writes, and the stream step that splits a
generation's thinking from its answer (engine/inference/reasoning.py), for a stored answer's
rounds and the server's stateless answers alike; and the chat's thinking choice as the
chat template's variables."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..inference.families import find_model_type
from ..inference.families.family import ReasoningFormat
from ..inference.reasoning import (
    THINK_CLOSE,
    THINK_OPEN,
    ThinkSplitter,
    opens_thinking,
    reasoning_format,
    splitter_for,
)
from ..records import THINKING_CHOICES, ThinkingSupport

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..inference.reasoning import Splitter
    from ..inference.worker import ModelWorker
    from ..tokenize import Tokenizer

_FORMATS: weakref.WeakKeyDictionary[Any, tuple[ReasoningFormat | None]] = weakref.WeakKeyDictionary()
_TAIL_TOKENS = 16  # the prompt's last tokens, where a generation prompt may open <think>


def model_type_of(model_dir: Path | None) -> str | None:
    """config.json's model_type in a model's folder, or None."""
    if model_dir is None:
        return None
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    found = config.get("model_type") if isinstance(config, dict) else None
    return found if isinstance(found, str) else None


def format_of(worker: ModelWorker) -> ReasoningFormat | None:
    """The loaded model's thinking format, read once per worker: its family's, else its
    chat template's. A remote model's thinking arrives as `<think>` tags (the remote
    backend wraps a server's reasoning_content in them, and some servers send them as
    they are)."""
    try:
        return _FORMATS[worker][0]
    except (KeyError, TypeError):
        pass
    model_dir = getattr(worker, "model_dir", None)
    if model_dir is None:
        found: ReasoningFormat | None = ReasoningFormat.THINK_TAGS
    else:
        family = find_model_type((model_type_of(model_dir) or "").lower())
        found = reasoning_format(family.reasoning if family else None, worker.tokenizer.chat_template)
    try:
        _FORMATS[worker] = (found,)
    except TypeError:
        pass  # not weakly referable (a test's stand-in): read again next time
    return found


def splitter(worker: ModelWorker, prompt_ids: Sequence[int], inside: bool | None = None) -> Splitter | None:
    """A fresh stream step for one generation of `worker` after `prompt_ids` (None: the
    model does not think apart). `inside`: whether it starts inside the thinking (a
    continued answer says; None: as the prompt's end leaves it)."""
    fmt = format_of(worker)
    if fmt is None:
        return None
    if fmt is ReasoningFormat.THINK_TAGS and inside is not None:
        return ThinkSplitter(thinking=inside)
    tail = worker.tokenizer.decode(list(prompt_ids[-_TAIL_TOKENS:]), skip_special_tokens=False) \
        if fmt is ReasoningFormat.THINK_TAGS else ""
    return splitter_for(fmt, tail)


def answer_of(worker: ModelWorker, prompt_ids: Sequence[int], text: str) -> str:
    """The answer in a whole generation's `text`, its thinking left out (a title's, a
    summary's: side requests show no thinking)."""
    split = splitter(worker, prompt_ids)
    if split is None:
        return text
    pieces = split.feed(text) + split.finish()
    return "".join(p.text for p in pieces if p.kind == "answer")


def resumed_ids(worker: ModelWorker, prompt_ids: Sequence[int], reasoning: str, content: str) -> list[int]:
    """The ids of an answer so far after its prompt, for the model to go on from (a continued
    answer): its thinking in the model's own markup, closed, then its text; thinking with
    no text after it (stopped while thinking) is left open, to go on with. The markup is
    read as the template's (special tokens where they are), the texts as plain text."""
    tokenizer = worker.tokenizer

    def text(value: str, special: bool = False) -> list[int]:
        ids = tokenizer.encode(value, special=special)
        return ids[1:] if tokenizer.add_bos and ids[:1] == [tokenizer.bos_id] else ids

    fmt = format_of(worker) if reasoning else None
    if fmt is ReasoningFormat.THINK_TAGS:
        opened = opens_thinking(tokenizer.decode(list(prompt_ids[-_TAIL_TOKENS:]), skip_special_tokens=False))
        head = [] if opened else text(THINK_OPEN + "\n", special=True)
        if not content:
            return head + text(reasoning)
        return head + text(reasoning) + text("\n" + THINK_CLOSE + "\n\n", special=True) + text(content)
    if fmt is ReasoningFormat.HARMONY:
        if not content:
            return text("<|channel|>analysis<|message|>", special=True) + text(reasoning)
        return (text("<|channel|>analysis<|message|>", special=True) + text(reasoning)
                + text("<|end|><|start|>assistant<|channel|>final<|message|>", special=True) + text(content))
    return text(content)


def token_counter(worker: ModelWorker):
    """Counts a thinking text's tokens (without a BOS the tokenizer may add)."""
    tokenizer = worker.tokenizer

    def count(text: str) -> int:
        ids = tokenizer.encode(text)
        return len(ids) - (1 if tokenizer.add_bos and ids[:1] == [tokenizer.bos_id] else 0)

    return count


# -- the chat's thinking choice -------------------------------------------------------------

THINKING_KEY = "thinking"  # a chat's setting (and SendOptions.thinking): one of THINKING_CHOICES
SWITCH = THINKING_CHOICES[:2]  # on, off: templates with an enable_thinking variable (Qwen3, SmolLM3)
EFFORT = THINKING_CHOICES[2:]  # low, medium, high: templates with a reasoning_effort variable (gpt-oss)


def control_of(chat_template: str | None) -> tuple[str, ...]:
    """The thinking choices a model's chat template takes: SWITCH, EFFORT, or () for none
    (an R1 distill always thinks; a model without thinking has nothing to switch)."""
    template = chat_template or ""
    if "reasoning_effort" in template:
        return EFFORT
    if "enable_thinking" in template:
        return SWITCH
    return ()


def template_vars(choice: object, chat_template: str | None) -> dict[str, Any]:
    """The chat template's variables for a thinking choice: enable_thinking for on/off,
    reasoning_effort for low/medium/high; none where the template takes no such choice (or
    none was made). "off" on an effort template asks for the least effort; an effort on a
    switch template turns thinking on."""
    control = control_of(chat_template)
    if choice not in THINKING_CHOICES or not control:
        return {}
    if control is EFFORT:
        return {"reasoning_effort": "low" if choice == "off" else "medium" if choice == "on" else choice}
    return {"enable_thinking": choice != "off"}


def support_of(worker: ModelWorker) -> ThinkingSupport:
    """Whether `worker`'s model thinks apart, and the thinking choices its template takes."""
    template = worker.tokenizer.chat_template
    return ThinkingSupport(format_of(worker) is not None, control_of(template) if getattr(worker, "model_dir", None)
                           is not None else ())


def chosen(options: object, conversation: dict) -> str | None:
    """The thinking choice for one Send: SendOptions.thinking, else the chat's setting."""
    asked = getattr(options, "thinking", None)
    if asked is not None:
        return asked
    value = conversation.get(THINKING_KEY)
    return value if value in THINKING_CHOICES else None


def chat_tokenizer(tokenizer: Tokenizer, options: object, conversation: dict) -> Tokenizer:
    """`tokenizer` rendering the chat template with this Send's thinking choice."""
    return tokenizer.with_template_vars(**template_vars(chosen(options, conversation), tokenizer.chat_template))


def without_thinking(tokenizer: Tokenizer) -> Tokenizer:
    """`tokenizer` asking the model not to think (the least effort, for gpt-oss), where its
    template takes that: for the short requests behind an answer (titles, summaries)."""
    return tokenizer.with_template_vars(**template_vars("off", tokenizer.chat_template))
