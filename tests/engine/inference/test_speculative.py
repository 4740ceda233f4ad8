"""Speculative decoding (engine.inference.speculative): the same greedy ids as plain decoding
with either drafter, the model's own distribution when sampling, and a policy that stops
drafting where it does not pay."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest

from tests.fixtures.tiny import make_tiny_model_dir, train_tiny_tokenizer
from wren.engine.errors import InvalidRequest
from wren.engine.events import Delta, Finished
from wren.engine.inference import speculative
from wren.engine.inference.generate import KVSession, generate_tokens
from wren.engine.inference.requests import GenerationRequest
from wren.engine.inference.sampling import Sampler, SamplingParams
from wren.engine.inference.speculative import (
    DRAFT_MODELS_KEY,
    DRAFTER_KEY,
    Draft,
    DraftModel,
    Policy,
    PromptLookup,
    Speculator,
    _accept,
    check_setting,
    speculative_tokens,
    speculator_for,
)

torch = pytest.importorskip("torch")
from wren.engine.inference.backends.torch import TorchBackend  # noqa: E402
from wren.engine.inference.worker import ModelWorker  # noqa: E402
from wren.engine.tokenize import Tokenizer  # noqa: E402

PROMPTS = (
    "Rewrite this: the cat sat on the mat, and the cat sat on the mat again.",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "Tell me about the little wren.",
    "One two three four, one two three four, one two three",
)


def always() -> Policy:
    """A policy that drafts at every step (so every path of the check runs)."""
    return Policy(margin=-1.0, warmup=0)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    return {
        "main": make_tiny_model_dir(root / "main", "qwen3", seed=5),
        "other": make_tiny_model_dir(root / "other", "qwen3", seed=9),
        # a sliding window short enough that the cache is a ring, wrapped by the prompt
        "ring": make_tiny_model_dir(root / "ring", "mistral", seed=3, sliding_window=16,
                                    max_position_embeddings=512),
    }


@pytest.fixture(scope="module")
def encode():
    tok = train_tiny_tokenizer()
    return lambda text: tok.encode(text).ids


def _greedy() -> Sampler:
    return Sampler(SamplingParams(temperature=0))


def _plain(model_dir, prompt, n):
    session = KVSession(TorchBackend().load(model_dir, slots=1))
    return list(itertools.islice(generate_tokens(session, prompt, _greedy()), n))


def _speculated(model_dir, prompt, n, speculator):
    session = KVSession(TorchBackend().load(model_dir, slots=1))
    return list(itertools.islice(speculative_tokens(session, prompt, _greedy(), speculator), n))


@pytest.mark.parametrize("drafter", ["prompt-lookup", "same-model", "other-model"])
def test_greedy_ids_are_plain_decodings(dirs, encode, drafter):
    for text in PROMPTS:
        prompt = encode(text)
        if drafter == "prompt-lookup":
            speculator = Speculator(PromptLookup(longest=3, shortest=1), always())
        else:
            draft_dir = dirs["main" if drafter == "same-model" else "other"]
            speculator = Speculator(DraftModel(TorchBackend().load(draft_dir, slots=1), 0), always())
            speculator.drafter.vocab_size = speculator.drafter.model.vocab_size
        assert _speculated(dirs["main"], prompt, 40, speculator) == _plain(dirs["main"], prompt, 40), text
        stats = speculator.stats
        assert stats.verify_steps > 0 and stats.drafted > 0
        if drafter == "same-model":  # its own drafts: nearly all kept
            assert stats.acceptance > 0.9


def test_greedy_ids_hold_through_a_wrapped_sliding_window_ring(dirs, encode):
    prompt = encode(" ".join(PROMPTS * 4))[:300]  # past the ring's 16 + 256 positions
    speculator = Speculator(PromptLookup(longest=2, shortest=1), always())
    assert _speculated(dirs["ring"], prompt, 40, speculator) == _plain(dirs["ring"], prompt, 40)
    assert speculator.stats.verify_steps > 0


def test_prompt_lookup_drafts_what_followed_the_latest_match():
    lookup = PromptLookup(longest=3, shortest=2)
    history = np.array([1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 8, 2, 3, 4])
    # [2, 3, 4] last came before 6, 7, 8
    assert lookup.draft(history, 3, _greedy()) == Draft((6, 7, 8))
    assert lookup.draft(history, 2, _greedy()) == Draft((6, 7))
    assert lookup.draft(np.array([1, 2, 3, 9]), 4, _greedy()) is None  # no n-gram repeats


def _sampler(seed: int) -> Sampler:
    return Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, seed=seed))


@pytest.mark.parametrize("q_kind", ["one-hot", "draft"])
def test_acceptance_test_keeps_the_target_distribution(q_kind):
    """The first token _accept gives is distributed as p, whatever q drafted it."""
    rng = np.random.default_rng(0)
    vocab, trials = 6, 20000
    logits = rng.normal(size=(2, vocab)).astype(np.float32) * 1.5
    p = np.exp(logits[0] - logits[0].max())
    p /= p.sum()
    q = rng.dirichlet(np.ones(vocab))
    sampler = _sampler(1)
    counts = np.zeros(vocab)
    history = np.zeros(8, dtype=np.int64)
    for _ in range(trials):
        d = int(rng.choice(vocab, p=q)) if q_kind == "draft" else 2
        draft = Draft((d,), (q,) if q_kind == "draft" else None)
        kept, after = _accept(logits, draft, sampler, history, 1)
        counts[kept[0] if kept else after] += 1
    _chi_square_holds(counts, p)


def _chi_square_holds(counts: np.ndarray, p: np.ndarray) -> None:
    """A chi-square test at the 0.001 level (critical values for up to 20 degrees of freedom
    below 45.3): frequent enough bins only."""
    expected = p * counts.sum()
    keep = expected >= 5
    chi2 = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
    assert chi2 < 45.3 and keep.sum() <= 21, (chi2, counts, expected)


def test_sampled_answers_keep_the_models_distribution(dirs, encode):
    """Second tokens of sampled answers with a draft model of other weights (so drafts are
    often rejected) follow the model's own distribution after the first token."""
    prompt = encode("Tell me about the little wren.")
    model = TorchBackend().load(dirs["main"], slots=1)
    draft = TorchBackend().load(dirs["other"], slots=1)
    speculator = Speculator(DraftModel(draft, model.vocab_size), always())
    session = KVSession(model)
    pairs = []
    for _ in range(600):
        params = SamplingParams(temperature=2.0, top_k=0, top_p=1.0)  # unseeded: seeded answers are not drafted
        pairs.append(tuple(itertools.islice(speculative_tokens(session, prompt, Sampler(params), speculator), 2)))
    assert speculator.stats.drafted > speculator.stats.accepted > 0  # both branches ran
    first = max(set(t for t, _ in pairs), key=[t for t, _ in pairs].count)
    seconds = [b for a, b in pairs if a == first]
    reference = KVSession(TorchBackend().load(dirs["main"], slots=1))
    logits, _ = reference.prefill([*prompt, first])
    p = Sampler(SamplingParams(temperature=2.0, top_k=0, top_p=1.0)).distribution(logits, [*prompt, first])
    top = np.argsort(p)[::-1][:12]  # the likeliest tokens, the rest as one bin
    counts = np.array([seconds.count(int(t)) for t in top] + [sum(b not in top for b in seconds)], float)
    _chi_square_holds(counts, np.append(p[top], 1 - p[top].sum()))


def test_policy_stops_drafting_below_break_even():
    policy = Policy()
    policy.new_answer()
    for _ in range(3):
        policy.decoded(0.010)
    assert policy.plan(100) > 0  # an even prior on acceptance: drafting looks worth a try
    for _ in range(10):  # every draft of 4 rejected at once, a verify costing 1.6 decodes
        policy.verified(5, 0.016, 0.0, 4, 0)
    assert policy.acceptance < 0.2
    plans = []
    for _ in range(100):
        plans.append(policy.plan(100))
        policy.decoded(0.010)
    # off, but for a probe after probe_every plain tokens and then after twice as many
    assert sum(1 for k in plans if k) == 2 and plans[:policy.probe_every].count(0) == policy.probe_every


def test_policy_drafts_long_when_drafts_are_kept():
    policy = Policy()
    policy.new_answer()
    for _ in range(3):
        policy.decoded(0.010)
    for _ in range(10):
        policy.verified(9, 0.014, 0.0, 8, 8)
    assert policy.plan(100) == 8 and policy.gain(8) > 3


class _Vocab:
    vocab_size = 100


def test_a_setting_names_a_known_drafter():
    with pytest.raises(ValueError, match="must be one of"):
        speculator_for("ngram", None, _Vocab())
    with pytest.raises(ValueError, match="needs a draft model"):
        speculator_for("draft-model", None, _Vocab())
    assert speculator_for("off", None, _Vocab()) is None
    spec = speculator_for("auto", None, _Vocab())
    assert spec is not None and isinstance(spec.drafter, PromptLookup)


class _Model(_Vocab):
    def __init__(self, exact: bool) -> None:
        self.verifies_exactly = exact


def test_auto_loads_no_draft_model_beside_a_model_that_cannot_verify_exactly(monkeypatch):
    """'auto' drafts only while verification is exact, so a draft model beside a model that
    does not verify exactly (a mixture of experts, CUDA graphs) would only cost memory."""
    loads = []

    class Drafted:
        def __init__(self, model, vocab_size, main) -> None:
            self.model = model

    monkeypatch.setattr(speculative, "DraftModel", Drafted)

    def draft_model():
        loads.append(1)
        return object()

    spec = speculator_for("auto", draft_model, _Model(exact=False))
    assert isinstance(spec.drafter, PromptLookup) and spec.exact_only and loads == []
    spec = speculator_for("auto", draft_model, _Model(exact=True))
    assert isinstance(spec.drafter, Drafted) and loads == [1]
    spec = speculator_for("draft-model", draft_model, _Model(exact=False))  # named: as asked
    assert isinstance(spec.drafter, Drafted) and not spec.exact_only and loads == [1, 1]


class _Answer:
    """A request's sink: the text and how it ended."""

    def __init__(self) -> None:
        self.text, self.reason = "", None
        self.done = threading.Event()

    def __call__(self, event) -> None:
        if isinstance(event, Delta):
            self.text += event.text
        elif isinstance(event, Finished):
            self.reason = event.reason
            self.done.set()


def _worker_answers(model_dir, slots: int, drafter: str, draft_dir=None) -> tuple[list[str], object]:
    tok = Tokenizer.from_dir(model_dir)
    worker = ModelWorker("spec", TorchBackend(), model_dir, tok, slots=slots, drafter=drafter, draft_dir=draft_dir)
    worker.loaded.result(timeout=60)
    if worker.speculator is not None:
        worker.speculator.policy = always()
    answers = []
    for text in PROMPTS:  # one at a time: a lone sequence is the one that speculates
        sink = _Answer()
        worker.submit(GenerationRequest(tok.encode(text), SamplingParams(temperature=0, max_tokens=30), sink))
        assert sink.done.wait(60)
        answers.append(sink.text)
    stats = worker.speculator.stats if worker.speculator is not None else None
    worker.close()
    return answers, stats


@pytest.mark.parametrize("slots", [1, 2])  # the serial loop, the batch scheduler
def test_the_worker_speculates_with_the_setting_and_keeps_greedy_answers(dirs, slots):
    plain, none = _worker_answers(dirs["main"], slots, "off")
    assert none is None
    for drafter, draft_dir in (("prompt-lookup", None), ("draft-model", dirs["main"])):
        answers, stats = _worker_answers(dirs["main"], slots, drafter, draft_dir)
        assert answers == plain, drafter
        assert stats.verify_steps > 0 and stats.accepted > 0, drafter


def test_speculation_settings_refuse_bad_values():
    check_setting(DRAFTER_KEY, "prompt-lookup")
    check_setting(DRAFT_MODELS_KEY, {"qwen3-8b": "qwen3-0.6b"})
    check_setting(DRAFT_MODELS_KEY, None)
    with pytest.raises(InvalidRequest, match="speculative must be one of"):
        check_setting(DRAFTER_KEY, "fast")
    for bad in (["qwen3-0.6b"], {"qwen3-8b": 3}, {"qwen3-8b": "qwen3-8b"}):
        with pytest.raises(InvalidRequest, match="draft_models must map"):
            check_setting(DRAFT_MODELS_KEY, bad)


def test_policy_stops_when_steps_measure_slower_than_plain_decoding():
    """Drafts all kept, but each step took longer than the tokens it gave would have taken
    plainly (costs the model of the step did not foresee): off, and a plain step now and then."""
    policy = Policy()
    policy.new_answer()
    for _ in range(3):
        policy.decoded(0.010)
    for _ in range(4):
        policy.verified(3, 0.011, 0.030, 2, 2)  # 3 tokens in 41 ms; plainly 30 ms
    policy.row_cost = policy.draft_cost = 0.0  # as if the cost model had missed it
    assert policy.gain(8) > 1.5 and policy.plan(100) == 0


def test_policy_stops_probing_where_drafting_costs_more_than_a_kept_draft_gives():
    """A draft model about as slow as the model: every draft kept, yet each step cost more
    than plain decoding; no probes after that (each would be slower), where a cheap drafter
    with the same acceptance goes on probing."""
    def probes(draft_seconds: float) -> int:
        policy = Policy()
        policy.new_answer()
        for _ in range(3):
            policy.decoded(0.010)
        for _ in range(6):
            policy.verified(3, 0.012, draft_seconds, 2, 0)  # drafts rejected: drafting stops
        count = 0
        for _ in range(400):
            if policy.plan(100):
                count += 1
                policy.verified(3, 0.012, draft_seconds, 2, 0)
            else:
                policy.decoded(0.010)
        return count

    assert probes(0.0) >= 2  # prompt lookup: a probe now and then
    assert probes(0.040) == 0  # 20 ms a drafted token, two plain tokens' time: never worth it


def test_policy_decodes_plainly_now_and_then_to_keep_its_measure():
    policy = Policy()
    policy.new_answer()
    for _ in range(3):
        policy.decoded(0.010)
    plans = []
    for _ in range(2 * policy.refresh_every + 2):
        k = policy.plan(100)
        plans.append(k)
        if k:
            policy.verified(k + 1, 0.012, 0.0, k, k)
        else:
            policy.decoded(0.010)
    assert plans.count(0) == 2 and plans[policy.refresh_every] == 0
