"""Wren's torch model, mlx-lm and (where installed) transformers agree on the same weights."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures.tiny import ARCHS, make_tiny_model_dir

torch = pytest.importorskip("torch")

# float32 on both sides; measured differences are ~1e-5 on logits with std ~1.5-3.
FP32_TOL = 1e-4
PROMPT = list(range(3, 40))
CONTINUATION = [50, 61, 72, 83]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    return {arch: make_tiny_model_dir(root / arch, arch, seed=7) for arch in ARCHS}


def _steps(model, prompt=PROMPT, continuation=CONTINUATION):
    """Logits after the prompt, after each decoded token, and after re-prefilling a
    shorter suffix over the cached prefix (exercises cache overwrite / trim)."""
    out = [model.prefill(prompt, 0)]
    for i, tok in enumerate(continuation):
        out.append(model.decode(tok, len(prompt) + i))
    out.append(model.prefill([9, 10, 11], 20))
    out.append(model.decode(12, 23))
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_torch_and_mlx_give_the_same_logits(arch, model_dirs):
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    t = TorchBackend("cpu").load(model_dirs[arch], dtype="float32")
    m = MLXBackend().load(model_dirs[arch], dtype="float32")
    assert (t.backend, m.backend) == ("torch-cpu", "mlx")
    assert t.vocab_size == m.vocab_size and t.context_length == m.context_length == 256
    for a, b in zip(_steps(t), _steps(m), strict=True):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape == (t.vocab_size,)
        assert np.abs(a - b).max() < FP32_TOL
        assert a.std() > 0.5  # the fixture's logits are not flat


def test_llama3_rope_scaling_matches_mlx(tmp_path):
    from wren.engine.inference.backends.mlx import MLXBackend
    from wren.engine.inference.backends.torch import TorchBackend

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    # A small original context so all three frequency bands (kept, smoothed, scaled) occur.
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    d = make_tiny_model_dir(tmp_path, "llama", rope_scaling=scaling)
    t = TorchBackend().load(d)
    m = MLXBackend().load(d)
    prompt = list(range(3, 120))
    assert np.abs(t.prefill(prompt, 0) - m.prefill(prompt, 0)).max() < FP32_TOL
    assert np.abs(t.decode(5, len(prompt)) - m.decode(5, len(prompt))).max() < FP32_TOL


HF_CASES = [(arch, {}) for arch in ARCHS] + [
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}),
    ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    ("mistral", {"sliding_window": 8}),
]


@pytest.mark.parametrize(("arch", "overrides"), HF_CASES)
def test_matches_transformers_reference(arch, overrides, tmp_path):
    transformers = pytest.importorskip("transformers")
    from wren.engine.inference.backends.torch import TorchBackend

    d = make_tiny_model_dir(tmp_path, arch, seed=3, **overrides)
    transformers.logging.set_verbosity_error()
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager"
    )
    ids = list(range(3, 43))
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    ours = TorchBackend().load(d)
    got = [ours.prefill(ids[:30], 0)] + [ours.decode(t, 30 + i) for i, t in enumerate(ids[30:])]
    assert np.abs(np.stack(got) - ref[29:]).max() < FP32_TOL


def test_mlx_load_errors_name_the_problem(tmp_path):
    from wren.engine.errors import ModelFileError, UnsupportedArchitecture
    from wren.engine.inference.backends.mlx import MLXBackend

    if not MLXBackend().available():
        pytest.skip("mlx is not installed")
    d = make_tiny_model_dir(tmp_path / "cut", "qwen2")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:-1000])
    with pytest.raises(ModelFileError, match=r"model\.safetensors.*truncated"):
        MLXBackend().load(d)
    d = make_tiny_model_dir(tmp_path / "odd", "llama", model_type="no_such_arch")
    with pytest.raises(UnsupportedArchitecture, match="no_such_arch"):
        MLXBackend().load(d)
