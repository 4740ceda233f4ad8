"""A long prompt read in chunks keeps float32 activations only for the last rows of its final
chunk (engine.inference.quant.modules.prompt_activations): an earlier chunk's last rows pick
no token, so they take the integer prompt path like the rest of it. The flag travels from the
worker (batch.py, worker._prefill_chunks) through KVSession.prefill and TorchModel.prefill to
Transformer.prefill."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType
from gguf.quants import quantize

from tests.engine.inference.test_prefill_chunked import _answer, _prompt
from tests.fixtures.tiny import make_tiny_model_dir
from wren.engine.inference.backends.torch import TorchBackend
from wren.engine.inference.generate import KVSession
from wren.engine.inference.models import llama
from wren.engine.inference.quant import kernels, modules
from wren.engine.inference.quant.modules import QTensor, QuantLinear
from wren.engine.inference.worker import ModelWorker
from wren.engine.tokenize import Tokenizer

Q8_0 = int(GGMLQuantizationType.Q8_0)
CHUNK = 80  # above PROMPT_INTEGER_ROWS: each chunk takes the integer path


def _as_q8_0(linear: torch.nn.Linear) -> QuantLinear:
    w = linear.weight.detach().float().numpy()
    raw = torch.from_numpy(np.ascontiguousarray(quantize(w, GGMLQuantizationType.Q8_0)))
    return QuantLinear([QTensor(raw, Q8_0, tuple(w.shape))])


@pytest.fixture()
def quantized(tmp_path, monkeypatch):
    """The tiny llama with its block linears in Q8_0 blocks (QuantLinear), wide enough for
    the integer prompt path (PROMPT_INTEGER_MIN_WIDTH lowered for it)."""
    if not kernels.available() or not kernels.integer_prompt(Q8_0):
        pytest.skip("needs Wren's kernels with the integer prompt path")
    monkeypatch.setattr(modules, "PROMPT_INTEGER_MIN_WIDTH", 0)
    model = TorchBackend().load(make_tiny_model_dir(tmp_path, max_position_embeddings=512),
                                dtype="float32", slots=1, compile="off")
    for layer in model._model.layers:
        attention, ffn = layer.attention, layer.feed_forward
        attention.wqkv, attention.wo = _as_q8_0(attention.wqkv), _as_q8_0(attention.wo)
        ffn.w13, ffn.w2 = _as_q8_0(ffn.w13), _as_q8_0(ffn.w2)
    yield model
    model.close()


def _recording(monkeypatch) -> list[tuple[int, bool]]:
    """Each kernels.qlinear_parts call's (rows, exact), the real kernels still running."""
    calls: list[tuple[int, bool]] = []
    real = kernels.qlinear_parts

    def record(x, raws, qtypes, rows, exact=False):
        calls.append((x.shape[0], bool(exact)))
        return real(x, raws, qtypes, rows, exact)

    monkeypatch.setattr(kernels, "qlinear_parts", record)
    return calls


def test_earlier_chunks_take_the_integer_path_for_every_row(quantized, monkeypatch):
    ids = list(map(int, np.random.default_rng(4).integers(3, 390, 3 * CHUNK - 10)))
    linears = 4 * len(quantized._model.layers)
    tail = modules.PROMPT_EXACT_TAIL
    # The same chunks with every chunk final (each keeping its tail exact): the reading before.
    before = KVSession(quantized)
    for end in (CHUNK, 2 * CHUNK):
        before.prefill(ids[:end])
    want, _ = before.prefill(ids)

    calls = _recording(monkeypatch)
    session = KVSession(quantized)
    for end in (CHUNK, 2 * CHUNK):
        session.prefill(ids[:end], final=False)
        assert calls == [(CHUNK, False)] * linears  # every row integer, no exact tail
        calls.clear()
    got, reused = session.prefill(ids)
    assert reused == 2 * CHUNK
    rows = len(ids) - 2 * CHUNK
    assert calls.count((rows, False)) == linears and calls.count((tail, True)) == linears
    # The final chunk's logits: as before within the integer path's rounding, the same pick.
    assert int(np.argmax(got)) == int(np.argmax(want))
    np.testing.assert_allclose(got, want, atol=0.05 * float(np.abs(want).max()))
    assert not np.array_equal(got, want)  # the earlier tails did change (else nothing was tested)


def test_a_chunks_logits_are_not_kept_for_a_later_prefill(quantized, monkeypatch):
    ids = list(map(int, np.random.default_rng(5).integers(3, 390, CHUNK)))
    session = KVSession(quantized)
    session.prefill(ids, final=False)
    calls = _recording(monkeypatch)
    logits, reused = session.prefill(ids)  # the same ids as a whole prompt: its last row runs again
    assert reused == len(ids) - 1 and calls  # computed, not the chunk's logits handed back
    assert calls == [(1, True)] * len(calls)  # one row: float32 activations


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-tail"), max_position_embeddings=2048)


@pytest.mark.parametrize("slots", [2, 1], ids=["batched", "one-at-a-time"])
def test_the_worker_marks_only_the_last_chunk_final(long_dir, slots, monkeypatch):
    seen: list[tuple[int, bool]] = []
    real = llama.Transformer.prefill

    def record(self, ids, start, slot=0, final=True):
        seen.append((start, final))
        return real(self, ids, start, slot, final)

    monkeypatch.setattr(llama.Transformer, "prefill", record)
    tok = Tokenizer.from_dir(long_dir)
    prompt = _prompt(tok, 40)
    chunk = 64
    worker = ModelWorker("tail", TorchBackend(), long_dir, tok, dtype="float32", slots=slots, prefill_chunk=chunk)
    try:
        assert _answer(worker, prompt).text
    finally:
        worker.close()
    starts = list(range(0, len(prompt) - 1, chunk))
    assert len(starts) >= 3
    # the target (all but the last id) in chunks, only its last one final; then the last id
    want = [(start, start == starts[-1]) for start in starts] + [(len(prompt) - 1, True)]
    assert seen[-len(want):] == want
