"""Sampling settings and the one sampler every backend shares (numpy, on host)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Sequence

import numpy as np

from engine.errors import InvalidRequest


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int = 1024
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop))
        self.validate()

    def validate(self) -> None:
        problems = []
        if not (0.0 <= self.temperature <= 5.0):
            problems.append(f"temperature must be between 0 and 5, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must be 0 (off) or positive, got {self.top_k}")
        if not (0.0 <= self.min_p < 1.0):
            problems.append(f"min_p must be in [0, 1), got {self.min_p}")
        if not (0.0 < self.repetition_penalty <= 5.0):
            problems.append(
                f"repetition_penalty must be in (0, 5], got {self.repetition_penalty}"
            )
        if self.seed is not None and not (0 <= self.seed < 2**63):
            problems.append(f"seed must be a non-negative integer, got {self.seed}")
        if not (1 <= self.max_tokens <= 1_000_000):
            problems.append(f"max_tokens must be at least 1, got {self.max_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            problems.append("stop strings must be non-empty strings")
        if problems:
            raise InvalidRequest("invalid sampling settings: " + "; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> "SamplingParams":
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise InvalidRequest(f"unknown sampling settings: {', '.join(sorted(unknown))}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise InvalidRequest(f"invalid sampling settings: {exc}") from None

    def with_(self, **changes) -> "SamplingParams":
        return replace(self, **changes)


class Sampler:
    """Picks the next token id from float logits [vocab].

    Order: repetition penalty, then greedy argmax (temperature 0), else temperature,
    top-k, top-p, min-p, and a draw from a generator seeded by `params.seed`, so the same
    seed and settings give the same ids. Filters shrink a candidate set instead of masking
    the whole vocabulary, and top-p sorts only the likely head of the distribution.
    """

    def __init__(self, params: SamplingParams) -> None:
        params.validate()
        self.params = params
        self._rng = np.random.default_rng(params.seed)

    def __call__(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        p = self.params
        x = np.asarray(logits, dtype=np.float32)
        if x.ndim != 1 or x.size == 0:
            raise ValueError(f"logits must be a non-empty vector, got shape {x.shape}")
        if p.repetition_penalty != 1.0 and len(history):
            x = _penalize(x, history, p.repetition_penalty)
        if p.greedy:
            return int(np.argmax(x))

        candidates = None  # None: every token is still a candidate
        if 0 < p.top_k < x.size:
            kth = np.partition(x, x.size - p.top_k)[x.size - p.top_k]
            # Tokens tied with the k-th logit stay, as in transformers' TopKLogitsWarper.
            candidates = np.flatnonzero(x >= kth)
            x = x[candidates]

        z = x.astype(np.float64) / p.temperature
        probs = np.exp(z - z.max())
        probs /= probs.sum()

        if p.top_p < 1.0:
            keep = _nucleus(probs, p.top_p)
            candidates = keep if candidates is None else candidates[keep]
            probs = probs[keep]
        if p.min_p > 0.0:
            # Relative to the most likely token, so renormalising after top-p changes nothing.
            keep = np.flatnonzero(probs >= p.min_p * probs.max())
            candidates = keep if candidates is None else candidates[keep]
            probs = probs[keep]

        cdf = np.cumsum(probs)
        i = int(np.searchsorted(cdf, self._rng.random() * cdf[-1], side="right"))
        i = min(i, cdf.size - 1)  # rounding at the top end
        return int(i if candidates is None else candidates[i])


def _penalize(x: np.ndarray, history: Sequence[int], penalty: float) -> np.ndarray:
    # CTRL-style: a seen token becomes less likely whatever its logit's sign.
    seen = np.asarray(history, dtype=np.intp)
    seen = seen[(seen >= 0) & (seen < x.size)]  # ids the model's head does not cover
    x = x.copy()
    vals = x[seen]
    # Repeated ids all write the same value, so duplicates in `seen` are harmless.
    x[seen] = np.where(vals > 0, vals / penalty, vals * penalty)
    return x


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the smallest set of most likely tokens whose mass reaches top_p."""
    # Sort only tokens above a floor: if they already hold top_p of the mass, the nucleus
    # lies among them, and for a real model that is a few hundred tokens, not the vocabulary.
    floor = float(probs.max()) * 1e-3
    while True:
        kept = np.flatnonzero(probs >= floor)
        if floor == 0.0 or probs[kept].sum() >= top_p:
            break
        floor = floor * 1e-3 if floor > 1e-30 else 0.0
    order = kept[np.argsort(-probs[kept])]
    mass = np.cumsum(probs[order])
    cut = int(np.searchsorted(mass, top_p, side="left")) + 1
    return order[: min(cut, order.size)]
