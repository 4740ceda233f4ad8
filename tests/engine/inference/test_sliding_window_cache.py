"""The sliding-window layers' KV cache (engine.inference.models.attention's rings): a
sliding layer keeps its last window + SLACK positions, not the whole context, and every
path gives transformers' logits for sequences that run far past the ring (transformers
masks a full cache instead).

The model is the tiny Gemma 3 of tests/data/families/gemma3 (a window of 8 on layers 0-4,
full attention on layer 5), loaded with a 1024-token context, so its rings hold 264."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from wren.engine.inference.generate import KVSession  # noqa: E402
from wren.engine.inference.models.attention import SLACK  # noqa: E402

HF_DIR = Path(__file__).resolve().parents[2] / "data" / "families" / "gemma3" / "hf"
WINDOW = 8
CONTEXT = 1024
# float32 both sides. Over 600 positions Wren's logits drift from float64's by up to 1.5e-3
# (measured; with the rings or with a full cache alike, and on the prompt and decode paths
# alike), transformers' float32 ones by 1.2e-4; a key seen or missed by mistake moves them
# by tenths.
TOL = 3e-3


def _ids(n: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(3, 400, n)]


@pytest.fixture(scope="module")
def reference():
    """transformers' logits at every position of a sequence (no cache, its own masks)."""
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_pretrained(HF_DIR, dtype=torch.float32,
                                                              attn_implementation="eager").eval()

    def logits(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].numpy()

    return logits


@pytest.fixture(scope="module")
def model():
    from wren.engine.inference.backends.torch import TorchBackend

    return TorchBackend("cpu").load(HF_DIR, dtype="float32", compile=False, context_length=CONTEXT, slots=2)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert np.abs(got - want).max() < TOL, np.abs(got - want).max()
    assert got.argmax() == want.argmax()


def test_sliding_layers_keep_only_their_ring(model):
    layers = model._model.layers
    sizes = [layer.attention.k_slots.shape[2] for layer in layers]
    assert sizes == [WINDOW + SLACK] * 5 + [CONTEXT]
    local = sum(layer.attention.k_slots.nbytes for layer in layers[:5])
    assert local * CONTEXT == 5 * layers[5].attention.k_slots.nbytes * (WINDOW + SLACK)


def test_chunked_prompt_and_decode_past_the_ring_match_transformers(model, reference):
    ids = _ids(2 * (WINDOW + SLACK) + 40, seed=1)  # wraps every ring twice
    want = reference(ids)
    prompt = 300
    for start in range(0, prompt, 100):  # chunks longer than the window: the gather path
        got = model.prefill(ids[start:start + 100], start)
        _close(got, want[start + 99])
    for pos in range(prompt, len(ids)):  # one token at a time, through two wraps
        _close(model.decode(ids[pos], pos), want[pos])


def test_a_chunk_longer_than_the_ring(model, reference):
    ids = _ids(WINDOW + SLACK + 50, seed=2)
    want = reference(ids)
    _close(model.prefill(ids, 0), want[-1])
    _close(model.decode(7, len(ids)), reference([*ids, 7])[-1])


def test_batched_rows_past_the_window_match_transformers(model, reference):
    a, b = _ids(290, seed=3), _ids(275, seed=4)
    model.prefill(a[:-1], 0, slot=0)
    model.prefill(b[:-1], 0, slot=1)
    for _ in range(3):
        rows = model.decode_batch([a[-1], b[-1]], [len(a) - 1, len(b) - 1], [0, 1])
        _close(rows[0], reference(a)[-1])
        _close(rows[1], reference(b)[-1])
        a, b = [*a, int(rows[0].argmax())], [*b, int(rows[1].argmax())]


def test_going_back_within_the_slack_reuses_the_cache_and_further_starts_over(model, reference):
    session = KVSession(model)
    first = _ids(400, seed=5)
    session.prefill(first)
    near = first[:390] + _ids(5, seed=6)  # back 10 positions: the rings still hold them
    logits, reused = session.prefill(near)
    assert reused == 390
    _close(logits, reference(near)[-1])
    assert not model.kv_resumable(390 - SLACK, 0)  # what the rings lost
    far = first[:100] + _ids(5, seed=7)  # back to 100: long overwritten in the rings
    logits, reused = session.prefill(far)
    assert reused == 0
    _close(logits, reference(far)[-1])


def test_prefix_export_and_import_keep_the_rings(model, reference):
    ids = _ids(320, seed=8)
    model.prefill(ids, 0)
    state, nbytes = model.export_kv(len(ids))
    assert nbytes < sum(layer.attention.k_slots.nbytes * 2 for layer in model._model.layers)
    model.prefill(_ids(300, seed=9), 0)  # another conversation overwrites slot 0
    model.import_kv(state, len(ids))
    _close(model.decode(11, len(ids)), reference([*ids, 11])[-1])


def test_a_compiled_ring_step_keeps_its_position_symbolic(reference):
    """The one-token step compiles once for every position past the window (decode.py's
    background compile sweeps them all): a ring write indexed by the position would
    specialise the graph on it, one compile per token."""
    from torch._dynamo.utils import counters

    from wren.engine.inference.backends.torch import TorchBackend

    model = TorchBackend("cpu").load(HF_DIR, dtype="float32", compile=False, context_length=CONTEXT, slots=1)
    transformer = model._model
    ids = _ids(WINDOW + SLACK + 20, seed=10)
    want = reference(ids)

    def run_block(layer, h, cos, sin, start):
        return layer(h, cos, sin, start)

    compiled = torch.compile(run_block, dynamic=True, fullgraph=True)
    model.prefill(ids[:12], 0)
    before = counters["stats"]["unique_graphs"]
    with torch.inference_mode():
        transformer.decode_block = compiled  # the model's hook for compiled decode steps
        for pos in range(12, len(ids)):
            _close(model.decode(ids[pos], pos), want[pos])
    assert counters["stats"]["unique_graphs"] - before <= 4  # sliding and global layers


def test_the_memory_estimate_counts_the_rings():
    """engine.modelhub.sizing's KV estimate (what a model needs to run at a context) counts
    a sliding layer's ring, not the whole context: Gemma 3 4B at 8k, 610 MiB, not 2,176."""
    import json

    from wren.engine.modelhub.sizing import kv_cache_bytes

    config = json.loads((HF_DIR / "config.json").read_text())
    per_position = 2 * config["num_key_value_heads"] * config["head_dim"] * 4
    assert kv_cache_bytes(config, CONTEXT) == per_position * (5 * (WINDOW + SLACK) + CONTEXT)
    assert kv_cache_bytes(config, 200) == per_position * 6 * 200  # no ring is smaller there
    llama = config | {"model_type": "llama", "layer_types": None}
    assert kv_cache_bytes(llama, CONTEXT) == per_position * 6 * CONTEXT
