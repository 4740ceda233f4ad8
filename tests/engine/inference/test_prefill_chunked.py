"""Chunked prefill on the torch backend (tiny random float32 models with a long context):
the same logits as reading the prompt in one pass, progress before the answer on both the
batched and the one-at-a-time paths, and a cancel that lands within one chunk."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.fixtures.tiny import make_tiny_model_dir
from wren.engine.events import Delta, Finished, FinishReason, PrefillProgress, Usage
from wren.engine.inference.backends.torch import TorchBackend
from wren.engine.inference.sampling import SamplingParams
from wren.engine.inference.worker import GenerationRequest, ModelWorker
from wren.engine.tokenize import Tokenizer

CONTEXT = 2048
CHUNK = 64
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-long"), max_position_embeddings=CONTEXT)


@pytest.mark.parametrize("arch,overrides", [
    ("llama", {}),
    ("qwen3", {}),
    ("mistral", {"sliding_window": 100}),  # chunks past the window: the windowed mask
])
def test_chunked_prefill_gives_the_logits_of_one_pass(tmp_path, arch, overrides):
    model_dir = make_tiny_model_dir(tmp_path, arch, max_position_embeddings=CONTEXT, **overrides)
    model = TorchBackend().load(model_dir, dtype="float32", slots=2, compile="off")
    ids = list(map(int, np.random.default_rng(3).integers(3, 390, 2000)))
    chunk = 256
    starts = range(0, len(ids), chunk)
    checked = {starts[0], starts[len(starts) // 2], starts[-1]}  # first, middle, last (2000 - 1792)
    for start in starts:
        end = min(start + chunk, len(ids))
        chunked = model.prefill(ids[start:end], start, slot=1)  # continues the slot's cache
        if start in checked:
            whole = model.prefill(ids[:end], 0)  # slot 0 reads the same prefix in one pass
            np.testing.assert_allclose(chunked, whole, rtol=1e-5, atol=1e-5)
    # Past the first chunk the cache rows that produced them match too.
    layer = model._model.layers[-1].attention
    np.testing.assert_allclose(layer.k_slots[1, :, : len(ids)].numpy(), layer.k_slots[0, :, : len(ids)].numpy(),
                               rtol=1e-5, atol=1e-5)


class _Sink:
    def __init__(self, on_event=None):
        self.events: list = []
        self.finished = threading.Event()
        self.on_event = on_event

    def __call__(self, event) -> None:
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
        if isinstance(event, Finished):
            self.finished.set()

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, Delta))

    def progress(self) -> list[PrefillProgress]:
        return [e for e in self.events if isinstance(e, PrefillProgress)]


def _answer(worker: ModelWorker, prompt: list[int], on_event=None) -> _Sink:
    sink = _Sink(on_event)
    worker.submit(GenerationRequest(prompt, GREEDY, sink))
    assert sink.finished.wait(60)
    return sink


def _prompt(tok: Tokenizer, n: int) -> list[int]:
    words = " ".join(f"wren{i} sings" for i in range(n))
    return tok.encode_chat([{"role": "user", "content": words}])


@pytest.mark.parametrize("slots", [2, 1], ids=["batched", "one-at-a-time"])
def test_progress_rises_to_the_total_before_the_first_delta_and_the_answer_is_unchanged(long_dir, slots):
    tok = Tokenizer.from_dir(long_dir)
    prompt = _prompt(tok, 90)
    assert 8 * CHUNK < len(prompt) < CONTEXT - 20
    chunked = ModelWorker("chunked", TorchBackend(), long_dir, tok, dtype="float32", slots=slots, prefill_chunk=CHUNK)
    whole = ModelWorker("whole", TorchBackend(), long_dir, tok, dtype="float32", slots=slots, prefill_chunk=CONTEXT)
    try:
        got, reference = _answer(chunked, prompt), _answer(whole, prompt)
    finally:
        chunked.close()
        whole.close()
    assert got.text == reference.text and got.text
    assert not reference.progress()  # one chunk: nothing to report
    progress = got.progress()
    first_delta = next(i for i, e in enumerate(got.events) if isinstance(e, Delta))
    assert all(got.events.index(p) < first_delta for p in progress)
    dones = [p.done for p in progress]
    assert dones == list(range(0, len(prompt) - 1, CHUNK)) + [len(prompt)]
    assert {p.total for p in progress} == {len(prompt)}
    assert next(e for e in got.events if isinstance(e, Usage)).prompt_tokens == len(prompt)


@pytest.mark.parametrize("slots", [2, 1], ids=["batched", "one-at-a-time"])
def test_cancel_while_reading_ends_within_one_chunk(long_dir, slots):
    tok = Tokenizer.from_dir(long_dir)
    prompt = _prompt(tok, 90)
    worker = ModelWorker("cancel", TorchBackend(), long_dir, tok, dtype="float32", slots=slots, prefill_chunk=CHUNK)
    model = worker.loaded.result(timeout=60)
    calls: list[int] = []
    real_prefill = model.prefill

    def counting_prefill(ids, start, *args, **kwargs):
        calls.append(len(ids))
        return real_prefill(ids, start, *args, **kwargs)

    model.prefill = counting_prefill
    request_box: list[GenerationRequest] = []

    def stop_at_third_chunk(event):
        if isinstance(event, PrefillProgress) and event.done >= 2 * CHUNK:
            request_box[0].cancel.set()  # the third chunk is about to run

    sink = _Sink(stop_at_third_chunk)
    request = GenerationRequest(prompt, GREEDY, sink)
    request_box.append(request)
    try:
        worker.submit(request)
        assert sink.finished.wait(60)
    finally:
        worker.close()
    assert sink.events[-1] == Finished(FinishReason.CANCELLED)
    assert sink.text == ""
    assert [p.done for p in sink.progress()] == [0, CHUNK, 2 * CHUNK]
    assert calls == [CHUNK, CHUNK, CHUNK]  # the chunk in flight, then nothing more
    assert next(e for e in sink.events if isinstance(e, Usage)).completion_tokens == 0
