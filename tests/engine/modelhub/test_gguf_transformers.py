"""An imported folder, read the way Wren's torch backend reads it, computes in transformers
what the original HF weights compute.

This checks config fields, tensor names, the Q/K un-permute and per-architecture details
(qwen2 biases, qwen3 q/k norms) together, for every supported architecture.
"""

from __future__ import annotations

import pytest

from wren.engine.inference.backends import read_model_config
from wren.engine.inference.models.weights import dense, open_weights
from wren.engine.modelhub.gguf_import import import_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CASES = {
    "llama-tied": ("llama", "LlamaConfig", "LlamaForCausalLM", True),
    "llama-untied": ("llama", "LlamaConfig", "LlamaForCausalLM", False),
    "mistral": ("mistral", "MistralConfig", "MistralForCausalLM", False),
    "qwen2": ("qwen2", "Qwen2Config", "Qwen2ForCausalLM", True),
    "qwen3": ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_converted_model_matches_original(kit, tmp_path, case):
    arch, config_cls, model_cls, tied = CASES[case]
    spec = kit.TinySpec(arch=arch, tied=tied, rope_theta=20000.0, eps=1e-6)
    weights = kit.hf_weights(spec, seed=3)
    config = getattr(transformers, config_cls)(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.ffn,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
        head_dim=spec.head_dim, rms_norm_eps=spec.eps, rope_theta=spec.rope_theta,
        max_position_embeddings=256, tie_word_embeddings=tied,
    )
    original = getattr(transformers, model_cls)(config).eval()
    # strict: the test's HF names are exactly the model's, so the converter is checked against them
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    if tied:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    original.load_state_dict(state, strict=True)

    gguf_path = kit.write_gguf(tmp_path / f"{case}.gguf", spec, weights)
    import_gguf(gguf_path, tmp_path / "out")
    out = tmp_path / "out"
    config = read_model_config(out)
    converted = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**config), dtype=torch.float32).eval()
    assert type(converted).__name__ == model_cls
    source = open_weights(out, config)
    get = dense(source.get, "cpu", torch.float32)
    names = set(converted.state_dict())
    loaded = {name: get(name) for name in names if name in source.names or name.endswith("_proj.bias")}
    if config["tie_word_embeddings"]:
        loaded["lm_head.weight"] = loaded["model.embed_tokens.weight"]
    converted.load_state_dict(loaded, strict=True)

    ids = torch.tensor([[5, 70, 120, 33, 260, 1, 99, 180, 7, 42]])
    with torch.no_grad():
        want, got = original(ids).logits, converted(ids).logits
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
