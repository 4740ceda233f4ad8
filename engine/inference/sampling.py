"""Sampling settings and the one sampler every backend shares (numpy, on host)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..errors import InvalidRequest, ModelFileError

if TYPE_CHECKING:
    from .constrain import ConstraintState


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 disables
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    repetition_window: int = 64  # recent tokens the penalty looks at; 0: all of them
    # DRY ("don't repeat yourself"): a token that would extend a repeat of an earlier run of
    # at least dry_allowed_length tokens loses dry_multiplier * dry_base^(extra length).
    dry_multiplier: float = 0.0  # 0 disables
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_window: int = 1024  # recent tokens searched for repeats; 0: all of them
    # Whether the repetition guard also counts the prompt. An answer often has to echo its
    # question ("The capital of France is ..."), so Wren's defaults count only the answer.
    penalize_prompt: bool = True
    seed: int | None = None
    max_tokens: int = 1024
    stop: tuple[str, ...] = field(default_factory=tuple)
    # Token probabilities: None records none (and costs nothing); N from 0 to 20 records
    # each generated token's log-probability and the N likeliest tokens at its step
    # (Sampler.last, then Delta.logprobs and the answer's metadata "logprobs").
    logprobs: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop) if isinstance(self.stop, (list, tuple)) else self.stop)
        problems: list[tuple[str, str]] = []  # (setting, what is wrong with it)
        for name in _FLOATS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                problems.append((name, f"{name} must be a number, got {value!r}"))
            else:
                object.__setattr__(self, name, float(value))
        for name in _INTS:
            value = getattr(self, name)
            if name in ("seed", "logprobs") and value is None:
                continue
            if isinstance(value, float) and value.is_integer():
                object.__setattr__(self, name, int(value))  # 40.0 from a JSON file is 40
            elif isinstance(value, bool) or not isinstance(value, int):
                problems.append((name, f"{name} must be a whole number, got {value!r}"))
        if not isinstance(self.penalize_prompt, bool):
            problems.append(("penalize_prompt", f"penalize_prompt must be true or false, got {self.penalize_prompt!r}"))
        if not isinstance(self.stop, tuple):
            problems.append(("stop", f"stop must be a list of strings, got {self.stop!r}"))
        _refuse(problems)
        self.validate()

    def validate(self) -> None:
        _refuse([(name, message) for ok, name, message in self._checks() if not ok])

    def _checks(self) -> list[tuple[bool, str, str]]:
        """Each setting's range, as (holds, the setting, what to say when it does not), in a fixed order."""
        return [
            (0.0 <= self.temperature <= 5.0, "temperature",
             f"temperature must be between 0 and 5 (0: always the likeliest token), got {self.temperature}"),
            (0.0 < self.top_p <= 1.0, "top_p", f"top_p must be more than 0 and at most 1 (1 is off), got {self.top_p}"),
            (self.top_k >= 0, "top_k", f"top_k must be 0 (off) or positive, got {self.top_k}"),
            (0.0 <= self.min_p < 1.0, "min_p", f"min_p must be at least 0 (off) and below 1, got {self.min_p}"),
            (0.0 < self.repetition_penalty <= 5.0, "repetition_penalty",
             f"repetition_penalty must be more than 0 and at most 5 (1 is off), got {self.repetition_penalty}"),
            (self.repetition_window >= 0, "repetition_window",
             f"repetition_window must be 0 (all tokens) or a number of tokens, got {self.repetition_window}"),
            (0.0 <= self.dry_multiplier <= 5.0, "dry_multiplier",
             f"dry_multiplier must be between 0 (off) and 5, got {self.dry_multiplier}"),
            (1.0 < self.dry_base <= 4.0, "dry_base", f"dry_base must be more than 1 and at most 4, got {self.dry_base}"),
            (1 <= self.dry_allowed_length <= 100, "dry_allowed_length",
             f"dry_allowed_length must be from 1 to 100 tokens, got {self.dry_allowed_length}"),
            (self.dry_window >= 0, "dry_window",
             f"dry_window must be 0 (all tokens) or a number of tokens, got {self.dry_window}"),
            (self.seed is None or 0 <= self.seed < 2**63, "seed", f"seed must be a non-negative integer, got {self.seed}"),
            (1 <= self.max_tokens <= 1_000_000, "max_tokens",
             f"max_tokens must be from 1 to 1,000,000, got {self.max_tokens}"),
            (self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS, "logprobs",
             f"logprobs must be from 0 to {MAX_LOGPROBS} (the likeliest tokens shown beside each "
             f"token; none: leave it out), got {self.logprobs}"),
            (all(isinstance(s, str) and s for s in self.stop), "stop", "stop strings must be non-empty strings"),
        ]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> SamplingParams:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise InvalidRequest(f"unknown sampling settings: {', '.join(sorted(unknown))}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise InvalidRequest(f"invalid sampling settings: {exc}") from None

    def with_(self, **changes) -> SamplingParams:
        return replace(self, **changes)


def _refuse(problems: list[tuple[str, str]]) -> None:
    """InvalidRequest saying every problem, its `param` the first setting named (the API's
    error names the field, as for every other bad field)."""
    if problems:
        error = InvalidRequest("invalid sampling settings: " + "; ".join(message for _, message in problems))
        error.param = problems[0][0]  # type: ignore[attr-defined]
        raise error


_FLOATS = ("temperature", "top_p", "min_p", "repetition_penalty", "dry_multiplier", "dry_base")
_INTS = ("top_k", "repetition_window", "dry_allowed_length", "dry_window", "seed", "max_tokens", "logprobs")
MAX_LOGPROBS = 20  # alternatives shown per token, at most (OpenAI's limit too)
# A log-probability is never written below this (the JSON of -infinity is not JSON): a
# token the model rules out reads as e^-9999, which is 0.
LOGPROB_FLOOR = -9999.0


class TokenChoice(NamedTuple):
    """What the sampler recorded for one token (params.logprobs set): the chosen id and its
    log-probability, and the likeliest ids at that step with theirs, most likely first."""

    id: int
    logprob: float
    top_ids: tuple[int, ...]
    top_logprobs: tuple[float, ...]


class Sampler:
    """Picks the next token id from float logits [vocab].

    Order: the repetition guard (a penalty on tokens seen in the last `repetition_window`
    tokens, then DRY on tokens that would extend an earlier run), then greedy argmax
    (temperature 0), else temperature, top-k, top-p, min-p, and a draw from a generator
    seeded by `params.seed`, so the same seed and settings give the same ids. `history` is
    every id so far, prompt included; one Sampler serves one answer, so the history of its
    first call is the prompt (left out of the guard unless `penalize_prompt`). Filters shrink a candidate set instead of masking the
    whole vocabulary, and top-p sorts only the likely head of the distribution.

    With a `constraint` (engine.inference.constrain.ConstraintState) the candidates start as
    the tokens it allows, after the repetition guard and before everything else, and the
    sampler advances it past each token it picks.

    With `params.logprobs` set (0 to 20), each call also leaves a TokenChoice in `last`:
    the chosen token's log-probability and the `logprobs` likeliest tokens'. They are the
    log-softmax of the scores the token was chosen from, after the repetition guard and the
    constraint (a token the constraint forbids is not a candidate) but at temperature 1 and
    before top-k, top-p and min-p: the model's own view of the next token as Wren adjusted
    it, the same whatever temperature drew the token (as OpenAI's logprobs). So a greedy
    token is always the first of `top`, and a sampled one is never more likely than it.
    With `logprobs` None nothing of this runs and `last` stays None.

    Logits that hold NaN or +infinity (or no
    finite value at all) raise DamagedLogits, naming `source` (the model's weights file):
    damaged weights must fail the answer, never end it silently.
    """

    def __init__(self, params: SamplingParams, constraint: ConstraintState | None = None,
                 source: str | None = None) -> None:
        params.validate()
        self.params = params
        self.constraint = constraint
        self.source = source
        self._rng = np.random.default_rng(params.seed)
        self._prompt_len: int | None = None  # the first call's history length
        self._steps = 0
        self.last: TokenChoice | None = None  # the last token's probabilities (params.logprobs set)

    def __call__(self, logits: np.ndarray, history: Sequence[int] | np.ndarray = ()) -> int:
        x, candidates = self._scores(logits, history)
        token = self._draw(x, candidates)
        if self.params.logprobs is not None:
            self.last = _choice(x, candidates, token, self.params.logprobs)
        if self.constraint is not None:
            self.constraint.advance(token)
        self._steps += 1
        return token

    def _scores(self, logits: np.ndarray, history: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The logits after the repetition guard and the constraint, and the token ids they
        stand for (None: the whole vocabulary, in order)."""
        p = self.params
        x = np.asarray(logits, dtype=np.float32)
        if x.ndim != 1 or x.size == 0:
            raise ValueError(f"logits must be a non-empty vector, got shape {x.shape}")
        _check_finite(x, self._steps, self.source)
        if self._prompt_len is None:
            self._prompt_len = len(history)
        if not p.penalize_prompt:
            history = history[self._prompt_len:]
        if p.repetition_penalty != 1.0 and len(history):
            recent = history[-p.repetition_window:] if p.repetition_window else history
            x = _penalize(x, recent, p.repetition_penalty)
        if p.dry_multiplier > 0.0 and len(history) > p.dry_allowed_length:
            recent = history[-p.dry_window:] if p.dry_window else history
            x = _dry(x, np.asarray(recent, dtype=np.int64), p)
        candidates = None  # None: every token is still a candidate
        if self.constraint is not None:
            x, candidates = self.constraint.restrict(x)
        return x, candidates

    def distribution(self, logits: np.ndarray, history: Sequence[int] | np.ndarray = ()) -> np.ndarray:
        """The probabilities [vocab] (float64) the next token would be drawn from after
        `history`: every filter applied, one-hot on the argmax when greedy. Nothing is drawn
        and nothing advances (speculative decoding's acceptance test,
        engine.inference.speculative)."""
        x, candidates = self._scores(logits, history)
        dense = np.zeros(np.asarray(logits).size, dtype=np.float64)
        if self.params.greedy:
            i = int(np.argmax(x))
            dense[i if candidates is None else candidates[i]] = 1.0
            return dense
        kept, probs = self._filtered(x, candidates)
        if kept is None:
            dense[:] = probs
        else:
            dense[kept] = probs
        return dense / dense.sum()

    def draw(self, probs: np.ndarray) -> int:
        """A token drawn from `probs` [vocab] with this sampler's generator."""
        cdf = np.cumsum(probs)
        i = int(np.searchsorted(cdf, self._rng.random() * cdf[-1], side="right"))
        return min(i, cdf.size - 1)

    def uniform(self) -> float:
        """A number in [0, 1) from this sampler's generator."""
        return float(self._rng.random())

    def took(self, token: int) -> None:
        """A token was chosen outside __call__ (speculative decoding's acceptance test)."""
        if self.constraint is not None:
            self.constraint.advance(token)
        self._steps += 1

    def _draw(self, x: np.ndarray, candidates: np.ndarray | None) -> int:
        p = self.params
        if p.greedy:
            i = int(np.argmax(x))
            return int(i if candidates is None else candidates[i])
        candidates, probs = self._filtered(x, candidates)
        cdf = np.cumsum(probs)
        i = int(np.searchsorted(cdf, self._rng.random() * cdf[-1], side="right"))
        i = min(i, cdf.size - 1)  # rounding at the top end
        return int(i if candidates is None else candidates[i])

    def _filtered(self, x: np.ndarray, candidates: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray]:
        """Top-k, temperature, top-p and min-p: the ids still candidates (None: all, in
        order) and their unnormalised probabilities."""
        p = self.params
        if 0 < p.top_k < x.size:
            kth = np.partition(x, x.size - p.top_k)[x.size - p.top_k]
            # Tokens tied with the k-th logit stay, as in transformers' TopKLogitsWarper.
            keep = np.flatnonzero(x >= kth)
            candidates = keep if candidates is None else candidates[keep]
            x = x[keep]

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
        return candidates, probs


def _choice(x: np.ndarray, candidates: np.ndarray | None, token: int, k: int) -> TokenChoice:
    """The log-softmax of scores `x` (over `candidates`) for the chosen `token` and the k
    likeliest. The exponentials run in float32 (summed in float64): about a fifth of the
    time, for log-probabilities good to about 1e-6; the top is searched for among the
    scores near the best first, usually a few hundred of tens of thousands."""
    best = x.max()
    logsum = float(best) + float(np.log(np.exp(x - best).sum(dtype=np.float64)))
    if candidates is None:
        at = token
    else:
        where = np.flatnonzero(np.asarray(candidates) == token)
        at = int(where[0]) if where.size else -1
    chosen = float(x[at]) - logsum if at >= 0 else LOGPROB_FLOOR
    pool = np.flatnonzero(x >= best - 4.0) if k else np.empty(0, dtype=np.intp)
    if pool.size < k:  # a very sure model: look further down
        pool = np.flatnonzero(np.isfinite(x))  # a token ruled out (-inf) is no alternative
    if pool.size > k:
        pool = pool[np.argpartition(x[pool], pool.size - k)[pool.size - k:]]
    head = pool[np.lexsort((pool, -x[pool]))]  # most likely first; equal scores by id
    ids = head if candidates is None else np.asarray(candidates)[head]
    return TokenChoice(int(token), min(0.0, max(LOGPROB_FLOOR, chosen)), tuple(int(i) for i in ids),
                       tuple(min(0.0, max(LOGPROB_FLOOR, float(x[i]) - logsum)) for i in head))


class DamagedLogits(ModelFileError):
    """The model computed NaN or infinite logits: its weights are damaged (or it overflowed)."""


def _check_finite(x: np.ndarray, step: int, source: str | None) -> None:
    # One pass: the sum of finite float32 logits stays finite, and any NaN or +inf shows in it.
    total = float(x.sum(dtype=np.float64))
    if np.isfinite(total):
        return
    bad = int(np.isnan(x).sum() + np.isposinf(x).sum())
    if bad == 0 and np.isfinite(x).any():
        return  # only -inf entries: tokens the backend rules out, which is allowed
    where = f"its weights file {source}" if source else "its weights"
    what = f"{bad} of {x.size} logits are NaN or infinite" if bad else f"all {x.size} logits are -infinity"
    raise DamagedLogits(
        f"the model produced unusable numbers at answer token {step + 1} ({what}): {where} "
        "look damaged. Re-import the model (`wren models rm NAME`, then `wren models import` "
        "or `wren models pull`), or choose another one.")


def _penalize(x: np.ndarray, history: Sequence[int] | np.ndarray, penalty: float) -> np.ndarray:
    # CTRL-style: a seen token becomes less likely whatever its logit's sign.
    seen = np.asarray(history, dtype=np.intp)
    seen = seen[(seen >= 0) & (seen < x.size)]  # ids the model's head does not cover
    x = x.copy()
    vals = x[seen]
    # Repeated ids all write the same value, so duplicates in `seen` are harmless.
    x[seen] = np.where(vals > 0, vals / penalty, vals * penalty)
    return x


# A DRY penalty stops growing past this many tokens beyond the allowed length, and at this
# many logits: by then it has ruled the token out (e^-1000), and an unbounded power would
# overflow or swamp a backend whose logits hold the rest at a large finite negative.
_DRY_MAX_EXTRA = 24
_DRY_MAX_PENALTY = 1000.0


def _dry(x: np.ndarray, history: np.ndarray, p: SamplingParams) -> np.ndarray:
    """Penalise each token that would continue a repeat of an earlier stretch of the text.

    For every earlier place where the latest token also occurs, count how many tokens before
    it match the tokens before the latest one: if the text now ends with a run of n tokens
    that appeared before, the token that followed that earlier run would make the repeat
    n+1 long. Runs shorter than `dry_allowed_length` (common short phrases) go free; longer
    ones cost `multiplier * base ** (n - allowed_length)`, subtracted from the logit.
    """
    n = history.size
    last = n - 1
    # Earlier positions of the latest token that are followed by something (not the end).
    ends = np.flatnonzero(history[:last] == history[last])
    if ends.size == 0:
        return x
    length = np.ones(ends.size, dtype=np.int64)  # the latest token itself matches
    cap = p.dry_allowed_length + _DRY_MAX_EXTRA
    alive = np.ones(ends.size, dtype=bool)
    for k in range(1, cap):
        i = ends - k
        # A match stops at the start of the text or at a mismatch; the two runs may overlap
        # (a token said over and over repeats itself).
        ok = alive & (i >= 0)
        ok[ok] = history[i[ok]] == history[last - k]
        length += ok
        alive = ok
        if not alive.any():
            break
    following = history[ends + 1]
    valid = (following >= 0) & (following < x.size) & (length >= p.dry_allowed_length)
    if not valid.any():
        return x
    # Each token's longest repeat decides its penalty.
    best = np.zeros(x.size, dtype=np.int64)
    np.maximum.at(best, following[valid], length[valid])
    hit = np.flatnonzero(best)
    extra = np.minimum(best[hit] - p.dry_allowed_length, _DRY_MAX_EXTRA)
    x = x.copy()
    x[hit] -= np.minimum(p.dry_multiplier * p.dry_base ** extra, _DRY_MAX_PENALTY).astype(np.float32)
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


# The weights file a damaged-logits error names, in the order a model folder is read.
_WEIGHT_FILES = ("model.gguf", "model.safetensors")


def weights_file(model_dir: Path | str) -> str:
    """The file in `model_dir` that holds the weights (the folder itself if none is known)."""
    folder = Path(model_dir)
    for name in _WEIGHT_FILES:
        if (folder / name).is_file():
            return str(folder / name)
    shards = sorted(folder.glob("model*.safetensors"))
    return str(shards[0] if len(shards) == 1 else folder)


def sampler_for(request, tokenizer, model_dir: Path | str | None = None) -> Sampler:
    """The sampler for one GenerationRequest: its params, its `constraint` (if any) started
    for `tokenizer`, and the weights file to name if the logits turn out damaged."""
    constraint = getattr(request, "constraint", None)
    state = constraint.start(tokenizer) if constraint is not None else None  # built on first use
    return Sampler(request.params, state, weights_file(model_dir) if model_dir is not None else None)
