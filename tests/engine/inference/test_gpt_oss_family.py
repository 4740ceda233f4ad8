"""The gpt-oss family module (engine/inference/families/gpt_oss.py): found by its names, its
GGUF metadata mapped to transformers' config keys, its quirks in ModelArgs (sinks, YaRN with the
model's ramp, alternating windows), and harmony: thinking and a call in the commentary
channel split from the stream as the model writes them."""

from __future__ import annotations

import pytest

from wren.engine.errors import UnsupportedArchitecture
from wren.engine.inference import families
from wren.engine.inference.families import gpt_oss
from wren.engine.inference.families.family import ReasoningFormat
from wren.engine.inference.models.args import ModelArgs
from wren.engine.inference.reasoning import reasoning_format, splitter_for

# gpt-oss-20b's GGUF metadata, as llama.cpp's converter writes it (without the prefix)
METADATA = {"block_count": 24, "embedding_length": 2880, "attention.head_count": 64, "attention.head_count_kv": 8,
            "attention.key_length": 64, "attention.sliding_window": 128, "expert_count": 32,
            "expert_used_count": 4, "expert_feed_forward_length": 2880, "feed_forward_length": 2880,
            "rope.scaling.type": "yarn", "rope.scaling.factor": 32.0, "rope.scaling.original_context_length": 4096,
            "rope.scaling.yarn_beta_fast": 32.0, "rope.scaling.yarn_beta_slow": 1.0}


def opt(key: str, default: object) -> object:
    return METADATA.get(key, default)


def test_found_by_its_architecture_and_model_type() -> None:
    assert families.by_architecture("gpt-oss") is gpt_oss.FAMILY
    assert families.by_model_type("gpt_oss") is gpt_oss.FAMILY
    assert gpt_oss.FAMILY.reasoning is ReasoningFormat.HARMONY
    assert not gpt_oss.FAMILY.permuted_qk  # NEOX-style RoPE: llama.cpp leaves q/k rows alone


def test_tensor_names_are_llama_cpps() -> None:
    # the names gguf-py's constants give gpt-oss's tensors (MODEL_ARCH.GPT_OSS)
    gguf = pytest.importorskip("gguf")
    arch = gguf.MODEL_ARCH.GPT_OSS
    written = {gguf.TENSOR_NAMES[t].format(bid=0) for t in gguf.MODEL_TENSORS[arch]}
    ours = {f"blk.0.{part}" for part in gpt_oss.LAYER_TENSORS} | set(gpt_oss.FAMILY.global_tensors.keys())
    ours = {name.removesuffix(".weight") for name in ours}
    # llama.cpp lists a fused attn_qkv too, which its converter never writes for gpt-oss
    assert ours == written - {"blk.0.attn_qkv"}


def test_gguf_metadata_becomes_transformers_config() -> None:
    config = gpt_oss.gguf_config(opt, ["blk.0.attn_q.bias"])
    assert config["num_local_experts"] == 32 and config["num_experts_per_tok"] == 4
    assert config["intermediate_size"] == 2880 and config["sliding_window"] == 128
    assert config["layer_types"][:4] == ["sliding_attention", "full_attention"] * 2
    assert len(config["layer_types"]) == 24 and config["attention_bias"] is True
    # the file's YaRN, with the model's untruncated ramp (llama.cpp records no truncate)
    assert config["rope_scaling"] == {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                                      "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}


@pytest.mark.parametrize("experts,used", [(0, 0), (32, 0), (4, 8)])
def test_an_expert_count_that_cannot_be_is_refused(experts: int, used: int) -> None:
    def bad(key: str, default: object) -> object:
        return {"expert_count": experts, "expert_used_count": used}.get(key, opt(key, default))

    with pytest.raises(UnsupportedArchitecture, match="expert_count"):
        gpt_oss.gguf_config(bad, [])


def model_args_from(config: dict) -> ModelArgs:
    return ModelArgs.from_hf_config(config)


def test_transformers_config_gives_sinks_yarn_and_windows() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GptOssConfig(num_hidden_layers=4, hidden_size=64, intermediate_size=32, head_dim=16,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=100).to_dict()
    args = model_args_from(config)
    assert args.attention_sinks and args.qkv_bias and args.o_bias
    assert args.sliding_windows == (128, None, 128, None)
    assert args.rope_theta == 150000.0
    assert args.rope_scaling is not None
    assert args.rope_scaling["rope_type"] == "yarn" and args.rope_scaling["factor"] == 32.0
    assert args.rope_scaling["truncate"] is False and args.rope_scaling["beta_fast"] == 32.0


def test_a_gguf_import_config_gets_the_models_yarn_ramp() -> None:
    # what the importer writes from a GGUF (rope.scaling.* has no beta or truncate)
    config = {"model_type": "gpt_oss", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 32,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "rope_theta": 150000.0, "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}}
    config |= gpt_oss.gguf_config(lambda k, d: {"block_count": 2, "expert_count": 4, "expert_used_count": 2,
                                                "expert_feed_forward_length": 32}.get(k, d), [])
    args = model_args_from(config)
    assert args.rope_scaling == {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
                                 "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
    assert args.sliding_windows == (128, None)


def test_another_swiglu_limit_is_refused() -> None:
    with pytest.raises(UnsupportedArchitecture, match="swiglu_limit 9.0"):
        gpt_oss.model_args({"swiglu_limit": 9.0}, 2)


def test_harmony_thinking_then_a_call_in_the_commentary_channel() -> None:
    # as gpt-oss writes after its template's "<|start|>assistant": thinking, then a call
    # whose header names the function (the template renders past calls the same way)
    stream = ("<|channel|>analysis<|message|>The user wants Tokyo's weather.<|end|>"
              "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
              '{"location": "Tokyo"}<|call|>')
    split = splitter_for(reasoning_format(gpt_oss.FAMILY.reasoning, ""))
    assert split is not None
    pieces = [p for i in range(0, len(stream), 7) for p in split.feed(stream[i:i + 7])] + split.finish()
    thinking = "".join(p.text for p in pieces if p.kind == "thinking")
    calls = [(p.recipient, p.text) for p in pieces if p.kind == "call"]
    assert thinking == "The user wants Tokyo's weather."
    assert calls == [("get_weather", '{"location": "Tokyo"}')]
    assert not [p for p in pieces if p.kind == "answer"]
