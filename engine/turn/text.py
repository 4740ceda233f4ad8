"""One generation's text on its way to the user: the model's thinking split off (a Reasoning
event, engine/inference/reasoning.py), a tool call's text split off (the call parser; the
calls collected), the rest through the output guard, each shown Delta with its tokens'
log-probabilities. Shared by a stored answer (engine/turns.py) and the server's
stateless ones (engine/server/serving.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from ..events import Delta, Event, Finished, FinishReason, Reasoning, SafetyNotice, Usage
from ..inference.reasoning import STOPPED_NOTE, Piece
from ..tools.parse import CallParser, ParsedCall, call_from

if TYPE_CHECKING:
    from ..inference.reasoning import Splitter
    from ..inference.worker import GenerationRequest
    from ..logprobs import AnswerLogprobs
    from ..safety import GuardStep, OutputGuard


class AnswerText:
    """Feed it a generation's Delta and Finished events; it gives back what is shown.

    `shift`: the raw text earlier rounds of the same answer already had, so a notice's span
    is in the whole answer's offsets. `split`: the model's thinking format's stream step
    (None: it does not think apart); `count` counts the thinking's tokens for Usage;
    `thinking_guard` makes the output guard the thinking goes through (a fresh one for each
    stretch of thinking: it is model output too, redacted or blocked by the same policy;
    None: it is shown as written)."""

    def __init__(self, guard: OutputGuard, probs: AnswerLogprobs, parser: CallParser | None = None, *,
                 shift: int = 0, split: Splitter | None = None, count: Callable[[str], int] | None = None,
                 thinking_guard: Callable[[], OutputGuard] | None = None) -> None:
        self.guard = guard
        self.probs = probs
        self.parser = parser
        self.shift = shift
        self.split = split
        self.count = count
        self.thinking_guard = thinking_guard
        self._thought_guard: OutputGuard | None = None  # the guard of the thinking now streaming
        self.thinking: list[str] = []  # this generation's thinking, as Reasoning events gave it
        self.calls: list[ParsedCall] = []
        self.blocked = False
        self.raw_len = 0  # the text that went through the guard
        self.reason = FinishReason.CANCELLED  # the generation's own, once its Finished came

    @property
    def calls_complete(self) -> bool:
        """A call is complete and the model went on: what follows is not shown."""
        return self.parser is not None and self.parser.done

    def feed(self, event: Delta | Finished) -> list[Event]:
        """The SafetyNotice and Delta events `event` gives."""
        final = isinstance(event, Finished)
        if isinstance(event, Finished):
            self.reason = event.reason
        elif self.calls_complete:
            return []
        thought: list[Event] = []
        text = self._answer_text(event, thought) if self.split is not None else None
        if isinstance(event, Delta) and (text is None or text):
            # log-probabilities are the answer's: a token that only thought is left out
            self.probs.arrived(event)
        steps = [self.guard.feed(piece) for piece in self._pieces(event, text)]
        if final and not self.blocked:
            steps.append(self.guard.finish())
        return thought + self._shown(steps)

    def usage(self, usage: Usage) -> Usage:
        """The generation's Usage with the tokens it spent thinking."""
        if not self.thinking or self.count is None:
            return usage
        spent = min(self.count("".join(self.thinking)), usage.completion_tokens)
        return dataclasses.replace(usage, reasoning_tokens=usage.reasoning_tokens + spent)

    def _answer_text(self, event: Delta | Finished, thought: list[Event]) -> str:
        """The answer's part of `event`; its thinking goes to `thought` as Reasoning events,
        a harmony call to the calls. Thinking the model never closed ends with a note as
        the answer (it is kept as thinking, not shown as a broken answer)."""
        assert self.split is not None
        if isinstance(event, Finished):
            pieces = self.split.finish()
            if self.split.unclosed and event.reason is not FinishReason.CANCELLED:
                pieces.append(Piece("answer", STOPPED_NOTE))
        else:
            pieces = self.split.feed(event.text)
        answer = []
        for piece in pieces:
            if piece.kind == "thinking":
                self._think(piece.text, thought)
                continue
            self._end_thought(thought)  # the thinking is over: its guard lets go of what it held
            if piece.kind == "call":
                self.calls.append(call_from({"name": piece.recipient, "arguments": piece.text}, piece.text))
            else:
                answer.append(piece.text)
        if isinstance(event, Finished):
            self._end_thought(thought)
        return "".join(answer)

    def _think(self, text: str, thought: list[Event]) -> None:
        if self.thinking_guard is None:
            self._thought(text, thought)
            return
        if self._thought_guard is None:
            self._thought_guard = self.thinking_guard()
        self._guarded(self._thought_guard.feed(text), thought)

    def _end_thought(self, thought: list[Event]) -> None:
        if self._thought_guard is not None:
            guard, self._thought_guard = self._thought_guard, None
            self._guarded(guard.finish(), thought)

    def _guarded(self, step: GuardStep, thought: list[Event]) -> None:
        """A step of the thinking's guard: its notices, its text unless a rule blocked."""
        thought.extend(step.notices)
        if step.text and not step.blocked and not self.blocked:
            self._thought(step.text, thought)
        if step.blocked:
            self.blocked = True

    def _thought(self, text: str, thought: list[Event]) -> None:
        self.thinking.append(text)
        thought.append(Reasoning(text))

    def _pieces(self, event: Delta | Finished, split: str | None = None) -> list[str]:
        """The text to guard; the calls' pieces are kept aside. `split`: the answer's part
        of the event, where its thinking was split off."""
        text = event.text if isinstance(event, Delta) else ""
        if split is not None:
            text = split
        if self.parser is None:
            pieces: list = [text] if isinstance(event, Delta) or text else []
        elif isinstance(event, Delta):
            pieces = self.parser.feed(text)
        else:
            pieces = (self.parser.feed(text) if text else []) + self.parser.finish()
        out = []
        for piece in pieces:
            if isinstance(piece, ParsedCall):
                self.calls.append(piece)
            elif not self.blocked:
                self.raw_len += len(piece)
                out.append(piece)
        return out

    def _shown(self, steps: list[GuardStep]) -> list[Event]:
        out: list[Event] = []
        for step in steps:
            for notice in step.notices:
                out.append(_shifted(notice, self.shift) if self.shift else notice)
            if step.text and not step.blocked:
                out.append(Delta(step.text, self.probs.attach()))
            if step.blocked:
                self.blocked = True
        return out


async def generation(events: asyncio.Queue, text: AnswerText, request: GenerationRequest) -> AsyncIterator[Event]:
    """One generation's events from its queue: Delta and Finished through `text` (what is
    shown), the others (PrefillProgress, Usage, Failed) as they come. Ends after its
    Finished or a block; once the model's calls are complete the request is stopped (the
    rest would not be shown). `text.reason` and `text.blocked` say how it ended."""
    while True:
        event = await events.get()
        if isinstance(event, Usage):
            yield text.usage(event)
            continue
        if not isinstance(event, (Delta, Finished)):
            yield event
            continue
        for shown in text.feed(event):
            yield shown
        if text.blocked or isinstance(event, Finished):
            return
        if text.calls_complete and not request.cancel.is_set():
            request.cancel.set()


def _shifted(notice: SafetyNotice, by: int) -> SafetyNotice:
    """A later round's notice, its span moved to the whole answer's offsets."""
    return SafetyNotice(notice.category, notice.action, (notice.span[0] + by, notice.span[1] + by), notice.rule,
                        notice.stage)
