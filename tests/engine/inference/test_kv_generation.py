"""KVSession prefix reuse and the generation loop, on a recording fake and on real backends."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.fixtures.tiny import make_tiny_model_dir, train_tiny_tokenizer
from wren.engine.errors import InvalidRequest
from wren.engine.inference.backend import ModelBase
from wren.engine.inference.generate import KVSession, generate_tokens
from wren.engine.inference.sampling import Sampler, SamplingParams

torch = pytest.importorskip("torch")
from wren.engine.inference.backends.torch import TorchBackend  # noqa: E402

# A prefill over a reused prefix vs a cold prefill: only float32 rounding differs
# (measured below 1e-5).
REUSE_TOL = 5e-5


class RecordingModel(ModelBase):
    """Logits that depend on the cached ids, so a wrong cache shows up as wrong logits."""

    backend = "fake"
    vocab_size = 16

    def __init__(self, context_length: int = 32) -> None:
        self.context_length = context_length
        self.cache: list[int] = []
        self.calls: list[tuple[str, tuple[int, ...], int]] = []

    def _logits(self) -> np.ndarray:
        out = np.zeros(self.vocab_size, dtype=np.float32)
        out[sum(self.cache) % self.vocab_size] = 1.0
        return out

    def prefill(self, ids, start):
        self.calls.append(("prefill", tuple(ids), start))
        assert start <= len(self.cache)
        self.cache[start:] = list(ids)
        return self._logits()

    def decode(self, token, pos):
        self.calls.append(("decode", (token,), pos))
        assert pos == len(self.cache)
        self.cache.append(token)
        return self._logits()

    def close(self):
        pass


def greedy() -> Sampler:
    return Sampler(SamplingParams(temperature=0))


def test_session_reuses_the_longest_common_prefix():
    model = RecordingModel()
    session = KVSession(model)
    assert session.prefill([1, 2, 3, 4])[1] == 0
    assert session.prefill([1, 2, 3, 4, 5, 6])[1] == 4
    assert model.calls[-1] == ("prefill", (5, 6), 4)
    first, reused = session.prefill([1, 2, 9])
    assert reused == 2  # diverges after two ids
    assert model.calls[-1] == ("prefill", (9,), 2)
    calls = len(model.calls)
    # The same prompt again (a pre-warmed draft sent as is) needs no forward pass: the
    # logits after its last id were kept.
    again, reused = session.prefill([1, 2, 9])
    assert reused == 3 and len(model.calls) == calls and (again == first).all()
    assert model.cache == [1, 2, 9] and session.cached_ids == (1, 2, 9)
    assert session.last_reused == 3
    # A shorter prompt runs its last id again.
    assert session.prefill([1, 2])[1] == 1
    assert model.calls[-1] == ("prefill", (2,), 1)


def test_generated_tokens_are_reused_by_the_next_turn():
    model = RecordingModel()
    session = KVSession(model)
    answer = list(itertools.islice(generate_tokens(session, [3, 1, 4], greedy()), 4))
    assert model.cache == [3, 1, 4, *answer[:-1]]  # the last sampled id is never decoded
    _, reused = session.prefill([3, 1, 4, *answer, 7])
    assert reused == 3 + len(answer) - 1


def test_generation_stops_by_itself_when_the_context_is_full():
    session = KVSession(RecordingModel(context_length=12))
    out = list(generate_tokens(session, list(range(10)), greedy()))
    # Positions 10 and 11 are decoded; the token sampled after position 11 is yielded too.
    assert len(out) == 3 and len(session) == 12


def test_prompt_errors_are_invalid_requests():
    session = KVSession(RecordingModel(context_length=4))
    with pytest.raises(InvalidRequest, match="no tokens"):
        session.prefill([])
    with pytest.raises(InvalidRequest, match="5 tokens"):
        session.prefill([1, 2, 3, 4, 5])


def test_failed_prefill_forgets_the_unreliable_tail():
    model = RecordingModel()
    session = KVSession(model)
    session.prefill([1, 2, 3, 4])
    model.prefill = lambda ids, start: (_ for _ in ()).throw(RuntimeError("boom"))
    with pytest.raises(RuntimeError):
        session.prefill([1, 2, 7, 8])
    assert session.cached_ids == (1, 2)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("kvgen"), "qwen3", seed=5)


@pytest.fixture(scope="module")
def chat_ids():
    tok = train_tiny_tokenizer()

    def encode(*turns: str) -> list[int]:
        text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n"
                       for role, content in zip(itertools.cycle(["user", "assistant"]), turns))
        return tok.encode(text + "<|im_start|>assistant\n").ids

    return encode


def _backends():
    from wren.engine.inference.backends.mlx import MLXBackend

    yield pytest.param(lambda: TorchBackend("cpu"), id="torch-cpu")
    yield pytest.param(MLXBackend, id="mlx", marks=pytest.mark.skipif(
        not MLXBackend().available(), reason="mlx is not installed"))


@pytest.mark.parametrize("make_backend", list(_backends()))
def test_prefix_reuse_gives_the_same_logits_as_a_cold_prefill(make_backend, tiny_dir, chat_ids):
    model = make_backend().load(tiny_dir)
    session = KVSession(model)
    first = chat_ids("What is the capital of France?")
    answer = list(itertools.islice(generate_tokens(session, first, greedy()), 12))
    second = chat_ids("What is the capital of France?", "Paris.", "And of Spain?")
    warm, reused = session.prefill(second)
    assert reused > len(first) // 2
    # A shorter prompt that shares a prefix: the backend must drop the stale tail.
    third = first[:-3] + [5, 6]
    warm_third, reused_third = session.prefill(third)
    assert reused_third == len(first) - 3

    cold = make_backend().load(tiny_dir)
    assert np.abs(warm - cold.prefill(second, 0)).max() < REUSE_TOL
    assert np.abs(warm_third - cold.prefill(third, 0)).max() < REUSE_TOL
    assert answer  # generation ran through the same session


def test_greedy_generation_is_deterministic(tiny_dir, chat_ids):
    prompt = chat_ids("Write a short poem about the sea.")
    runs = []
    for _ in range(2):
        session = KVSession(TorchBackend().load(tiny_dir))
        runs.append(list(itertools.islice(generate_tokens(session, prompt, greedy()), 20)))
    # Same again on a warm session whose cache holds the previous answer.
    runs.append(list(itertools.islice(generate_tokens(session, prompt, greedy()), 20)))
    assert runs[0] == runs[1] == runs[2]


def test_seeded_sampling_is_reproducible(tiny_dir, chat_ids):
    prompt = chat_ids("Tell me about the little wren.")
    model = TorchBackend().load(tiny_dir)

    def sample(seed: int) -> list[int]:
        params = SamplingParams(temperature=1.0, top_p=0.95, repetition_penalty=1.1, seed=seed)
        return list(itertools.islice(generate_tokens(KVSession(model), prompt, Sampler(params)), 24))

    a = sample(1234)
    assert a == sample(1234)
    assert a != sample(4321)  # 24 draws from broad distributions: collision odds are negligible
