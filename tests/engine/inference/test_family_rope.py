"""RoPE settings as transformers 5 saves them, and LongRoPE's table, on both backends.

- A Hugging Face folder saved by transformers 5 nests its RoPE settings (rope_parameters, per
  layer type for gemma3); MLX reads them right and gives transformers' logits (mlx-lm took its
  defaults: Llama 3's base of 500000 read as 10000, the scaling dropped).
- LongRoPE (phi3): a model loaded at its default context turns by the short factors, as
  transformers does for every sequence within the pretraining length (8k picked the long ones).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DATA = Path(__file__).resolve().parents[2] / "data" / "families"
FP32_TOL = 1e-4  # float32 on both sides
IDS = [3, 17, 42, 9, 88, 5, 61, 23, 7, 70, 11, 2]  # longer than gemma3's window here

SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=1024)
CONFIGS = {
    "llama3-scaled": lambda: transformers.LlamaConfig(
        **SMALL, rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "phi3-longrope": lambda: transformers.Phi3Config(
        **SMALL, partial_rotary_factor=0.75, original_max_position_embeddings=64, pad_token_id=0, eos_token_id=1,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0, 2.5, 3.0],
                      "long_factor": [1.0, 4.0, 9.0, 16.0, 25.0, 36.0]}),
    "gemma3-linear": lambda: transformers.Gemma3TextConfig(
        **(SMALL | {"num_hidden_layers": 6}), head_dim=16, sliding_window=4, rope_scaling={"rope_type": "linear", "factor": 8.0}),
}


def _transformers_logits(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def saved(request, tmp_path_factory) -> tuple[str, Path, np.ndarray]:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = CONFIGS[request.param]()
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                          attn_implementation="eager").eval()
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder)
    return request.param, folder, _transformers_logits(model, IDS)


def test_transformers5_folder_nests_rope_settings(saved):
    import json

    config = json.loads((saved[1] / "config.json").read_text())
    assert "rope_parameters" in config and "rope_theta" not in config  # what the MLX mapping must read


def test_mlx_reads_nested_rope_settings(saved):
    pytest.importorskip("mlx_lm")
    from wren.engine.inference.backends.mlx import MLXBackend

    name, folder, want = saved
    model = MLXBackend().load(folder, dtype="float32", slots=1)
    got = np.asarray(model.prefill(IDS, 0))
    assert np.abs(got - want[-1]).max() < FP32_TOL, name


def test_torch_reads_nested_rope_settings(saved):
    from wren.engine.inference.backends.torch import TorchBackend

    name, folder, want = saved
    model = TorchBackend("cpu").load(folder, dtype="float32", compile=False)
    assert np.abs(np.asarray(model.prefill(IDS, 0)) - want[-1]).max() < FP32_TOL, name


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_longrope_default_context_turns_by_the_short_factors(backend):
    hf_dir = DATA / "phi3" / "hf"  # original_max_position_embeddings 32, max_position_embeddings 256
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    ids = [5 + (7 * i) % 300 for i in range(20)]
    want = _transformers_logits(hf, ids)[-1]
    if backend == "torch":
        from wren.engine.inference.backends.torch import TorchBackend

        model = TorchBackend("cpu").load(hf_dir, dtype="float32", compile=False)
    else:
        pytest.importorskip("mlx_lm")
        from wren.engine.inference.backends.mlx import MLXBackend

        model = MLXBackend().load(hf_dir, dtype="float32", slots=1)
    assert model.context_length == 32  # the pretraining length, not min(256, 8192)
    assert np.abs(np.asarray(model.prefill(ids, 0)) - want).max() < FP32_TOL


def test_longrope_longer_context_turns_by_the_long_factors_as_transformers_past_the_pretraining_length():
    pytest.importorskip("mlx_lm")
    from wren.engine.inference.backends.mlx import MLXBackend

    hf_dir = DATA / "phi3" / "hf"
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    ids = [5 + (7 * i) % 300 for i in range(40)]  # past 32: transformers takes the long factors
    want = _transformers_logits(hf, ids)[-1]
    model = MLXBackend().load(hf_dir, dtype="float32", slots=1, context_length=128)
    assert np.abs(np.asarray(model.prefill(ids, 0)) - want).max() < FP32_TOL
