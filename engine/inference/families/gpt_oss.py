"""gpt-oss (model_type gpt_oss, GGUF architecture "gpt-oss"): a mixture of experts with
attention sinks, sliding-window layers alternating with full ones, YaRN RoPE and harmony.

- Attention: q/k/v/o all biased, grouped-query, NEOX-style RoPE (not permuted), each head's
  learned sink logit in its softmax (ModelArgs.attention_sinks; the GGUF's attn_sinks),
  every even layer a 128-token sliding window (llama.cpp's pattern 2, transformers'
  layer_types), YaRN scaling (factor 32 over 4,096 positions, beta_fast 32, beta_slow 1,
  no truncation of the ramp: the model's config; llama.cpp rounds the ramp's ends out).
- MLP: a router (ffn_gate_inp, weight and bias) picks the top 4 of 32 experts by logit, and
  the softmax runs over those 4 only; each expert is SwiGLU with its own alpha (1.702) and
  clamping (gate <= 7, -7 <= up <= 7), out = (up + 1) * gate * sigmoid(alpha * gate), every
  projection biased. llama.cpp's converter splits transformers' fused, interleaved
  gate_up_proj into ffn_gate_exps / ffn_up_exps and keeps the experts in MXFP4 where the
  checkpoint has them so (the released ones do); the names below are mlx-lm's after its
  sanitize (mlp.router, mlp.experts.{gate,up,down}_proj), which mlx-lm's gpt_oss module loads.
- Post-attention norm: the GGUF calls transformers' post_attention_layernorm (the norm
  before the MLP) post_attention_norm.
- Chat: harmony. Thinking is the analysis channel, a call is a message addressed
  `to=functions.NAME` (in the commentary channel), split from the stream by
  engine.inference.reasoning's HarmonySplitter; the tool format below is only what Wren
  reads from answer text when a template teaches none.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Any

from ...errors import UnsupportedArchitecture
from . import llama
from .family import Family, MetadataReader, ReasoningFormat, Windows, layer_windows
from .formats import HERMES

LAYER_TENSORS = MappingProxyType({
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_sinks": "self_attn.sinks",
    "ffn_gate_inp": "mlp.router",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
})
# The parts that carry a bias besides the weight (every projection).
BIASED_PARTS = frozenset({"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp", "ffn_gate_exps",
                          "ffn_up_exps", "ffn_down_exps"})
SLIDING_WINDOW = 128
# gpt-oss's SwiGLU (transformers' swiglu_alpha / swiglu_limit; llama.cpp has them built in)
SWIGLU_ALPHA = 1.702
SWIGLU_LIMIT = 7.0
EXPERTS, EXPERTS_PER_TOKEN = 32, 4  # gpt-oss-20b (120b: 128 experts, 4 a token)
# The model's YaRN ramp where a GGUF leaves it out (llama.cpp records the betas, not truncate)
YARN_DEFAULTS = MappingProxyType({"beta_fast": 32.0, "beta_slow": 1.0, "truncate": False})


def _kinds(layers: int) -> list[str]:
    """Even layers slide, odd ones see everything (layer 0 slides)."""
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]


def gguf_config(opt: MetadataReader, tensors: Collection[str]) -> dict[str, Any]:
    layers = int(opt("block_count", 0))
    experts, used = int(opt("expert_count", 0)), int(opt("expert_used_count", 0))
    if not experts or not 0 < used <= experts:
        raise UnsupportedArchitecture(f"a gpt-oss file needs gpt-oss.expert_count and gpt-oss.expert_used_count "
                                      f"(1..expert_count); it has {experts} and {used}")
    config: dict[str, Any] = {
        "attention_bias": True,
        "mlp_bias": False,  # the experts' biases are the experts layer's own (expert_bias)
        "sliding_window": int(opt("attention.sliding_window", SLIDING_WINDOW)),
        "layer_types": _kinds(layers),
        "num_local_experts": experts,
        "num_experts_per_tok": used,
        "intermediate_size": int(opt("expert_feed_forward_length", opt("feed_forward_length", 0))),
        "swiglu_limit": SWIGLU_LIMIT,
        "hidden_act": "silu",
        "router_aux_loss_coef": 0.0,
    }
    if opt("rope.scaling.type", None) == "yarn":  # with the ramp llama.cpp's converter records
        config["rope_scaling"] = dict(YARN_DEFAULTS) | {
            "rope_type": "yarn", "factor": float(opt("rope.scaling.factor", 1.0)),
            "original_max_position_embeddings": int(opt("rope.scaling.original_context_length", 4096)),
            "beta_fast": float(opt("rope.scaling.yarn_beta_fast", YARN_DEFAULTS["beta_fast"])),
            "beta_slow": float(opt("rope.scaling.yarn_beta_slow", YARN_DEFAULTS["beta_slow"]))}
    return config


def complete_rope_scaling(scaling: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A GGUF's YaRN scaling completed with the model's own ramp parameters (the file
    records only type, factor and original length)."""
    if not scaling or scaling.get("rope_type") != "yarn":
        return dict(scaling) if scaling else None
    return dict(YARN_DEFAULTS) | dict(scaling)


def sliding_windows(config: Mapping[str, Any], layers: int) -> Windows:
    return layer_windows(config, layers, config.get("sliding_window"), lambda: _kinds(layers))


def model_args(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """gpt-oss's quirks from config.json: the sinks, and YaRN with the model's ramp (a
    config from a GGUF import names only what the file records)."""
    for key, runs in (("swiglu_limit", SWIGLU_LIMIT), ("swiglu_alpha", SWIGLU_ALPHA)):
        value = float(config.get(key, runs))
        if value != runs:
            raise UnsupportedArchitecture(f"gpt-oss with {key} {value} is not supported; Wren runs {runs}")
    args: dict[str, Any] = {
        "attention_sinks": True,
        "num_experts": int(config["num_local_experts"]),
        "num_experts_per_tok": int(config["num_experts_per_tok"]),
        "moe_intermediate_size": int(config["intermediate_size"]),
        "expert_router": "topk_softmax",
        "expert_activation": "clamped_swiglu",
        "router_bias": True,
        "expert_bias": True,
    }
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    if scaling and scaling.get("rope_type") == "yarn":
        args["rope_scaling"] = complete_rope_scaling(
            {k: v for k, v in scaling.items() if k not in ("rope_theta", "type")})
    return args


FAMILY = Family(
    name="gpt_oss",
    hf_class="GptOssForCausalLM",
    model_types=("gpt_oss",),
    gguf_architectures=("gpt-oss",),
    global_tensors=llama.GLOBAL_TENSORS,
    layer_tensors=LAYER_TENSORS,
    permuted_qk=False,
    gguf_config=gguf_config,
    sliding_windows=sliding_windows,
    # Calls come in harmony headers (the reasoning splitter); hermes only where a template
    # teaches it.
    tool_format=HERMES,
    tool_format_needs="<tool_call>",
    model_args=model_args,
    reasoning=ReasoningFormat.HARMONY,
    experts=True,
    extra_bias_parts=BIASED_PARTS - {"attn_q", "attn_k", "attn_v", "attn_output"},
)
