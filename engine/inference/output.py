"""One request's sampled ids turned into its events: deltas with stop strings held back,
then Usage and Finished. Shared by the one-at-a-time and the batched paths."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..events import Delta, Finished, FinishReason, TokenLogprob, TopLogprob, Usage
from ..tokenize import StreamingDetokenizer, Tokenizer
from .stops import StopStringMatcher

if TYPE_CHECKING:
    from .requests import GenerationRequest
    from .sampling import TokenChoice


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
        self.tokenizer = tokenizer
        # With params.logprobs: each token's entry waits here until its text is shown.
        self._trail: _Trail | None = _Trail() if request.params.logprobs is not None else None

    def feed(self, token: int, choice: TokenChoice | None = None) -> FinishReason | None:
        """Handle one sampled id (and what the sampler recorded for it, params.logprobs
        set); the reason to finish, or None to go on."""
        if self.first_at is None:
            self.first_at = time.perf_counter()
        if self.request.cancel.is_set():
            return FinishReason.CANCELLED
        if token in self.eos:
            return FinishReason.STOP
        self.produced += 1
        piece = self.detok.feed(token)
        if self._trail is not None and choice is not None:
            self._trail.add(piece, self._entry(choice, piece))
        text, hit = self.stops.feed(piece)
        if text:
            self._emit(text, end=hit)
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
            if self._trail is not None:
                self._trail.extend_last(tail)  # a character held back belongs to the tokens before it
            if tail:
                self._emit(tail, end=True)
        end = time.perf_counter()
        submitted = self.request.submitted_at
        ttft = (self.first_at - submitted) if self.first_at else end - submitted
        decode_time = end - self.first_at if self.first_at else 0.0
        produced = self.produced
        rate = (produced - 1) / decode_time if produced > 1 and decode_time > 0 else 0.0
        self.emit(Usage(len(self.request.prompt_ids), produced, ttft, rate, cached))
        self.emit(Finished(reason))

    def _emit(self, text: str, *, end: bool = False) -> None:
        """A Delta for `text`, carrying the entries of the tokens it shows; at the `end`
        (the answer's last text), every entry left, cut to what was shown."""
        self.emit(Delta(text) if self._trail is None else Delta(text, self._trail.shown(len(text), end=end)))

    def _entry(self, choice: TokenChoice, piece: str) -> TokenLogprob:
        decode = self.tokenizer.decode
        top = tuple(TopLogprob(decode([i], skip_special_tokens=False), i, lp)
                    for i, lp in zip(choice.top_ids, choice.top_logprobs))
        return TokenLogprob(piece, choice.id, choice.logprob, top)


class _Trail:
    """Token entries whose text is not yet shown (stop strings hold text back), by where
    their text ends in the answer."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, TokenLogprob]] = []  # (end offset, entry)
        self._end = 0  # characters the tokens have produced
        self._shown = 0  # characters shown so far

    def add(self, piece: str, entry: TokenLogprob) -> None:
        self._end += len(piece)
        self._waiting.append((self._end, entry))

    def extend_last(self, text: str) -> None:
        """Text that came out only at the end (a held partial character) joins the last entry."""
        if text and self._waiting:
            end, entry = self._waiting[-1]
            self._waiting[-1] = (end + len(text), replace(entry, token=entry.token + text))
            self._end += len(text)

    def shown(self, n: int, *, end: bool) -> tuple[TokenLogprob, ...]:
        """The entries whose text the next `n` shown characters complete; with `end`, also
        the one cut by a stop string (its text shortened to the part shown). Tokens wholly
        inside a stop string are dropped: their text is not in the answer."""
        self._shown += n
        out = []
        while self._waiting and (self._waiting[0][0] <= self._shown or end):
            stop, entry = self._waiting.pop(0)
            start = stop - len(entry.token)
            if start >= self._shown and (entry.token or stop > self._shown):
                break  # wholly past what is shown: inside a stop string
            if stop > self._shown:
                entry = replace(entry, token=entry.token[: self._shown - start])
            out.append(entry)
        if end:
            self._waiting.clear()
        return tuple(out)
