"""What one stored answer has so far, across its rounds (a round: one generation; a tool
call ends one and its result starts the next)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..events import FinishReason, SafetyNotice, Usage

if TYPE_CHECKING:
    from ..logprobs import AnswerLogprobs
    from ..tools.prompt import RoundRecord
    from .checkpoint import Checkpoints


@dataclass
class AnswerState:
    parts: list[str]  # the shown text (a continued answer's earlier text first)
    probs: AnswerLogprobs  # token probabilities, with SamplingParams.logprobs
    checkpoints: Checkpoints
    notices: list[SafetyNotice] = field(default_factory=list)
    tool_log: list[dict] = field(default_factory=list)  # meta["tools"]: each call and result
    usages: list[Usage] = field(default_factory=list)
    rounds: list[RoundRecord] = field(default_factory=list)  # the finished rounds' text and calls
    told: set[SafetyNotice] = field(default_factory=set)  # outgoing notices given in an earlier round
    error: str | None = None
    interrupted: bool = False  # the model's stream broke mid-answer (a remote server)
    reason: FinishReason = FinishReason.CANCELLED  # if the consumer walks away mid-stream
    raw_base: int = 0  # the raw text of the earlier rounds (notices' offsets)
    number: int = 0  # the round
    thinking: list[str] = field(default_factory=list)  # the Reasoning events' text, every round's
    # saves the thinking as it streams, as `checkpoints` the answer (None: not saved until the end)
    thinking_checkpoints: Checkpoints | None = None
    thought_from: float | None = None  # time.monotonic() at the first and the latest Reasoning
    thought_to: float | None = None
    kept_tokens: int = 0  # a continued answer's tokens from before (its record counts the whole answer)

    def thought(self, text: str, now: float) -> None:
        """A Reasoning event's text arrived at `now`."""
        self.thinking.append(text)
        if self.thought_from is None:
            self.thought_from = now
        self.thought_to = now

    @property
    def reasoning(self) -> str:
        return "".join(self.thinking).strip()

    @property
    def thought_seconds(self) -> float | None:
        if self.thought_from is None or self.thought_to is None:
            return None
        return round(self.thought_to - self.thought_from, 3)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def usage(self) -> Usage | None:
        """One answer's usage across its rounds: the last prompt, every round's tokens."""
        usages = self.usages
        if not usages:
            return None
        if len(usages) == 1:
            return usages[0]
        tokens = sum(u.completion_tokens for u in usages)
        seconds = sum(u.completion_tokens / u.tokens_per_second for u in usages if u.tokens_per_second > 0)
        return Usage(usages[-1].prompt_tokens, tokens, usages[0].time_to_first_token,
                     tokens / seconds if seconds > 0 else 0.0, usages[-1].cached_tokens,
                     sum(u.reasoning_tokens for u in usages))
