"""Continuous batching on the torch backend (and MLX, through mlx-lm's batched cache, where
it is installed): sequences decoded together produce exactly what each produces alone
(greedy, tiny random float32 models), join and leave between steps, are admitted by
priority and can be cancelled without disturbing the others."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.fixtures.tiny import make_tiny_model_dir
from wren.engine.events import Delta, Finished, FinishReason, Usage
from wren.engine.inference.backends.mlx import MLXBackend
from wren.engine.inference.backends.torch import TorchBackend
from wren.engine.inference.sampling import SamplingParams
from wren.engine.inference.worker import GenerationRequest, ModelWorker
from wren.engine.tokenize import Tokenizer

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
CHUNK = 32  # prefill chunk for the tiny models (256-token context): a 150-token prompt is several
BACKENDS = ["torch", pytest.param("mlx", marks=pytest.mark.skipif(
    not MLXBackend().available(), reason=f"{MLXBackend().unavailable_reason()}"))]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny"))


def _greedy_alone(model, prompt: list[int], steps: int) -> list[int]:
    logits, out = model.prefill(prompt, 0), []
    for i in range(steps):
        out.append(int(np.argmax(logits)))
        logits = model.decode(out[-1], len(prompt) + i)
    return out


@pytest.mark.parametrize("arch,overrides", [
    ("llama", {}), ("qwen3", {}), ("qwen2", {}),
    ("mistral", {"sliding_window": 6}),  # windows shorter than the prompts
])
def test_decode_batch_matches_each_sequence_alone(tmp_path, arch, overrides):
    model = TorchBackend().load(make_tiny_model_dir(tmp_path, arch, **overrides),
                                dtype="float32", slots=4)
    rng = np.random.default_rng(1)
    prompts = [list(map(int, rng.integers(3, 300, n))) for n in (5, 11, 2, 8)]
    alone = [_greedy_alone(model, p, 10) for p in prompts]
    # Out-of-order slots exercise the gathered (not viewed) cache rows.
    slots = [2, 0, 3, 1]
    logits = [model.prefill(p, 0, slot=s) for p, s in zip(prompts, slots)]
    together: list[list[int]] = [[] for _ in prompts]
    for i in range(10):
        tokens = [int(np.argmax(row)) for row in logits]
        for seq, token in zip(together, tokens):
            seq.append(token)
        logits = model.decode_batch(tokens, [len(p) + i for p in prompts], slots)
        assert logits.shape == (len(prompts), model.vocab_size)
    assert together == alone


@pytest.mark.skipif(not MLXBackend().available(), reason="MLX is not installed")
@pytest.mark.parametrize("arch,overrides", [("llama", {}), ("qwen3", {}), ("qwen2", {})])
def test_mlx_decode_batch_matches_each_sequence_alone(tmp_path, arch, overrides):
    """mlx-lm's batched cache: sequences right-aligned with their left padding masked."""
    model = MLXBackend().load(make_tiny_model_dir(tmp_path, arch, **overrides), dtype="float32", slots=4)
    assert model.slots == 4
    rng = np.random.default_rng(1)
    prompts = [list(map(int, rng.integers(3, 300, n))) for n in (5, 11, 2, 8)]
    alone = [_greedy_alone(model, p, 10) for p in prompts]
    slots = [2, 0, 3, 1]
    logits = [model.prefill(p, 0, slot=s) for p, s in zip(prompts, slots)]
    pos = [len(p) for p in prompts]
    together: list[list[int]] = [[] for _ in prompts]
    for i in range(10):
        tokens = [int(np.argmax(row)) for row in logits]
        for seq, token in zip(together, tokens):
            seq.append(token)
        if i == 5:  # slot 0 steps alone: the batch splits, and forms again the step after
            rows = model.decode_batch([tokens[j] for j in (0, 2, 3)], [pos[j] for j in (0, 2, 3)],
                                      [slots[j] for j in (0, 2, 3)])
            logits = [rows[0], model.decode(tokens[1], pos[1], slot=slots[1]), rows[1], rows[2]]
        else:
            logits = list(model.decode_batch(tokens, pos, slots))
        pos = [p + 1 for p in pos]
    assert together == alone


@pytest.mark.skipif(not MLXBackend().available(), reason="MLX is not installed")
def test_mlx_failed_batched_step_leaves_its_slots_usable(tiny_dir):
    model = MLXBackend().load(tiny_dir, dtype="float32", slots=2)
    prompts = [[5, 6, 7], [8, 9]]
    expected = [_greedy_alone(model, p, 4) for p in prompts]
    for slot, p in enumerate(prompts):
        model.prefill(p, 0, slot=slot)
    model.decode_batch([1, 2], [3, 2], [0, 1])  # the two slots now step as one batch
    network = model._model

    class Failing:  # the same network, whose forward pass fails
        def __getattr__(self, name):
            return getattr(network, name)

        def __call__(self, *args, **kwargs):
            raise RuntimeError("the step failed")

    model._model = Failing()
    with pytest.raises(RuntimeError, match="the step failed"):
        model.decode_batch([1, 2], [4, 3], [0, 1])
    model._model = network
    with pytest.raises(ValueError, match="past the 0 cached positions"):  # the slots start over
        model.prefill([1], 3, slot=0)
    assert [_greedy_alone(model, p, 4) for p in prompts] == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_decode_batch_rejects_shared_or_unknown_slots(tiny_dir, backend):
    model = _Slots(2, backend).load(tiny_dir)
    with pytest.raises(ValueError):
        model.decode_batch([1, 2], [0, 0], [1, 1])
    with pytest.raises(ValueError):
        model.decode_batch([1], [0], [2])
    with pytest.raises(ValueError):
        model.prefill([1], 0, slot=5)


class _Slots:
    """A backend, loading with a given number of KV slots."""

    def __init__(self, slots: int, backend: str = "torch") -> None:
        self.slots = slots
        self.backend = TorchBackend() if backend == "torch" else MLXBackend()

    def load(self, model_dir, *, dtype="auto"):
        return self.backend.load(model_dir, dtype="float32", slots=self.slots)


class _AfterPrefill(_Slots):
    """The torch backend, calling `hook(ids, start)` after each prefill (chunk)."""

    def __init__(self, slots: int, hook) -> None:
        super().__init__(slots)
        self.hook = hook

    def load(self, model_dir, *, dtype="auto"):
        model = super().load(model_dir)
        prefill = model.prefill

        def hooked(ids, start, slot=0, **options):  # options: final (TorchModel.partial_prefill)
            logits = prefill(ids, start, slot, **options)
            self.hook(ids, start)
            return logits

        model.prefill = hooked
        return model


class _Collect:
    def __init__(self, on_delta=None) -> None:
        self.events: list = []
        self.done = threading.Event()
        self.on_delta = on_delta

    def __call__(self, event) -> None:
        self.events.append(event)
        if isinstance(event, Delta) and self.on_delta:
            self.on_delta(self)
        if isinstance(event, Finished):
            self.done.set()

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Delta))

    @property
    def reason(self) -> FinishReason:
        return self.events[-1].reason

    @property
    def usage(self) -> Usage:
        return next(e for e in self.events if isinstance(e, Usage))


PROMPTS = ["The little wren sang", "What is the capital of France?", "Good morning! How",
           "Water boils at"]


def _run(worker: ModelWorker, requests: list[GenerationRequest], sinks: list[_Collect]):
    # Submitted before the model finishes loading, so they are all waiting at the first pass.
    for request in requests:
        worker.submit(request)
    worker.loaded.result(timeout=60)
    for sink in sinks:
        assert sink.done.wait(60)
    worker.close()


def _requests(tok, sinks, priorities=None, params=GREEDY):
    priorities = priorities or [0] * len(sinks)
    return [GenerationRequest(tok.encode(text), params, sink, priority=p)
            for text, sink, p in zip(PROMPTS, sinks, priorities)]


def _answers_alone(tiny_dir, tok, prompts: list[list[int]], params: list[SamplingParams],
                   backend: str = "torch") -> list[str]:
    """Each prompt's answer from a one-slot worker: nothing decoded beside it."""
    sinks = [_Collect() for _ in prompts]
    worker = ModelWorker("alone", _Slots(1, backend), tiny_dir, tok)
    _run(worker, [GenerationRequest(p, q, s) for p, q, s in zip(prompts, params, sinks)], sinks)
    return [s.text for s in sinks]


def _alone(tiny_dir, tok, backend: str = "torch") -> list[str]:
    return _answers_alone(tiny_dir, tok, [tok.encode(p) for p in PROMPTS], [GREEDY] * len(PROMPTS), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_batches_concurrent_requests_with_unchanged_output(tiny_dir, backend):
    tok = Tokenizer.from_dir(tiny_dir)
    expected = _alone(tiny_dir, tok, backend)
    sinks = [_Collect() for _ in PROMPTS]
    worker = ModelWorker("batched", _Slots(4, backend), tiny_dir, tok)
    _run(worker, _requests(tok, sinks, priorities=[0, 1, 1, 2]), sinks)
    assert [s.text for s in sinks] == expected
    assert all(s.reason in (FinishReason.LENGTH, FinishReason.STOP) for s in sinks)
    assert all(isinstance(s.events[-2], Usage) for s in sinks)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelling_one_sequence_leaves_the_others_intact(tiny_dir, backend):
    tok = Tokenizer.from_dir(tiny_dir)
    expected = _alone(tiny_dir, tok, backend)
    sinks = [_Collect() for _ in PROMPTS]
    requests = _requests(tok, sinks)
    sinks[1].on_delta = lambda sink: requests[1].cancel.set()  # stop after its first delta
    worker = ModelWorker("cancel", _Slots(4, backend), tiny_dir, tok)
    _run(worker, requests, sinks)
    assert sinks[1].reason is FinishReason.CANCELLED
    assert expected[1].startswith(sinks[1].text) and len(sinks[1].text) < len(expected[1])
    assert [s.text for i, s in enumerate(sinks) if i != 1] == [e for i, e in enumerate(expected) if i != 1]


def test_priority_decides_admission_when_slots_are_full(tiny_dir):
    tok = Tokenizer.from_dir(tiny_dir)
    order: list[int] = []
    lock = threading.Lock()

    def sink_for(i):
        def note(sink):
            with lock:
                if i not in order:
                    order.append(i)
        return _Collect(on_delta=note)

    sinks = [sink_for(i) for i in range(3)]
    # Two slots, three requests: the urgent one (submitted last) must be among the first two.
    requests = [GenerationRequest(tok.encode(PROMPTS[i]), GREEDY, sinks[i], priority=p)
                for i, p in enumerate([2, 2, 0])]
    worker = ModelWorker("prio", _Slots(2), tiny_dir, tok)
    _run(worker, requests, sinks)
    assert order.index(2) < 2 and order[-1] == 1


def test_prompt_cancelled_during_prefill_frees_its_slot(tiny_dir):
    tok = Tokenizer.from_dir(tiny_dir)
    long_prompt = (tok.encode(" ".join(PROMPTS)) * 3)[:150]  # several prefill chunks
    sinks = [_Collect(), _Collect(), _Collect()]
    requests = [GenerationRequest(long_prompt, GREEDY, sinks[0], priority=1),
                GenerationRequest(tok.encode(PROMPTS[0]), GREEDY, sinks[1]),
                GenerationRequest(tok.encode(PROMPTS[1]), GREEDY, sinks[2], priority=3)]

    def cancel_after_first_chunk(ids, start):
        if len(ids) == CHUNK:
            requests[0].cancel.set()

    worker = ModelWorker("prefill", _AfterPrefill(2, cancel_after_first_chunk), tiny_dir, tok, prefill_chunk=CHUNK)
    _run(worker, requests, sinks)
    assert sinks[0].reason is FinishReason.CANCELLED and sinks[0].text == ""
    assert sinks[0].usage.completion_tokens == 0
    # Only two slots: the third request ran in the one the cancelled prompt gave back.
    assert sinks[1].reason is not FinishReason.CANCELLED
    assert sinks[2].reason is not FinishReason.CANCELLED and sinks[2].usage.completion_tokens > 0


LONGER = SamplingParams(temperature=0.0, max_tokens=24)
PREEMPT_PROMPTS = [PROMPTS[1], PROMPTS[0], PROMPTS[2]]


def _preemption_run(tiny_dir, tok, on_urgent_delta=None, backend: str = "torch"):
    """Two priority-2 answers fill both slots; after the first one's third delta a
    priority-0 request arrives. Returns the sinks, the requests and the event log. (The
    first prompt is one whose answer streams a delta per token on the tiny model.)"""
    log: list[tuple[str, int]] = []
    lock = threading.Lock()
    requests: list[GenerationRequest] = []
    worker = ModelWorker("preempt", _Slots(2, backend), tiny_dir, tok)

    def sink_for(i):
        def note(sink):
            with lock:
                log.append(("delta", i))
                if i == 0 and log.count(("delta", 0)) == 3:
                    worker.submit(requests[2])  # from the inference thread, mid-answer
            if i == 2 and on_urgent_delta:
                on_urgent_delta(requests)
        collect = _Collect(on_delta=note)
        original = collect.__call__

        def record(event, _i=i, _original=original):
            if isinstance(event, Finished):
                with lock:
                    log.append(("finished", _i))
            _original(event)
        return record, collect

    pairs = [sink_for(i) for i in range(3)]
    for text, (record, _), priority, params in zip(PREEMPT_PROMPTS, pairs, [2, 2, 0], [LONGER, LONGER, GREEDY]):
        requests.append(GenerationRequest(tok.encode(text), params, record, priority=priority))
    for request in requests[:2]:
        worker.submit(request)
    worker.loaded.result(timeout=60)
    sinks = [collect for _, collect in pairs]
    for sink in sinks:
        assert sink.done.wait(60), log
    worker.close()
    return sinks, requests, log


@pytest.mark.parametrize("backend", BACKENDS)
def test_urgent_request_pauses_a_less_urgent_sequence_which_resumes_unchanged(tiny_dir, backend):
    tok = Tokenizer.from_dir(tiny_dir)
    expected = _answers_alone(tiny_dir, tok, [tok.encode(p) for p in PREEMPT_PROMPTS], [LONGER, LONGER, GREEDY],
                              backend)
    sinks, _, log = _preemption_run(tiny_dir, tok, backend=backend)
    # Both slots were busy, yet the urgent answer started before either of them finished.
    first_urgent = log.index(("delta", 2))
    assert first_urgent < log.index(("finished", 0)) and first_urgent < log.index(("finished", 1))
    # The paused one (the later started of the two) made no progress while the urgent
    # answer ran, and still produced exactly what it produces alone, as did the others.
    assert ("delta", 1) not in log[first_urgent : log.index(("finished", 2))]
    assert [s.text for s in sinks] == expected
    assert all(s.reason in (FinishReason.LENGTH, FinishReason.STOP) for s in sinks)


def test_cancelling_a_paused_sequence_finishes_it_and_spares_the_others(tiny_dir):
    tok = Tokenizer.from_dir(tiny_dir)
    expected = _answers_alone(tiny_dir, tok, [tok.encode(p) for p in PREEMPT_PROMPTS], [LONGER, LONGER, GREEDY])
    sinks, _, _ = _preemption_run(tiny_dir, tok, on_urgent_delta=lambda reqs: reqs[1].cancel.set())
    assert sinks[1].reason is FinishReason.CANCELLED
    assert expected[1].startswith(sinks[1].text) and len(sinks[1].text) < len(expected[1])
    assert [sinks[0].text, sinks[2].text] == [expected[0], expected[2]]


def test_sequence_paused_while_reading_its_prompt_reads_it_again_and_answers_unchanged(tiny_dir):
    tok = Tokenizer.from_dir(tiny_dir)
    long_prompt = (tok.encode(" ".join(PROMPTS)) * 3)[:150]  # several prefill chunks
    prompts = [tok.encode(PROMPTS[1]), long_prompt, tok.encode(PROMPTS[2])]
    params = [LONGER, GREEDY, GREEDY]

    expected = _answers_alone(tiny_dir, tok, prompts, params)
    sinks = [_Collect() for _ in prompts]
    requests = [GenerationRequest(p, q, s, priority=r) for p, q, s, r in zip(prompts, params, sinks, [2, 2, 0])]

    submitted = threading.Event()

    def urgent_after_first_chunk(ids, start):
        if len(ids) == CHUNK and start == 0 and not submitted.is_set():
            submitted.set()
            worker.submit(requests[2])  # the long prompt is one chunk in

    worker = ModelWorker("paused-prefill", _AfterPrefill(2, urgent_after_first_chunk), tiny_dir, tok,
                         prefill_chunk=CHUNK)
    _run(worker, requests[:2], sinks)
    assert [s.text for s in sinks] == expected
    # The urgent answer came before the long prompt's answer, which had to wait for a slot.
    assert sinks[2].usage.time_to_first_token < sinks[1].usage.time_to_first_token


def test_closing_a_worker_frees_the_models_weights(tiny_dir):
    """Loading freezes the objects alive then out of garbage collection (full collections
    would pause the window); closing must hand them back, or a model switch leaks."""
    import gc
    import weakref

    tok = Tokenizer.from_dir(tiny_dir)
    worker = ModelWorker("freed", _Slots(2), tiny_dir, tok)
    model = worker.loaded.result(timeout=60)
    weight = weakref.ref(model._model.layers[0].attention.wqkv.weight)
    assert gc.get_freeze_count() > 0
    worker.close()
    assert gc.get_freeze_count() == 0  # handed back: a cycle through the model can be collected
    del model
    worker.model = None
    gc.collect()
    assert weight() is None
