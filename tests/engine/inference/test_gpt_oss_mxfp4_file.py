"""The tiny gpt-oss fixture (tests/data/families/make_gpt_oss.py): llama.cpp's converter writes
its experts as MXFP4, Wren reads them back as exactly transformers' expert weights, and a file
whose MXFP4 scale is out of range is refused where its tensor is read, by name."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from safetensors.torch import load_file

from wren.engine.errors import ModelFileError
from wren.engine.inference.models.weights import GGUFWeights
from wren.engine.inference.quant import ggml

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "families" / "gpt_oss"
LAYERS, EXPERTS, HIDDEN, INNER = 2, 32, 64, 64


def expert_rows(reader: GGUFReader, name: str) -> tuple[int, torch.Tensor]:
    tensor = next(t for t in reader.tensors if t.name == name)
    rows = int(np.prod(tensor.shape[1:]))  # GGUF lists [cols, rows, experts]
    return int(tensor.tensor_type), torch.from_numpy(np.array(tensor.data)).reshape(rows, -1)


def test_the_converter_writes_mxfp4_experts_that_read_back_as_transformers_weights() -> None:
    reader = GGUFReader(FIXTURE / "model.gguf")
    hf = load_file(FIXTURE / "hf" / "model.safetensors")
    for layer in range(LAYERS):
        experts = f"model.layers.{layer}.mlp.experts."
        gate_up = hf[experts + "gate_up_proj"]  # [E, hidden, 2 * inner], gate and up interleaved
        want = {"gate": gate_up[..., ::2], "up": gate_up[..., 1::2], "down": hf[experts + "down_proj"]}
        for part, weight in want.items():
            qtype, raw = expert_rows(reader, f"blk.{layer}.ffn_{part}_exps.weight")
            assert qtype == ggml.MXFP4, part
            got = ggml.dequantize(raw, qtype, weight.shape[1])  # [E * out, in]
            expected = weight.transpose(1, 2).reshape(-1, weight.shape[1])
            assert torch.equal(got, expected), f"layer {layer} {part}"


def test_an_out_of_range_scale_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    broken = tmp_path / "model.gguf"
    shutil.copy(FIXTURE / "model.gguf", broken)
    reader = GGUFReader(FIXTURE / "model.gguf")
    tensor = next(t for t in reader.tensors if t.name == "blk.1.ffn_down_exps.weight")
    block = 5 * 2 + 1  # row 5's second block (two blocks of 32 a row of 64)
    with open(broken, "r+b") as f:
        f.seek(int(tensor.data_offset) + block * 17)
        f.write(bytes([0xFF]))
    config = {"num_attention_heads": 4, "num_key_value_heads": 2}
    weights = GGUFWeights(broken, config)
    try:
        with pytest.raises(ModelFileError) as err:
            weights.get("model.layers.1.mlp.experts.down_proj.weight")
    finally:
        weights.close()
    message = str(err.value)
    assert "tensor blk.1.ffn_down_exps.weight" in message and "block 1 of row 5" in message
    assert "0xFF (NaN in OCP MX)" in message
