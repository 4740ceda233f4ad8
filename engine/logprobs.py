"""Token probabilities of one answer as it streams through a turn (SamplingParams.logprobs).

The model's deltas carry one TokenLogprob per token (engine.inference.output). A turn may
show text later than the model wrote it (the output guard holds a possible secret back
until it can tell) or not at all (a tool call's text), so the entries wait here and ride on
the next Delta the turn shows. Those shown are what the answer keeps in its metadata
under METADATA_KEY: a list of {"token", "id", "logprob", "top": [{"token", "id",
"logprob"}]}, one per token, in order (TokenLogprob.to_dict).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .events import Delta, TokenLogprob

if TYPE_CHECKING:
    from .inference.sampling import SamplingParams

METADATA_KEY = "logprobs"


class AnswerLogprobs:
    """One answer's entries: `arrived` takes the model's, `attach` gives the ones waiting to
    the Delta about to be shown, `store` writes the shown ones into the answer's metadata.

    A continued answer (`prefix`, its text so far) starts from the entries it kept; if it
    kept none for that text, or a model that gives none (a remote provider's) wrote part
    of it, the list would not line up with the answer's text: then the deltas carry None
    from there on and none is stored."""

    def __init__(self, params: SamplingParams, meta: dict, prefix: str = "") -> None:
        self.on = params.logprobs is not None
        earlier = meta.get(METADATA_KEY) if prefix else []
        self.covered = isinstance(earlier, list)  # the list spans the whole text so far
        self.kept: list[dict] = list(earlier) if isinstance(earlier, list) else []
        self._waiting: list[TokenLogprob] = []

    def arrived(self, delta: Delta) -> None:
        if delta.logprobs is None:
            self.covered = False  # the model gives none
        else:
            self._waiting.extend(delta.logprobs)

    def attach(self) -> tuple[TokenLogprob, ...] | None:
        """The entries for the Delta shown next: None when logprobs are off (or the model
        gives none)."""
        if not self.on or not self.covered:
            return None
        out = tuple(self._waiting)
        self._waiting.clear()
        self.kept.extend(entry.to_dict() for entry in out)
        return out

    def store(self, meta: dict) -> None:
        """Into the answer's metadata: the entries shown, or nothing (and no stale list
        from before a continuation made without them)."""
        if self.on and self.covered:
            meta[METADATA_KEY] = self.kept
        else:
            meta.pop(METADATA_KEY, None)


def from_metadata(meta: dict) -> tuple[TokenLogprob, ...] | None:
    """An answer's stored entries (None when it has none)."""
    found = meta.get(METADATA_KEY)
    if not isinstance(found, list):
        return None
    return tuple(TokenLogprob.from_dict(d) for d in found)
