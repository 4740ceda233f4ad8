"""One generation's text on its way to the user: a tool call's text split off (the call
parser; the calls collected), the rest through the output guard, each shown Delta with its
tokens' log-probabilities. Shared by a stored answer (engine/turns.py) and the server's
stateless ones (engine/server/serving.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ..events import Delta, Event, Finished, FinishReason, SafetyNotice
from ..tools.parse import CallParser, ParsedCall

if TYPE_CHECKING:
    from ..inference.worker import GenerationRequest
    from ..logprobs import AnswerLogprobs
    from ..safety import GuardStep, OutputGuard


class AnswerText:
    """Feed it a generation's Delta and Finished events; it gives back what is shown.

    `shift`: the raw text earlier rounds of the same answer already had, so a notice's span
    is in the whole answer's offsets."""

    def __init__(self, guard: OutputGuard, probs: AnswerLogprobs, parser: CallParser | None = None, *,
                 shift: int = 0) -> None:
        self.guard = guard
        self.probs = probs
        self.parser = parser
        self.shift = shift
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
        else:
            self.probs.arrived(event)
        steps = [self.guard.feed(piece) for piece in self._pieces(event)]
        if final and not self.blocked:
            steps.append(self.guard.finish())
        return self._shown(steps)

    def _pieces(self, event: Delta | Finished) -> list[str]:
        """The text to guard; the calls' pieces are kept aside."""
        text = event.text if isinstance(event, Delta) else ""
        if self.parser is None:
            pieces: list = [text] if isinstance(event, Delta) else []
        else:
            pieces = self.parser.feed(text) if isinstance(event, Delta) else self.parser.finish()
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
