"""The family registry: found by GGUF architecture and by Hugging Face model_type, unknown
names refused with the supported ones named, and what each family declares."""

from __future__ import annotations

import dataclasses

import pytest

from wren.engine.errors import UnsupportedArchitecture
from wren.engine.inference import families
from wren.engine.inference.families import llama, qwen2


def test_every_family_is_found_by_its_model_types_and_architectures():
    assert families.FAMILIES, "the registry lost its families"
    for family in families.FAMILIES:
        for model_type in family.model_types:
            assert families.by_model_type(model_type) is family
            assert families.find_model_type(model_type) is family
        for arch in family.gguf_architectures:
            assert families.by_architecture(arch) is family
            assert families.find_architecture(arch) is family
        assert family.model_type in families.model_types()


def test_the_four_families_wren_ran_before_the_registry_are_there():
    assert set(families.model_types()) >= {"llama", "mistral", "qwen2", "qwen3"}
    assert set(families.architectures()) >= {"llama", "mistral", "qwen2", "qwen3"}


@pytest.mark.parametrize("name", ["gemma2", "", "LLAMA", None, 3, {"model_type": "llama"}, ["qwen2"]])
def test_an_unknown_family_is_refused_naming_the_supported_ones(name):
    assert families.find_model_type(name) is None and families.find_architecture(name) is None
    for lookup, supported in ((families.by_model_type, families.model_types()),
                              (families.by_architecture, families.architectures())):
        with pytest.raises(UnsupportedArchitecture) as err:
            lookup(name)
        message = str(err.value)
        assert repr(name) in message
        assert all(s in message for s in supported), message


def test_a_name_two_families_claim_is_refused():
    twin = dataclasses.replace(qwen2.FAMILY, name="twin", model_types=("twin", "llama"))
    with pytest.raises(ValueError, match="'llama' is claimed by both llama and twin"):
        families.index([llama.FAMILY, twin], "model_types")
    assert set(families.index([llama.FAMILY, twin], "gguf_architectures")) == {"llama", "qwen2"}


def test_tensor_maps_and_permutation():
    by = families.by_architecture
    for name in ("llama", "mistral", "qwen2", "qwen3"):
        family = by(name)
        assert family.global_tensors["token_embd.weight"] == "model.embed_tokens.weight"
        assert family.layer_tensors["attn_q"] == "self_attn.q_proj"
        assert ("attn_q_norm" in family.layer_tensors) == family.qk_norm
    # llama.cpp interleaves Q/K rows for Meta's RoPE layout only; Qwen is NEOX-style
    assert [by(n).permuted_qk for n in ("llama", "mistral", "qwen2", "qwen3")] == [True, True, False, False]
    assert by("qwen2").bias_parts == {"attn_q", "attn_k", "attn_v"}
    assert by("llama").bias_parts == {"attn_q", "attn_k", "attn_v", "attn_output"}


def test_gguf_config_keys():
    def opt(key, default):
        return {"attention.sliding_window": 4096}.get(key, default)

    biased = ["blk.0.attn_q.bias", "blk.0.attn_q.weight"]
    by = families.by_architecture
    assert by("llama").gguf_config(opt, biased) == {"attention_bias": True, "mlp_bias": False}
    assert by("qwen3").gguf_config(opt, ["blk.0.attn_q.weight"]) == {"attention_bias": False, "mlp_bias": False}
    assert by("qwen2").gguf_config(opt, []) == {"attention_bias": True, "use_sliding_window": False}
    assert by("mistral").gguf_config(opt, []) == {"attention_bias": False, "mlp_bias": False, "sliding_window": 4096}


def test_sliding_windows_follow_each_family_rule():
    windows = {name: families.by_model_type(name).sliding_windows for name in families.model_types()}
    plain = {"sliding_window": 64}
    assert windows["mistral"](plain, 3) == (64, 64, 64)
    assert windows["llama"](plain, 3) == (None, None, None)  # HF llama ignores it without layer_types
    assert windows["qwen2"](plain, 3) == (None, None, None)  # Qwen: only with use_sliding_window
    qwen = {"sliding_window": 64, "use_sliding_window": True, "max_window_layers": 2}
    assert windows["qwen2"](qwen, 4) == windows["qwen3"](qwen, 4) == (None, None, 64, 64)
    typed = {"sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]}
    assert windows["llama"](typed, 2) == windows["mistral"](typed, 2) == (8, None)
    assert windows["mistral"]({"sliding_window": None}, 2) == (None, None)


def test_tool_formats():
    assert list(families.TOOL_FORMATS) == ["hermes", "llama3", "mistral", "phi4", "granite"]
    assert families.DEFAULT_TOOL_FORMAT.name == "hermes"
    llama3 = "<|start_header_id|>user<|end_header_id|>"
    assert families.tool_format_for("llama", llama3).name == "llama3"
    assert families.tool_format_for("llama", "[INST] {{ m }} [/INST]") is None  # Llama 2: no calls
    assert families.tool_format_for("Mistral").name == "mistral"
    assert families.tool_format_for("qwen3").name == "hermes"
    assert families.tool_format_for("gemma3") is None and families.tool_format_for(None) is None
    for family in families.FAMILIES:
        assert families.TOOL_FORMATS[family.tool_format.name] is family.tool_format
