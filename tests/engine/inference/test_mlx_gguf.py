"""The MLX backend runs model folders that keep the GGUF (model.gguf + config.json)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

from tests.engine.modelhub.conftest import TinySpec, gguf_name, hf_weights, write_gguf
from tests.fixtures.ggml_blocks import ALL_TYPES, FP16_FIELDS, random_blocks

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

# float32 on both sides, as test_torch_mlx_parity.py; these uniform-weight models' logits
# reach +-10, and differences up to 1.1e-4 were measured (1e-4 there, for smaller logits).
FP32_TOL = 3e-4
PROMPT = list(range(3, 40))
CONTINUATION = [50, 61, 72, 83]


def gguf_folder(root: Path, spec: TinySpec, qtype: T = T.F32, *, seed: int = 1,
                tensor_types: dict[str, T] | None = None) -> Path:
    """A model folder as Wren's importer makes it: model.gguf beside config and tokenizer."""
    from wren.engine.modelhub.gguf_import import convert_gguf

    root.mkdir(parents=True)
    src = write_gguf(root / "source.gguf", spec, hf_weights(spec, seed), qtype, tensor_types=tensor_types)
    folder = root / "model"
    folder.mkdir()
    convert_gguf(src, folder)
    assert (folder / "model.gguf").read_bytes() == src.read_bytes()
    assert not list(folder.glob("*.safetensors"))
    return folder


def reference_folder(gguf_dir: Path, weights: dict[str, np.ndarray]) -> Path:
    """The same model as an HF safetensors folder holding `weights` (HF names and order)."""
    from safetensors.numpy import save_file

    ref = gguf_dir.parent / "reference"
    shutil.copytree(gguf_dir, ref, ignore=shutil.ignore_patterns("model.gguf"))
    save_file({name: np.ascontiguousarray(w, dtype=np.float32) for name, w in weights.items()},
              str(ref / "model.safetensors"))
    return ref


def file_values(w: np.ndarray, qtype: T) -> np.ndarray:
    """What a GGUF tensor written from `w` in `qtype` holds, as float32. Quantizing is per
    row, so llama.cpp's Q/K row permutation does not change it."""
    if w.ndim == 1 or qtype == T.F32:
        return w
    if qtype == T.F16:
        return w.astype(np.float16).astype(np.float32)
    return dequantize(quantize(w, qtype), qtype)


def steps(model, prompt=PROMPT, continuation=CONTINUATION):
    """Logits after the prompt, after each decoded token, and after re-prefilling over a
    rewound cache."""
    out = [model.prefill(prompt, 0)]
    for i, tok in enumerate(continuation):
        out.append(model.decode(tok, len(prompt) + i))
    out.append(model.prefill([9, 10, 11], 20))
    out.append(model.decode(12, 23))
    return out


def assert_same_logits(a_model, b_model, tol: float = FP32_TOL) -> None:
    for a, b in zip(steps(a_model), steps(b_model), strict=True):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        assert a.std() > 0.5  # not flat
        assert np.abs(a - b).max() < tol


# llama: Q/K rows permuted by llama.cpp, tied embeddings; qwen2: stored as is, q/k/v biases.
SPECS = {"llama": TinySpec("llama"), "qwen2": TinySpec("qwen2", tied=False)}
CASES = [(arch, q) for arch in SPECS for q in (T.F32, T.F16, T.Q8_0, T.Q4_0)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlx-gguf")
    return {(arch, q): gguf_folder(root / f"{arch}-{q.name}", SPECS[arch], q) for arch, q in CASES}


@pytest.mark.parametrize(("arch", "qtype"), CASES, ids=[f"{a}-{q.name}" for a, q in CASES])
def test_gguf_folder_gives_the_logits_of_its_values(arch, qtype, folders):
    """Names, Q/K order and the quantized layers are right: the logits equal those of the
    same values stored as float32 safetensors."""
    from wren.engine.inference.backends.mlx import MLXBackend

    folder = folders[arch, qtype]
    ref = reference_folder(folder, {n: file_values(w, qtype) for n, w in hf_weights(SPECS[arch], 1).items()})
    model = MLXBackend().load(folder, dtype="float32")
    assert model.vocab_size == SPECS[arch].vocab and model.context_length == 256
    assert_same_logits(model, MLXBackend().load(ref, dtype="float32"))
    shutil.rmtree(ref)


@pytest.mark.parametrize(("arch", "qtype"), CASES, ids=[f"{a}-{q.name}" for a, q in CASES])
def test_mlx_and_torch_agree_on_a_gguf_folder(arch, qtype, folders, monkeypatch):
    """Both backends hold the file's values. Torch runs its exact path: its kernels quantize
    the activations to 8 bits when decoding, as llama.cpp does, which moves these logits by
    up to ~0.9 (tests/engine/inference/test_qkernels.py covers them)."""
    pytest.importorskip("torch")
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend
    from wren.engine.inference.quant import kernels

    monkeypatch.setattr(kernels, "available", lambda: False)
    folder = folders[arch, qtype]
    assert_same_logits(MLXBackend().load(folder, dtype="float32"), TorchBackend("cpu").load(folder, dtype="float32"))


def test_biases_a_file_leaves_out_are_zeros(tmp_path):
    """qwen2 builds q/k/v with biases; a file without one of them runs with zeros there."""
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.modelhub.gguf_import import convert_gguf

    spec = SPECS["qwen2"]
    weights = hf_weights(spec, 4)
    del weights["model.layers.1.self_attn.k_proj.bias"]
    src = write_gguf(tmp_path / "source.gguf", spec, weights)
    folder = tmp_path / "model"
    folder.mkdir()
    convert_gguf(src, folder)
    zero = np.zeros(spec.kv_heads * spec.head_dim, dtype=np.float32)
    ref = reference_folder(folder, weights | {"model.layers.1.self_attn.k_proj.bias": zero})
    assert_same_logits(MLXBackend().load(folder, dtype="float32"), MLXBackend().load(ref, dtype="float32"))


def test_quantized_types_stay_quantized(folders):
    import mlx.nn as nn

    from wren.engine.inference.backends.mlx import MLXBackend

    model = MLXBackend().load(folders["llama", T.Q4_0])._model
    q = model.model.layers[0].self_attn.q_proj
    assert isinstance(q, nn.QuantizedLinear) and (q.bits, q.group_size) == (4, 32)
    assert isinstance(model.model.embed_tokens, nn.QuantizedEmbedding)
    # "auto" keeps the file's float16 scales on a GPU; on mlx's CPU device it computes in
    # float32 (half-precision quantized products are software-emulated there)
    on_gpu = mx.default_device().type == mx.DeviceType.gpu
    assert q.scales.dtype == (mx.float16 if on_gpu else mx.float32)
    model = MLXBackend().load(folders["qwen2", T.Q8_0])._model
    down = model.model.layers[1].mlp.down_proj
    assert isinstance(down, nn.QuantizedLinear) and (down.bits, down.group_size) == (8, 32)
    assert isinstance(model.model.layers[0].input_layernorm.weight, mx.array)


# Scales (d, dmin) for random K-quant blocks that keep a tiny model's activations O(1).
_K_SCALE = {T.Q2_K: 0.02, T.Q3_K: 0.01, T.Q4_K: 0.002, T.Q5_K: 0.001, T.Q6_K: 0.0003}


def _set_blocks(path: Path, name: str, qtype: T, seed: int) -> None:
    """Overwrite a K-quant tensor of a GGUF with random blocks of moderate scale."""
    from wren.engine.modelhub.gguf_file import GGUFFile

    with GGUFFile(path) as gguf:
        info = gguf.tensors[name]
    block, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (info.n_bytes // size, size), dtype=np.uint8)
    for at in FP16_FIELDS[qtype]:
        d = (_K_SCALE[qtype] * rng.uniform(0.5, 1.0, len(blocks))).astype(np.float16)
        blocks[:, at:at + 2] = d.view(np.uint8).reshape(-1, 2)
    with open(path, "r+b") as fh:
        fh.seek(info.offset)
        fh.write(blocks.tobytes())


def test_mixed_types_load_with_widened_k_quants(tmp_path, caplog):
    """A Q4_0 file whose output is Q6_K (llama.cpp's usual choice), with a Q4_K embedding
    (which mx.load gets wrong), a Q2_K and a BF16 tensor: every value reaches the model,
    Q6_K and Q2_K as float16 (MLX has no layout for their 16-value groups)."""
    import mlx.nn as nn

    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.modelhub.gguf_file import GGUFFile
    from wren.engine.modelhub.gguf_import import convert_gguf, unpermute_rows

    spec = TinySpec("llama", hidden=256, tied=False, ffn=256)
    types = {"output.weight": T.Q6_K, "token_embd.weight": T.Q4_K, "blk.0.attn_v.weight": T.Q2_K,
             "blk.1.ffn_down.weight": T.BF16}
    root = tmp_path / "mixed"
    root.mkdir()
    src = write_gguf(root / "source.gguf", spec, hf_weights(spec, 2), T.Q4_0, tensor_types=types)
    for i, name in enumerate(("output.weight", "token_embd.weight", "blk.0.attn_v.weight")):
        _set_blocks(src, name, types[name], seed=i)
    folder = root / "model"
    folder.mkdir()
    convert_gguf(src, folder)
    # What MLX holds: the file's values, Q2_K and Q6_K rounded to float16, the rest exact.
    hf_names = {gguf_name(name): name for name in hf_weights(spec, 2)}
    held = {}
    with GGUFFile(src) as gguf:
        for info in gguf.tensors.values():
            values = gguf.read(info.name)
            if info.ggml_type == T.BF16:
                values = (values.astype(np.uint32) << 16).view(np.float32)
            values = values.astype(np.float32)
            if info.ggml_type in (T.Q2_K, T.Q6_K):
                values = values.astype(np.float16).astype(np.float32)
            if info.name.endswith(("attn_q.weight", "attn_k.weight")):
                values = unpermute_rows(values, spec.heads if "attn_q" in info.name else spec.kv_heads)
            held[hf_names[info.name]] = values
    ref = reference_folder(folder, held)
    with caplog.at_level(logging.INFO, logger="wren.engine.inference.backends.mlx_gguf"):
        model = MLXBackend().load(folder, dtype="float32")
    assert "1 Q6_K tensors widened to float16" in caplog.text
    assert "1 Q2_K tensors widened to float16" in caplog.text
    assert "Q4_K" not in caplog.text
    embed = model._model.model.embed_tokens  # Q4_K stays 4-bit
    assert isinstance(embed, nn.QuantizedEmbedding) and (embed.bits, embed.group_size) == (4, 32)
    assert model._model.lm_head.weight.dtype == mx.float32  # Q6_K: widened, then cast to float32
    assert_same_logits(model, MLXBackend().load(ref, dtype="float32"))


def _one_tensor_gguf(path: Path, qtype: T, rows: int = 4, cols: int = 256) -> tuple[Path, np.ndarray]:
    """A GGUF holding one random `qtype` tensor, and its values as gguf.quants reads them."""
    import gguf

    raw = random_blocks(qtype, rows, cols, seed=int(qtype))
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("x.weight", raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if qtype == T.BF16:
        return path, (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return path, dequantize(raw, qtype).astype(np.float32)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=[t.name for t in ALL_TYPES])
def test_each_type_reads_as_the_table_says(qtype, tmp_path):
    """Per type: quantized in MLX's layout with the file's exact values (Q4_K repacked
    here), kept, or widened to float16; the rest refused with the tensor and type named."""
    from wren.engine.errors import UnsupportedQuantization
    from wren.engine.inference.backends import mlx_gguf
    from wren.engine.modelhub.gguf_file import GGUFFile

    path, expected = _one_tensor_gguf(tmp_path / f"{qtype.name}.gguf", qtype)
    with GGUFFile(path) as gguf:
        if qtype not in mlx_gguf.RUNS:
            with pytest.raises(UnsupportedQuantization,
                               match=rf"MLX cannot run {qtype.name} tensors \(x\.weight\); use the torch backend"):
                mlx_gguf.read_tensors(gguf)
            return
        got = mlx_gguf.read_tensors(gguf)
    if qtype in mlx_gguf.QUANTIZED:
        assert set(got) == {"x.weight", "x.scales", "x.biases"} and got["x.weight"].dtype == mx.uint32
        bits = mlx_gguf.QUANTIZED[qtype]
        values = mx.dequantize(got["x.weight"], got["x.scales"].astype(mx.float32),
                               got["x.biases"].astype(mx.float32), group_size=32, bits=bits)
        np.testing.assert_array_equal(np.array(values), expected)
        return
    values = got["x.weight"]
    if qtype in (T.F32, T.BF16):  # BF16 bit for bit, not mx.load's float16
        assert values.dtype == {T.F32: mx.float32, T.BF16: mx.bfloat16}[qtype]
        np.testing.assert_array_equal(np.array(values.astype(mx.float32)), expected)
    else:  # F16 as stored; Q2_K and Q6_K widened, rounded to float16
        assert values.dtype == mx.float16
        np.testing.assert_array_equal(np.array(values.astype(mx.float32)),
                                      expected.astype(np.float16).astype(np.float32))


def test_q4_k_repacks_exactly_in_row_chunks():
    from wren.engine.inference.backends.mlx_gguf import q4_k_to_mlx

    raw = random_blocks(T.Q4_K, 5, 512, seed=9)
    packed, scales, biases = q4_k_to_mlx(raw.reshape(-1), (5, 512), chunk_rows=2)
    assert packed.shape == (5, 64) and scales.shape == biases.shape == (5, 16)
    values = mx.dequantize(mx.array(packed), mx.array(scales), mx.array(biases), group_size=32, bits=4)
    np.testing.assert_array_equal(np.array(values), dequantize(raw, T.Q4_K))


@pytest.mark.parametrize("qtype", [T.Q5_0, T.Q5_1, T.Q3_K, T.Q5_K], ids=lambda t: t.name)
def test_refused_types_are_those_mx_load_cannot_read(qtype, tmp_path):
    """If a newer MLX reads one of these, the table in mlx_gguf should say so."""
    path, _ = _one_tensor_gguf(tmp_path / "x.gguf", qtype)
    with pytest.raises(RuntimeError, match="gguf"):
        mx.load(str(path))


def test_unsupported_type_fails_the_load_naming_tensor_and_type(tmp_path):
    from wren.engine.errors import UnsupportedQuantization
    from wren.engine.inference.backends.mlx import MLXBackend

    spec = TinySpec("qwen2")
    folder = gguf_folder(tmp_path / "q5", spec, T.Q8_0, tensor_types={"blk.1.ffn_down.weight": T.Q5_0})
    with pytest.raises(UnsupportedQuantization,
                       match=r"MLX cannot run Q5_0 tensors \(blk\.1\.ffn_down\.weight\); use the torch backend"):
        MLXBackend().load(folder)


def test_damaged_gguf_is_named(tmp_path):
    from wren.engine.errors import ModelFileError
    from wren.engine.inference.backends.mlx import MLXBackend

    folder = gguf_folder(tmp_path / "cut", TinySpec("llama"), T.Q4_0)
    data = (folder / "model.gguf").read_bytes()
    (folder / "model.gguf").write_bytes(data[:-1000])
    with pytest.raises(ModelFileError, match=r"model\.gguf is truncated"):
        MLXBackend().load(folder)
