"""A model split between two devices (layers [0, k) on one, [k, L) on the other, as llama.cpp's
-ngl) gives the unsplit model's logits. The CPU stands in for both sides: the split's code
path (each tensor placed by name, each layer's cache on its layer's device, the hidden
state and the step's inputs moved at the boundary, the head after the last layer) runs the
same whatever the devices are; tests/engine/inference/test_gpu_split_device.py-style checks
with a real GPU run in bench/device (a GPU is not here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf.constants import GGMLQuantizationType as T

from tests.engine.modelhub.conftest import TinySpec, hf_weights, write_gguf
from wren.engine.inference.backends.torch import TorchBackend
from wren.engine.inference.models.offload import Placement, placed
from wren.engine.inference.quant.modules import QTensor, QuantLinear

LAYERS = 4
PROMPT = list(range(5, 29))
STEPS = [40, 41, 42]
# A split with a bfloat16 first side is as close to float32 as an all-bfloat16 model, within
# this factor (measured: 1.14 at most over these steps).
MIXED_SLACK = 1.5


def _folder(root, tied: bool, qtype: T):
    from wren.engine.modelhub.gguf_import import convert_gguf

    spec = TinySpec(hidden=256, heads=4, kv_heads=2, ffn=512, layers=LAYERS, tied=tied)
    root.mkdir(parents=True)
    src = write_gguf(root / "source.gguf", spec, hf_weights(spec, seed=3), qtype)
    folder = root / "model"
    folder.mkdir()
    convert_gguf(src, folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    return {True: _folder(root / "tied", True, T.Q4_0), False: _folder(root / "untied", False, T.Q8_0)}


def _load(folder, placement=None):
    return TorchBackend("cpu").load(folder, compile="off", context_length=64, slots=2, placement=placement)


def _run(model) -> list[np.ndarray]:
    """Prefill in slot 0 and 1, decode slot 0, then a batched step of both slots."""
    out = [model.prefill(PROMPT, 0, 0), model.prefill(PROMPT[:9], 0, 1)]
    pos = len(PROMPT)
    for token in STEPS:
        out.append(model.decode(token, pos))
        pos += 1
    out.append(model.decode(7, 9, slot=1))
    out.append(model.decode_batch([50, 51], [pos, 10], [0, 1]))
    out.append(model.prefill([60, 61, 62], pos + 1, 0))  # a prompt after a cached history
    return out


@pytest.mark.parametrize("tied", [True, False], ids=["tied-Q4_0", "untied-Q8_0"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_split_model_gives_the_unsplit_logits(folders, tied, k):
    whole = _load(folders[tied])
    placement = Placement.split(LAYERS, k, "cpu", "cpu", first_dtype=torch.float32, tied=tied)
    split = _load(folders[tied], placement)
    inner = split._model
    # two runs of layers, cut at k, each layer's cache where its weights are
    assert [(first, end) for first, end, _, _ in inner.stages.runs] == [(0, k), (k, LAYERS)]
    assert whole._model.stages.runs[0][:2] == (0, LAYERS) and len(whole._model.stages.runs) == 1
    for expected, got in zip(_run(whole), _run(split), strict=True):
        np.testing.assert_array_equal(got, expected)  # the same ops on the same values: exact
    state, _ = split.export_kv(len(PROMPT))
    reference, _ = whole.export_kv(len(PROMPT))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(state, reference, strict=True))


def test_a_split_with_a_bfloat16_first_side_stays_close(folders):
    # The GPU side's bfloat16 against the CPU side's float32: the boundary casts both ways.
    # Its distance from the float32 model is no more than a bfloat16 model's (these uniform
    # random weights give logits of +-10, where bfloat16 rounds them to 1/16 and ~1 apart).
    whole = _load(folders[False])
    bf16 = TorchBackend("cpu").load(folders[False], compile="off", context_length=64, slots=2, dtype="bfloat16")
    placement = Placement.split(LAYERS, 2, "cpu", "cpu", first_dtype=torch.bfloat16, tied=False)
    split = _load(folders[False], placement)
    layers = split._model.layers
    assert layers[0].attention.k_slots.dtype == torch.bfloat16 and layers[3].attention.k_slots.dtype == torch.float32
    assert split._model.norm.weight.dtype == torch.bfloat16  # the head is on the first side
    for expected, narrow, got in zip(_run(whole), _run(bf16), _run(split), strict=True):
        assert np.abs(got - expected).max() <= MIXED_SLACK * np.abs(narrow - expected).max()


def test_placement_sends_each_tensor_to_its_side():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    placement = Placement.split(32, 20, "cuda", "cpu", tied=False)
    assert placement.side("model.layers.19.mlp.up_proj.weight") == (cuda, torch.bfloat16)
    assert placement.side("model.layers.20.input_layernorm.weight") == (cpu, torch.float32)
    assert placement.side("lm_head.weight")[0] == cuda and placement.side("model.norm.weight")[0] == cuda
    assert placement.side("model.embed_tokens.weight")[0] == cpu  # untied and split: only gathered from
    assert Placement.split(32, 20, tied=True).side("model.embed_tokens.weight")[0] == cuda  # it is the head
    assert Placement.split(32, 32).side("model.embed_tokens.weight")[0] == cuda
    nothing = Placement.split(32, 0)
    assert {nothing.side(n)[0] for n in ("lm_head.weight", "model.layers.0.x", "model.embed_tokens.weight")} == {cpu}
    with pytest.raises(ValueError, match="0..32"):
        Placement.split(32, 33)


def test_placed_blocks_keep_their_bytes():
    raw = torch.randint(0, 255, (4, 34), dtype=torch.uint8)
    weight = QTensor(raw, int(T.Q8_0), (4, 32))
    table = {"model.layers.0.self_attn.o_proj.weight": weight, "model.layers.0.input_layernorm.weight": torch.ones(32)}
    get = placed(table.__getitem__, Placement.split(2, 1, "cpu", "cpu", first_dtype=torch.bfloat16))
    moved = get("model.layers.0.self_attn.o_proj.weight")
    assert isinstance(moved, QTensor) and torch.equal(moved.raw, raw)  # blocks as stored, not widened
    assert get("model.layers.0.input_layernorm.weight").dtype == torch.bfloat16


def test_a_split_model_is_never_captured_or_compiled(folders):
    from wren.engine.inference.models.cuda_graphs import CudaGraphDecode

    placement = Placement.split(LAYERS, 2, "cpu", "cpu", first_dtype=torch.float32, tied=True)
    split = _load(folders[True], placement)
    with pytest.raises(ValueError, match="one GPU"):
        CudaGraphDecode(split._model)
    assert any(isinstance(m, QuantLinear) for m in split._model.layers[0].modules())
