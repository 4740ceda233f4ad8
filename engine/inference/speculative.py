"""Speculative decoding: draft a few tokens cheaply, check them all in one pass of the model,
keep the run it agrees with.

Two drafters: `PromptLookup` copies what followed the latest earlier occurrence of the last
few tokens (edits, summaries and code repeat their input), `DraftModel` asks a small model of
the same tokenizer. What comes out is what plain decoding would give: greedily the same ids
(each kept token is the one the sampler picks from the model's own logits), sampled through
the standard acceptance test (keep a drafted token d with probability min(1, p(d)/q(d)),
else draw from norm(max(0, p - q)); a prompt-lookup draft is certain, q one-hot), so every
token has the model's distribution. `Policy` drafts only where it pays: from the measured
cost of a verify step against a decoded token and the acceptance seen so far, it picks the
draft length with the best expected tokens per unit of time, drafting nothing where that is
below one, with a rare probe to notice when drafting pays again.

"The same ids" holds as far as a verify step's logits equal a decoded token's. They do bit
for bit where the model says so (`verifies_exactly`: Wren's quantized kernels compute each
row alone, and verify attends row by row as decoding does); a decode step compiled by
inductor rounds its fused norms and attention otherwise (~5e-7, which 8-bit activation
rounding can grow into a changed near-tied greedy pick). "auto" speculates only where
verification is exact; a drafter named in the setting speculates anyway.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import InvalidRequest
from .backend import LoadedModel
from .generate import KVSession, generate_tokens
from .sampling import Sampler

MAX_DRAFT = 8  # tokens drafted at most per step
DRAFTERS = ("auto", "off", "prompt-lookup", "draft-model")
# Settings: which drafter ("auto": the model's draft model where one is set, else prompt
# lookup), and each model's draft model by name ({"qwen3-8b": "qwen3-0.6b"}).
DRAFTER_KEY = "speculative"
# "auto": drafting only while verification is exact, and only where the Policy measures it
# faster (bench/speculative.py, starter decoding eagerly: prompt lookup kept greedy answers
# identical on all three tasks and was not measured slower; docs/cli.md).
DEFAULT_DRAFTER = "auto"
DRAFT_MODELS_KEY = "draft_models"


def check_setting(key: str, value) -> None:
    """Refuse a bad value for DRAFTER_KEY or DRAFT_MODELS_KEY (None clears either)."""
    if value is None:
        return
    if key == DRAFTER_KEY and value not in DRAFTERS:
        raise InvalidRequest(f"{DRAFTER_KEY} must be one of {', '.join(DRAFTERS)}, got {value!r}")
    if key == DRAFT_MODELS_KEY and not (isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) and k and v and k != v for k, v in value.items())):
        raise InvalidRequest(f"{DRAFT_MODELS_KEY} must map model names to other models' names, got {value!r}")


@dataclass(frozen=True)
class Draft:
    """Drafted ids and, from a draft model that sampled them, each one's distribution q
    [vocab] (None: the draft is certain, q one-hot)."""

    tokens: tuple[int, ...]
    q: tuple[np.ndarray, ...] | None = None


class PromptLookup:
    """Drafts the ids that followed the latest earlier occurrence of the history's last
    n-gram, for n from `longest` down to `shortest`."""

    name = "prompt-lookup"

    def __init__(self, longest: int = 4, shortest: int = 2) -> None:
        if not 1 <= shortest <= longest:
            raise ValueError(f"n-gram lengths must satisfy 1 <= shortest <= longest, got {shortest}, {longest}")
        self.longest, self.shortest = longest, shortest

    def draft(self, history: np.ndarray, k: int, sampler: Sampler) -> Draft | None:
        history = np.asarray(history)
        for n in range(self.longest, self.shortest - 1, -1):
            if len(history) <= n:
                continue
            # windows that end before the last id, so something follows each
            windows = sliding_window_view(history[:-1], n)
            hits = np.flatnonzero((windows == history[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                follow = history[start : start + k]
                if follow.size:
                    return Draft(tuple(int(t) for t in follow))
        return None

    def start(self, prompt_ids: Sequence[int]) -> None:
        return None

    def close(self) -> None:
        return None


class DraftModel:
    """Drafts with a small model that shares the main model's tokenizer, from its own KV
    cache (a prefix it already holds is not run again). Its tokens are drawn with the
    answer's sampler settings from its own logits."""

    name = "draft-model"

    def __init__(self, model: LoadedModel, vocab_size: int, main: LoadedModel | None = None) -> None:
        self.model = model
        self.session = KVSession(model)
        self.vocab_size = vocab_size  # the main model's: logits are cut or padded to it
        # On the CPU it computes on the main model's turn on the cores (engine.inference.
        # cpu_share): with a turn of its own, each switch would wait for the other's idle release.
        self._borrowed = main is not None and _share_turns(main, model)

    def draft(self, history: np.ndarray, k: int, sampler: Sampler) -> Draft | None:
        k = min(k, self.session.context_length - len(history))
        if k < 1:
            return None
        # Catching up on the ids since the last draft: a draft's logits need not be exact (its
        # q is whatever it drew from), so no row takes the prompt path's float32 tail, which
        # dequantizes every weight and cost ~5 decoded tokens a draft on the starter.
        logits, _ = self.session.prefill(history.tolist(), final=False)
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        seen = np.empty(len(history) + k, dtype=np.int64)
        seen[: len(history)] = history
        for i in range(k):
            q = sampler.distribution(self._fit(logits), seen[: len(history) + i])
            token = int(np.argmax(q)) if sampler.params.greedy else sampler.draw(q)
            tokens.append(token)
            qs.append(q)
            seen[len(history) + i] = token
            if i + 1 < k:
                logits = self.session.decode(token)
        return Draft(tuple(tokens), None if sampler.params.greedy else tuple(qs))

    def start(self, prompt_ids: Sequence[int]) -> None:
        """Read the prompt before the answer starts (its time is not a draft's cost)."""
        if len(prompt_ids) < self.session.context_length:
            self.session.prefill(prompt_ids)

    def _fit(self, logits: np.ndarray) -> np.ndarray:
        if logits.size == self.vocab_size:
            return logits
        if logits.size > self.vocab_size:
            return logits[: self.vocab_size]
        return np.concatenate((logits, np.full(self.vocab_size - logits.size, -np.inf, np.float32)))

    def close(self) -> None:
        if self._borrowed:  # the main model's turns: it closes them
            self.model.share = None  # type: ignore[attr-defined]
        self.model.close()


@dataclass
class Stats:
    """What speculation did over the answers it served (for benchmarks and the log)."""

    drafted: int = 0
    accepted: int = 0
    verify_steps: int = 0
    plain_steps: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class Policy:
    """When and how much to draft, from measured costs (in units of one decoded token) and
    the acceptance seen in this answer. A step that verifies L rows costs 1 + row_cost (L-1)
    decoded tokens, drafting draft_cost per drafted token; with acceptance a per drafted
    token, k drafted tokens give (1 - a^(k+1)) / (1 - a) tokens a step. The break-even
    acceptance is where that equals the step's cost."""

    margin: float = 0.03  # draft only where the expected gain beats this
    probe_every: int = 32  # plain tokens before drafting once more to re-measure acceptance
    warmup: int = 2  # decoded tokens timed before the first draft
    decode_s: float | None = None
    row_cost: float = 0.25
    draft_cost: float = 0.0
    refresh_every: int = 16  # speculative steps between plain ones, which keep decode_s current
    _accepted: float = 1.0
    _rejected: float = 1.0
    _realized: float | None = None  # this answer's measured speed-up of a speculative step
    _since_plain: int = 0
    _decodes: int = 0
    _plain_run: int = 0
    _backoff: int = field(default=0, repr=False)

    def new_answer(self) -> None:
        """Acceptance is the answer's own: start again from an even prior."""
        self._accepted = self._rejected = 1.0
        self._realized = None
        self._plain_run = 0
        self._backoff = self.probe_every

    @property
    def acceptance(self) -> float:
        return self._accepted / (self._accepted + self._rejected)

    def gain(self, k: int) -> float:
        """Expected tokens per unit of decode time with k drafted tokens (1: plain decoding)."""
        a = min(self.acceptance, 0.999)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        return tokens / (1 + (self.row_cost + self.draft_cost) * k)

    def ceiling(self, room: int) -> float:
        """The best gain any draft length could give if every drafted token were kept."""
        cost = self.row_cost + self.draft_cost
        return max((k + 1) / (1 + cost * k) for k in range(1, min(MAX_DRAFT, max(room, 1)) + 1))

    def plan(self, room: int) -> int:
        """How many tokens to draft now (0: decode one plainly)."""
        if self._decodes < self.warmup or room < 1 or self._since_plain >= self.refresh_every:
            return 0
        best = max(range(1, min(MAX_DRAFT, room) + 1), key=self.gain)
        # The model of the costs picks the length; what the steps measurably gave decides too.
        if self.gain(best) > 1 + self.margin and (self._realized is None or self._realized > 1 + self.margin):
            return best
        # Probe: has the text turned repetitive? Not where drafting costs so much that even
        # every draft kept would not pay (a draft model about as slow as the model itself).
        if self._plain_run >= self._backoff and self.ceiling(room) > 1 + self.margin:
            self._plain_run = 0
            self._backoff = min(self._backoff * 2, 1024)
            return min(2, room)
        return 0

    def decoded(self, seconds: float) -> None:
        self._decodes += 1
        self._plain_run += 1
        self._since_plain = 0
        self.decode_s = seconds if self.decode_s is None else 0.8 * self.decode_s + 0.2 * seconds

    def verified(self, rows: int, seconds: float, draft_seconds: float, drafted: int, accepted: int) -> None:
        if self.decode_s:
            if rows > 1:
                sample = max(0.0, (seconds / self.decode_s - 1) / (rows - 1))
                self.row_cost = 0.7 * self.row_cost + 0.3 * sample
            if drafted:
                self.draft_cost = 0.7 * self.draft_cost + 0.3 * draft_seconds / self.decode_s / drafted
        self._plain_run = 0
        self._since_plain += 1
        if self.decode_s:  # tokens this step gave against what plain decoding gives in its time
            realized = (accepted + 1) * self.decode_s / max(seconds + draft_seconds, 1e-9)
            self._realized = realized if self._realized is None else 0.5 * self._realized + 0.5 * realized
        self._accepted = 0.9 * self._accepted + accepted
        self._rejected = 0.9 * self._rejected + (accepted < drafted)
        if accepted == drafted:
            self._backoff = self.probe_every


class Speculator:
    """A drafter and the policy for one loaded model, reused across its answers."""

    def __init__(self, drafter: PromptLookup | DraftModel, policy: Policy | None = None, *,
                 exact_only: bool = False) -> None:
        self.drafter = drafter
        self.policy = policy or Policy()
        self.stats = Stats()
        # Draft only while the model verifies with decoding's own bits ("auto"): it may stop
        # mid-answer, when its compiled decode step is installed.
        self.exact_only = exact_only

    def serves(self, model: LoadedModel, sampler: Sampler) -> bool:
        """Whether speculation keeps this answer as it is: not with a constraint (advanced
        token by token) or log-probabilities (recorded per call), and sampled only without a
        seed (a seed promises the same ids again, and what is drafted depends on timings)."""
        return (model.verifies and sampler.constraint is None and sampler.params.logprobs is None
                and (sampler.params.greedy or sampler.params.seed is None))

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """A new answer to `prompt_ids`."""
        self.policy.new_answer()
        self.drafter.start(prompt_ids)

    def decoded(self, seconds: float) -> None:
        """A token was decoded plainly in `seconds`."""
        self.policy.decoded(seconds)
        self.stats.plain_steps += 1

    def step(self, session: KVSession, sampler: Sampler, history: np.ndarray,
             n: int) -> tuple[list[int], int] | None:
        """After history[:n], whose last id is sampled but not yet cached: draft, verify and
        accept. None when nothing is drafted (the caller decodes the id plainly and reports
        its time to `decoded`); else the drafted ids kept (written into history after n)
        and the id after them, the cache then holding history[:n] and the kept ones."""
        if self.exact_only and not session.model.verifies_exactly:
            return None
        room = session.context_length - len(session) - 1
        k = self.policy.plan(room)
        started = time.perf_counter()
        draft = self.drafter.draft(history[:n], k, sampler) if k else None
        if draft is None:
            return None
        drafted = time.perf_counter()
        rows = session.verify((int(history[n - 1]), *draft.tokens))
        verified = time.perf_counter()
        kept, token = _accept(rows, draft, sampler, history, n)
        session.truncate(len(session) - len(draft.tokens) + len(kept))
        self.policy.verified(len(rows), verified - drafted, drafted - started, len(draft.tokens), len(kept))
        self.stats.verify_steps += 1
        self.stats.drafted += len(draft.tokens)
        self.stats.accepted += len(kept)
        return kept, token

    def close(self) -> None:
        self.drafter.close()


def speculative_tokens(session: KVSession, prompt_ids: Sequence[int], sampler: Sampler,
                       speculator: Speculator | None) -> Iterator[int]:
    """generate_tokens with drafted tokens verified in batches where the speculator's policy
    says it pays; the same ids (greedy) or the same distribution (sampled)."""
    if speculator is None or not speculator.serves(session.model, sampler):
        yield from generate_tokens(session, prompt_ids, sampler)
        return
    speculator.begin(prompt_ids)
    logits, _ = session.prefill(prompt_ids)
    history = np.empty(session.context_length + 1, dtype=np.int64)
    n = len(prompt_ids)
    history[:n] = prompt_ids
    token = sampler(logits, history[:n])
    while True:
        yield token
        history[n] = token
        n += 1
        if len(session) >= session.context_length:
            return
        step = speculator.step(session, sampler, history, n)
        if step is None:
            started = time.perf_counter()
            logits = session.decode(token)
            speculator.decoded(time.perf_counter() - started)
            token = sampler(logits, history[:n])
            continue
        kept, token = step
        for accepted in kept:
            yield accepted
            history[n] = accepted
            n += 1


def _accept(rows: np.ndarray, draft: Draft, sampler: Sampler, history: np.ndarray,
            n: int) -> tuple[list[int], int]:
    """The drafted ids kept and the token after them (the model's correction of the first
    one not kept, or a token beyond the draft when all were). Kept ids are written into
    `history` after its first n, where the caller puts them too."""
    choose = _greedy_step if sampler.params.greedy else _sampled_step
    kept: list[int] = []
    for i, d in enumerate(draft.tokens):
        q = None if draft.q is None else draft.q[i]
        token, ok = choose(sampler, rows[i], history[: n + i], d, q)
        if not ok:
            return kept, token
        kept.append(token)
        history[n + i] = token
    last, seen = rows[len(draft.tokens)], history[: n + len(kept)]
    return kept, (sampler(last, seen) if sampler.params.greedy else _draw(sampler, sampler.distribution(last, seen)))


def _greedy_step(sampler: Sampler, logits: np.ndarray, seen: np.ndarray, d: int,
                 q: np.ndarray | None) -> tuple[int, bool]:
    token = sampler(logits, seen)
    return token, token == d


def _sampled_step(sampler: Sampler, logits: np.ndarray, seen: np.ndarray, d: int,
                  q: np.ndarray | None) -> tuple[int, bool]:
    """The acceptance test: keep d with probability min(1, p(d) / q(d)), else draw from
    what p has beyond q, normalised."""
    p = sampler.distribution(logits, seen)
    q_d = 1.0 if q is None else float(q[d])
    if q_d > 0 and sampler.uniform() * q_d < p[d]:
        sampler.took(d)
        return d, True
    if q is None:
        residual = p.copy()
        residual[d] = 0.0
    else:
        residual = np.maximum(p - q, 0.0)
    if residual.sum() <= 0.0:  # p and q agree to rounding: nothing left beyond q
        residual = p
    return _draw(sampler, residual), False


def _draw(sampler: Sampler, probs: np.ndarray) -> int:
    token = sampler.draw(probs)
    sampler.took(token)
    return token


def _share_turns(main: LoadedModel, draft: LoadedModel) -> bool:
    """Give `draft` the main model's turns on the cores; False where either has none (only
    CPU models have a `share`)."""
    main_share, draft_share = getattr(main, "share", None), getattr(draft, "share", None)
    if main_share is None or draft_share is None:
        return False
    draft_share.close()
    draft.share = main_share  # type: ignore[attr-defined]
    return True


def speculator_for(drafter: str, draft_model: Callable[[], LoadedModel] | None,
                   main: LoadedModel) -> Speculator | None:
    """The speculator for `main` a setting names: "off" none, "prompt-lookup" n-gram
    drafts, "draft-model" the model `draft_model()` loads, "auto" the draft model where one
    is set and `main` verifies exactly now, else prompt lookup, drafting only while
    verification is exact."""
    if drafter not in DRAFTERS:
        raise ValueError(f"the drafter must be one of {', '.join(DRAFTERS)}, got {drafter!r}")
    if drafter == "off":
        return None
    if drafter == "draft-model" and draft_model is None:
        raise ValueError("the drafter 'draft-model' needs a draft model set for this model")
    exact_only = drafter == "auto"
    # "auto" drafts only while verification is exact: a model that does not verify exactly
    # now (a mixture of experts, CUDA graphs, compiled steps without Wren's kernels) gets no
    # draft model loaded beside it, which would cost its memory and load time for nothing.
    usable = drafter == "draft-model" or getattr(main, "verifies_exactly", False)
    if drafter in ("auto", "draft-model") and draft_model is not None and usable:
        return Speculator(DraftModel(draft_model(), main.vocab_size, main), exact_only=exact_only)
    return Speculator(PromptLookup(), exact_only=exact_only)
