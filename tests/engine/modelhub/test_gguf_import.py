"""GGUF import (the file kept as model.gguf) and reading its weights back, on tiny files
written by the tests themselves."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from wren.engine.errors import ModelFileError, UnsupportedArchitecture, UnsupportedQuantization
from wren.engine.inference.backends import read_model_config
from wren.engine.inference.models.weights import open_weights
from wren.engine.inference.quant.modules import QTensor
from wren.engine.modelhub.gguf_file import GGUFFile
from wren.engine.modelhub.gguf_import import import_gguf, unpermute_rows

torch = pytest.importorskip("torch")

# worst-case |dequantized - original| for weights uniform in [-1, 1]
TOLERANCE = {Q.F32: 0.0, Q.F16: 5e-4, Q.BF16: 4e-3, Q.Q8_0: 5e-3, Q.Q5_1: 0.035, Q.Q5_0: 0.07,
             Q.Q4_1: 0.07, Q.Q4_0: 0.14}


def load_tensors(folder: Path) -> dict[str, torch.Tensor | QTensor]:
    """Every tensor as the torch backend reads it from the imported folder."""
    weights = open_weights(folder, read_model_config(folder))
    try:
        return {name: weights.get(name) for name in weights.names}
    finally:
        weights.close()


def leftovers(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if p.name.startswith(".partial")]


@pytest.mark.parametrize("qtype", list(TOLERANCE), ids=lambda q: q.name)
def test_every_supported_type_round_trips(tiny_gguf, tmp_path, qtype):
    path, weights = tiny_gguf(qtype=qtype)
    summary = import_gguf(path, tmp_path / "out")
    assert (tmp_path / "out" / "model.gguf").read_bytes() == path.read_bytes()  # kept as it is
    assert not list((tmp_path / "out").glob("*.safetensors"))
    stored = load_tensors(tmp_path / "out")

    assert set(stored) == set(weights)
    assert summary.parameters == sum(w.size for w in weights.values())
    for name, original in weights.items():
        got = stored[name]
        if original.ndim == 1:
            assert got.dtype == torch.float32 and np.array_equal(got.numpy(), original)
            continue
        if qtype == Q.F32:  # float32 weights are what a dense layer takes
            assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
            values = got.numpy()
        else:
            assert isinstance(got, QTensor) and got.qtype == qtype, name  # the file's blocks, not floats
            values = got.dequantize().numpy()
        assert np.abs(values - original).max() <= TOLERANCE[qtype], name
        if qtype not in (Q.F32, Q.F16):
            # blocks run along rows, so row order (the Q/K permutation) does not change them:
            # the result must be gguf's own dequantization, bit for bit
            assert np.array_equal(values, dequantize(quantize(original, qtype), qtype)), name


@pytest.mark.parametrize("qtype", [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K], ids=lambda q: q.name)
def test_k_quants_read_as_gguf_dequantizes_them(kit, tiny_gguf, tmp_path, qtype):
    spec = kit.TinySpec(hidden=256, ffn=256)
    path, _ = tiny_gguf(spec, qtype=qtype)
    independent = gguf.GGUFReader(str(path))
    with np.errstate(all="ignore"), GGUFFile(path) as mine:
        for tensor in independent.tensors:
            expected = dequantize(tensor.data, tensor.tensor_type)
            assert np.array_equal(mine.read(tensor.name), expected, equal_nan=True), tensor.name
    with np.errstate(all="ignore"):
        summary = import_gguf(path, tmp_path / "out")
    assert summary.quantization  # named after the file type or the dominant tensor type
    up = load_tensors(tmp_path / "out")["model.layers.0.mlp.up_proj.weight"]
    assert isinstance(up, QTensor) and up.qtype == qtype
    with np.errstate(all="ignore"):
        expected = dequantize(independent.get_tensor(
            [t.name for t in independent.tensors].index("blk.0.ffn_up.weight")).data, qtype)
    assert np.array_equal(up.dequantize().numpy(), expected, equal_nan=True)


def test_unsupported_quantization_names_type_tensor_and_file(tiny_gguf, tmp_path):
    path, _ = tiny_gguf(tensor_types={"blk.0.ffn_up.weight": Q.Q8_1})
    with pytest.raises(UnsupportedQuantization) as err:
        import_gguf(path, tmp_path / "out")
    assert str(err.value).startswith(f"{path}: tensor blk.0.ffn_up.weight is Q8_1, which Wren cannot run (it runs F32,")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_truncated_file_names_the_tensor(tiny_gguf, tmp_path):
    path, _ = tiny_gguf()
    last = max(gguf.GGUFReader(str(path)).tensors, key=lambda t: t.data_offset)
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(ModelFileError, match=rf"is truncated: tensor {last.name} needs \d+ bytes") as err:
        import_gguf(path, tmp_path / "out")
    assert str(path) in str(err.value) and f"file ends at byte {len(data) - 100}" in str(err.value)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_file_cut_inside_the_header(tiny_gguf, tmp_path):
    path, _ = tiny_gguf()
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(ModelFileError, match="is truncated: its header") as err:
        import_gguf(path, tmp_path / "out")
    assert str(path) in str(err.value)


@pytest.mark.parametrize("content, message", [
    (b"PK\x03\x04 this is a zip, not a model", "is not a GGUF file"),
    (b"", "is not a GGUF file"),
    (b"GGUF\x63\x00\x00\x00" + bytes(24), "GGUF version 99"),
])
def test_non_gguf_files(tmp_path, content, message):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelFileError, match=message) as err:
        import_gguf(path, tmp_path / "out")
    assert str(path) in str(err.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ModelFileError, match="does not exist"):
        import_gguf(tmp_path / "nope.gguf", tmp_path / "out")
    with pytest.raises(ModelFileError, match="is not a file"):
        import_gguf(tmp_path, tmp_path / "out")


def test_other_architectures_are_refused_by_name(kit, tmp_path):
    spec = kit.TinySpec(arch="phi2")
    path = kit.write_gguf(tmp_path / "phi.gguf", spec, kit.hf_weights(spec))
    with pytest.raises(UnsupportedArchitecture, match="'phi2'"):
        import_gguf(path, tmp_path / "out")


def test_mixture_of_experts_is_refused(tiny_gguf, tmp_path):
    path, _ = tiny_gguf(meta={"llama.expert_count": 8})
    with pytest.raises(UnsupportedArchitecture, match="mixture-of-experts"):
        import_gguf(path, tmp_path / "out")


@pytest.mark.parametrize("rows, cols, heads", [(64, 64, 4), (32, 64, 2), (576, 8, 9), (16, 1, 1)])
def test_unpermute_inverts_llama_cpp_permute(kit, rows, cols, heads):
    w = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols).squeeze()
    assert np.array_equal(unpermute_rows(kit.llama_cpp_permute(w, heads), heads), w)


def test_config_and_tokenizer_files(kit, tiny_gguf, tmp_path):
    spec = kit.TinySpec(tied=False, rope_theta=50000.0, eps=1e-6)
    path, _ = tiny_gguf(spec)
    import_gguf(path, tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0, "max_position_embeddings": 256, "vocab_size": spec.vocab,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    }.items() <= config.items()
    tok_config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert tok_config["bos_token"] == "<|im_start|>" and tok_config["eos_token"] == "<|im_end|>"
    assert tok_config["add_bos_token"] is False and "<|im_start|>" in tok_config["chat_template"]
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2, 0]
    assert (tmp_path / "out" / "tokenizer.json").is_file()


def test_progress_reports_bytes_up_to_the_total(tiny_gguf, tmp_path):
    path, _ = tiny_gguf(qtype=Q.Q8_0)
    calls: list[tuple[int, int]] = []
    import_gguf(path, tmp_path / "out", progress=lambda done, total: calls.append((done, total)))
    total = calls[0][1]
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:])) and {t for _, t in calls} == {total}


def test_qwen2_without_biases_gets_zero_biases(kit, tmp_path):
    spec = kit.TinySpec(arch="qwen2")
    weights = {k: v for k, v in kit.hf_weights(spec).items() if not k.endswith(".bias")}
    import_gguf(kit.write_gguf(tmp_path / "q.gguf", spec, weights), tmp_path / "out")
    out = tmp_path / "out"
    bias = open_weights(out, read_model_config(out)).get("model.layers.1.self_attn.k_proj.bias")
    assert bias.shape == (32,) and not bias.any()


def llama3_rope_factors(theta: float, head_dim: int, factor: float) -> np.ndarray:
    """How llama.cpp's converter computes rope_freqs for Llama 3.1 (low 1, high 4, window 8192)."""
    out = []
    for freq in 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim):
        wavelen = 2 * math.pi / freq
        if wavelen < 8192 / 4:
            out.append(1.0)
        elif wavelen > 8192:
            out.append(factor)
        else:
            smooth = (8192 / wavelen - 1) / 3
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("tamper", [False, True])
def test_llama3_rope_freqs_become_rope_scaling(kit, tiny_gguf, tmp_path, tamper):
    factors = llama3_rope_factors(500000.0, 16, 32.0)
    if tamper:
        factors[-2] *= 1.5
    path, _ = tiny_gguf(kit.TinySpec(rope_theta=500000.0), extra_tensors={"rope_freqs.weight": factors})
    if tamper:
        with pytest.raises(UnsupportedArchitecture, match="rope_freqs"):
            import_gguf(path, tmp_path / "out")
        return
    import_gguf(path, tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["rope_scaling"] == {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    assert "rope_freqs.weight" not in load_tensors(tmp_path / "out")
