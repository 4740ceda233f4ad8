"""One request's sampled ids turned into its events: deltas with stop strings held back,
then Usage and Finished. Shared by the one-at-a-time and the batched paths."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from engine.events import Delta, Finished, FinishReason, Usage
from engine.inference.stops import StopStringMatcher
from engine.tokenize import StreamingDetokenizer, Tokenizer

if TYPE_CHECKING:
    from engine.inference.worker import GenerationRequest


class SequenceOutput:
    """Turns one request's sampled ids into its events: deltas with stop strings held
    back, then Usage and Finished. Mirrors the single-request path token for token."""

    def __init__(self, tokenizer: Tokenizer, request: GenerationRequest) -> None:
        self.request = request
        self.emit = request.sink
        self.eos = tokenizer.eos_ids
        self.detok = StreamingDetokenizer(tokenizer)
        self.stops = StopStringMatcher(request.params.stop)
        self.produced = 0
        self.first_at: float | None = None
        self.stopped_by_string = False

    def feed(self, token: int) -> FinishReason | None:
        """Handle one sampled id; the reason to finish, or None to go on."""
        if self.first_at is None:
            self.first_at = time.perf_counter()
        if self.request.cancel.is_set():
            return FinishReason.CANCELLED
        if token in self.eos:
            return FinishReason.STOP
        self.produced += 1
        text, hit = self.stops.feed(self.detok.feed(token))
        if text:
            self.emit(Delta(text))
        if hit:
            self.stopped_by_string = True
            return FinishReason.STOP
        if self.produced >= self.request.params.max_tokens:
            return FinishReason.LENGTH
        return None

    def finish(self, reason: FinishReason, cached: int) -> None:
        if not self.stopped_by_string:
            tail, hit = self.stops.feed(self.detok.flush())
            if not hit:
                tail += self.stops.flush()
            if tail:
                self.emit(Delta(tail))
        end = time.perf_counter()
        submitted = self.request.submitted_at
        ttft = (self.first_at - submitted) if self.first_at else end - submitted
        decode_time = end - self.first_at if self.first_at else 0.0
        produced = self.produced
        rate = (produced - 1) / decode_time if produced > 1 and decode_time > 0 else 0.0
        self.emit(Usage(len(self.request.prompt_ids), produced, ttft, rate, cached))
        self.emit(Finished(reason))
