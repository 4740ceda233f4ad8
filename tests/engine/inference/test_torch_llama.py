"""Wren's torch llama-family model: KV-cache correctness, precisions, and bad model files."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.fixtures.tiny import ARCHS, make_tiny_model_dir, tiny_config
from wren.engine.errors import ModelFileError, UnsupportedArchitecture

torch = pytest.importorskip("torch")
from wren.engine.inference.backends.torch import TorchBackend  # noqa: E402
from wren.engine.inference.models.llama import ModelArgs  # noqa: E402

# Decoding from the cache vs re-running the whole sequence: same maths, different matmul
# shapes, so only float32 rounding differs (measured up to 7.5e-6 on logits with std ~2-3).
KV_TOL = 5e-5
# bf16 vs fp32 on the same weights: measured max abs diff ~0.04-0.09 on logits with std
# ~1.5-3, cosine similarity > 0.9999.
BF16_ABS_TOL = 0.25
BF16_MIN_COSINE = 0.999


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("torch_llama")
    return {arch: make_tiny_model_dir(root / arch, arch, seed=11) for arch in ARCHS}


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_decode_equals_a_full_forward(arch, model_dirs):
    model = TorchBackend().load(model_dirs[arch])
    seq = [int(x) for x in np.random.default_rng(0).integers(3, model.vocab_size, 24)]
    stepped = [model.prefill(seq[:8], 0)]
    stepped += [model.decode(tok, pos) for pos, tok in enumerate(seq[8:], start=8)]
    for end, got in enumerate(stepped, start=8):
        cold = model.prefill(seq[:end], 0)  # overwrites the cache from position 0
        assert np.abs(got - cold).max() < KV_TOL, f"position {end - 1}"


def test_sliding_window_prefill_and_decode_agree(tmp_path):
    d = make_tiny_model_dir(tmp_path, "mistral", sliding_window=5)
    model = TorchBackend().load(d)
    seq = list(range(3, 23))
    whole = model.prefill(seq, 0)
    model.prefill(seq[:3], 0)
    for pos in range(3, len(seq) - 1):
        model.decode(seq[pos], pos)
    assert np.abs(model.decode(seq[-1], len(seq) - 1) - whole).max() < KV_TOL
    # Prefill over a cached prefix, so the mask is offset and windowed at once.
    assert np.abs(model.prefill(seq[12:], 12) - whole).max() < KV_TOL


@pytest.mark.parametrize("arch", ARCHS)
def test_bfloat16_is_close_to_float32(arch, model_dirs):
    fp32 = TorchBackend().load(model_dirs[arch], dtype="float32")
    bf16 = TorchBackend().load(model_dirs[arch], dtype="bfloat16")
    ids = list(range(3, 50))
    for a, b in [(fp32.prefill(ids, 0), bf16.prefill(ids, 0)), (fp32.decode(7, 47), bf16.decode(7, 47))]:
        assert b.dtype == np.float32
        cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
        assert np.abs(a - b).max() < BF16_ABS_TOL
        assert cosine > BF16_MIN_COSINE


def test_auto_dtype_is_float32_on_cpu_and_bad_dtypes_are_refused(model_dirs):
    model = TorchBackend().load(model_dirs["llama"])
    assert model._model.tok_embeddings.weight.dtype == torch.float32
    with pytest.raises(ValueError, match="dtype"):
        TorchBackend().load(model_dirs["llama"], dtype="int8")


def test_tied_embeddings_share_one_tensor(model_dirs):
    model = TorchBackend().load(model_dirs["llama"])._model
    assert model.output.weight.data_ptr() == model.tok_embeddings.weight.data_ptr()


def test_context_length_bounds_the_cache(model_dirs):
    model = TorchBackend().load(model_dirs["llama"], context_length=16)
    assert model.context_length == 16
    model.prefill(list(range(3, 19)), 0)
    with pytest.raises(ValueError, match="16-token"):
        model.decode(5, 16)
    with pytest.raises(ValueError, match="256"):
        TorchBackend().load(model_dirs["llama"], context_length=1000)


def test_model_args_from_hf_configs():
    qwen3 = ModelArgs.from_hf_config(tiny_config("qwen3", vocab_size=400))
    assert (qwen3.head_dim, qwen3.q_size, qwen3.qk_norm, qwen3.qkv_bias) == (32, 128, True, False)
    qwen2 = ModelArgs.from_hf_config(tiny_config("qwen2", vocab_size=400))
    assert qwen2.qkv_bias and not qwen2.o_bias
    assert qwen2.sliding_windows == (None, None)  # use_sliding_window is false
    llama = ModelArgs.from_hf_config(tiny_config("llama", vocab_size=400, max_position_embeddings=131072))
    assert llama.tie_word_embeddings and llama.default_context_length == 8192
    assert llama.num_key_value_heads == 2 and llama.head_dim == 16


def test_unknown_architecture_is_named(tmp_path):
    with pytest.raises(UnsupportedArchitecture, match="'gpt2'.*llama, mistral, .*qwen2, qwen3"):
        ModelArgs.from_hf_config({"model_type": "gpt2"})
    d = make_tiny_model_dir(tmp_path, "llama", model_type="mamba")
    with pytest.raises(UnsupportedArchitecture, match="mamba"):
        TorchBackend().load(d)
    with pytest.raises(UnsupportedArchitecture, match="dynamic"):  # dynamic NTK: not one Wren runs
        ModelArgs.from_hf_config(tiny_config("llama", vocab_size=400,
                                             rope_scaling={"rope_type": "dynamic", "factor": 4.0}))


def test_truncated_safetensors_names_the_file(tmp_path):
    d = make_tiny_model_dir(tmp_path, "llama")
    weights = d / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match=r"model\.safetensors.*truncated"):
        TorchBackend().load(d)


def test_missing_files_and_tensors_are_named(tmp_path):
    d = make_tiny_model_dir(tmp_path, "qwen2", tie_word_embeddings=False)
    (d / "config.json").write_text('{"model_type": "qwen2", "vocab')
    with pytest.raises(ModelFileError, match=r"config\.json.*not valid JSON"):
        TorchBackend().load(d)
    (d / "config.json").unlink()
    with pytest.raises(ModelFileError, match=r"config\.json is missing"):
        TorchBackend().load(d)

    d = make_tiny_model_dir(tmp_path / "b", "qwen2")
    config = json.loads((d / "config.json").read_text())
    config["num_hidden_layers"] = 3  # the file holds two layers' weights
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFileError, match=r"model\.layers\.2\."):
        TorchBackend().load(d)

    (d / "model.safetensors").unlink()
    with pytest.raises(ModelFileError, match="holds no weights"):
        TorchBackend().load(d)


def test_shape_mismatch_is_a_model_file_error(tmp_path):
    d = make_tiny_model_dir(tmp_path, "llama")
    config = json.loads((d / "config.json").read_text())
    config["intermediate_size"] = 96
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFileError, match="do not match config.json"):
        TorchBackend().load(d)


def test_closed_model_refuses_work(model_dirs):
    model = TorchBackend().load(model_dirs["llama"])
    model.close()
    with pytest.raises(RuntimeError, match="closed"):
        model.decode(1, 0)


def _resident_mb() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_kv_cache_memory_is_committed_as_it_is_written():
    """A slot's full-context cache costs the memory its written positions use: allocating
    it commits nothing, and it reads as zeros (masked keys multiply their values by them)."""
    from wren.engine.inference.models.llama import _zeros_on_demand

    before = _resident_mb()
    cache = _zeros_on_demand((2, 4, 8192, 1024), torch.float32, "cpu")  # 256 MB
    assert cache.shape == (2, 4, 8192, 1024) and cache.is_contiguous()
    assert cache.data_ptr() % 64 == 0
    cache[1, :, :16] = 1.5
    assert _resident_mb() - before < 32
    # (Reading untouched pages may commit them, depending on the kernel: checked last.)
    assert float(cache[1, :, :16].sum()) == 1.5 * 4 * 16 * 1024
    rest = cache[1, :, 16:]
    assert float(cache[0].max()) == float(cache[0].min()) == float(rest.max()) == float(rest.min()) == 0.0


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads Linux's /proc")
def test_a_loaded_model_keeps_no_view_of_its_weights_file(model_dirs):
    """Weights the model keeps as they are read (embeddings, norms) are copies: a view
    would keep the whole file mapped and count every page read as the model's memory."""
    model = TorchBackend().load(model_dirs["llama"])
    weights = str(model_dirs["llama"] / "model.safetensors")
    assert weights not in open("/proc/self/maps").read()
    model.close()
