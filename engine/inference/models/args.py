"""The torch model's configuration (`ModelArgs`), read from a model folder's config.json
for every family in engine.inference.families. Its own module, so the model (llama.py) and
its attention (attention.py) both name it without importing each other."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ModelFileError, UnsupportedArchitecture
from .. import families
from ..families import Family

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "longrope", "yarn")
DEFAULT_MAX_CONTEXT = 8192


@dataclass(frozen=True)
class ModelArgs:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int = 0  # 0: same as num_attention_heads (no GQA)
    head_dim: int = 0  # 0: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Mapping | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # qwen3: RMSNorm over each head of q and k before RoPE
    # One entry per layer; None is full attention, an int is a sliding window size.
    sliding_windows: tuple[int | None, ...] = ()
    # The families' quirks (engine/inference/families: each family's model_args sets them).
    fused_projections: bool = False  # phi3: qkv_proj and gate_up_proj stored as one tensor each
    partial_rotary_factor: float = 1.0  # phi3: RoPE turns the first part of each head only
    rope_layers: tuple[bool, ...] = ()  # per layer, False: no RoPE (smollm3); () is all True
    embedding_multiplier: float = 1.0  # granite, gemma3: the embeddings are scaled by it
    residual_multiplier: float = 1.0  # granite: scales each block's outputs
    attention_multiplier: float = 0.0  # granite, gemma3: the attention scale; 0 is 1/sqrt(head_dim)
    logits_scaling: float = 1.0  # granite: the logits are divided by it
    # gemma3 and olmo2 quirks (their family's model_args hook sets them)
    norm_placement: str = "pre"  # "pre" (llama), "sandwich" (gemma3: pre and post), "post" (olmo2)
    hidden_act: str = "silu"  # or "gelu_pytorch_tanh" (gemma3)
    local_rope_theta: float = 0.0  # gemma3: the sliding layers' RoPE base, unscaled; 0: rope_theta
    final_logit_softcap: float = 0.0  # logits -> cap * tanh(logits / cap); 0: none
    qk_norm_whole: bool = False  # olmo2: RMSNorm over all of q and all of k (not per head)
    attention_sinks: bool = False  # gpt-oss: a learned logit per head joins each softmax (self_attn.sinks)
    # A mixture of experts (engine/inference/models/experts.py names the hooks): 0 experts is a dense MLP.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0  # each expert's inner size
    expert_router: str = "softmax_topk"  # experts.ROUTERS: how the router's logits pick and weigh experts
    expert_activation: str = "swiglu"  # experts.ACTIVATIONS: gate, up -> the down projection's input
    router_bias: bool = False  # gpt-oss: mlp.gate.bias
    expert_bias: bool = False  # gpt-oss: mlp.experts.{gate,up,down}_proj.bias
    # The names a family's layer_tensors give them (mlx-lm's module's): mlp.<router_name>,
    # mlp.<experts_name>.{gate,up,down}_proj
    router_name: str = "router"
    experts_name: str = "experts"

    def __post_init__(self) -> None:
        if not self.num_key_value_heads:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if not self.sliding_windows:
            object.__setattr__(self, "sliding_windows", (None,) * self.num_hidden_layers)
        if self.num_attention_heads % self.num_key_value_heads:
            raise UnsupportedArchitecture(
                f"{self.num_attention_heads} attention heads cannot be grouped over "
                f"{self.num_key_value_heads} key/value heads"
            )
        if len(self.sliding_windows) != self.num_hidden_layers:
            raise UnsupportedArchitecture("layer_types must name every layer")
        if not self.rope_layers:
            object.__setattr__(self, "rope_layers", (True,) * self.num_hidden_layers)
        if len(self.rope_layers) != self.num_hidden_layers:
            raise UnsupportedArchitecture("no_rope_layers must name every layer")
        turned = int(self.head_dim * self.partial_rotary_factor)  # attention.rotary_dim
        if not 0 < turned <= self.head_dim or turned % 2:
            raise UnsupportedArchitecture(
                f"partial_rotary_factor {self.partial_rotary_factor} of the head size {self.head_dim} "
                "is not an even number of rotated dimensions")

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def default_context_length(self) -> int:
        """min(max_position_embeddings, 8192); for LongRoPE (phi3) at most the pretraining
        length. LongRoPE turns by its short factors for a sequence that fits that length and
        by its long ones past it (transformers' rule), and keys turned by one table are not
        valid with the other, so the table is chosen once for the KV cache by its length
        (attention._longrope_factors): a cache no longer than the pretraining length is
        right for every chat it holds, where an 8k one would turn a short chat by the long
        factors. A longer context, asked for, takes the long ones throughout."""
        limit = min(self.max_position_embeddings, DEFAULT_MAX_CONTEXT)
        scaling = self.rope_scaling or {}
        if scaling.get("rope_type", scaling.get("type")) == "longrope":
            return min(limit, int(scaling["original_max_position_embeddings"]))
        return limit

    @classmethod
    def from_hf_config(cls, config: Mapping) -> ModelArgs:
        """The torch model's configuration from config.json's contents. UnsupportedArchitecture
        for a model_type Wren does not run; ModelFileError naming every missing or invalid
        field at once (importers call this too, so a folder the model cannot run from is
        refused when it comes in, not when it is first loaded)."""
        model_type = config.get("model_type")
        family = families.by_model_type(model_type) if model_type is not None else None
        if family is not None and isinstance(config.get("text_config"), Mapping):  # multimodal: its text model
            config = {"model_type": family.model_type, **config["text_config"]}
        read = _Settings(config)
        if family is None:
            read.missing.append("model_type")

        # transformers >= 5 nests rope settings under rope_parameters.
        rope_params = read.mapping("rope_parameters") or {}
        rope_theta = read.number("rope_theta", config.get("rope_theta", rope_params.get("rope_theta")), 10000.0)
        rope_scaling = read.mapping("rope_scaling") or (
            rope_params if rope_params.get("rope_type", "default") != "default" else None
        )
        if rope_scaling is not None:
            rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
            if rope_type not in SUPPORTED_ROPE_TYPES:
                raise UnsupportedArchitecture(
                    f"rope scaling {rope_type!r} is not supported; Wren runs "
                    + ", ".join(SUPPORTED_ROPE_TYPES)
                )
            if rope_type == "default":
                rope_scaling = None
            elif rope_type == "longrope":  # phi3 keeps the pretraining length at the top level
                rope_scaling = {"original_max_position_embeddings": config.get(
                    "original_max_position_embeddings", config.get("max_position_embeddings"))} | dict(rope_scaling)

        attention_bias = bool(config.get("attention_bias", False))
        fields: dict[str, Any] = dict(
            vocab_size=read.whole("vocab_size"),
            hidden_size=read.whole("hidden_size"),
            intermediate_size=read.whole("intermediate_size"),
            num_hidden_layers=read.whole("num_hidden_layers"),
            num_attention_heads=read.whole("num_attention_heads"),
            num_key_value_heads=read.whole("num_key_value_heads", 0),
            head_dim=read.whole("head_dim", 0),
            rms_norm_eps=read.number("rms_norm_eps", config.get("rms_norm_eps"), 1e-6),
            rope_theta=rope_theta,
            rope_scaling=dict(rope_scaling) if rope_scaling else None,
            max_position_embeddings=read.whole("max_position_embeddings", 2048),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            mlp_bias=bool(config.get("mlp_bias", False)),
        )
        # The family's own keys (qwen3_moe's experts) and quirks (gemma3's two RoPE bases).
        quirks = read.hooks(family, fields["num_hidden_layers"]) if family is not None else {}
        read.refuse(family.model_type if family is not None else None)
        assert family is not None  # a missing model_type was refused with the rest
        fields |= dict(
            model_type=family.model_type,
            # qwen2 always biases q/k/v and never o_proj; llama's attention_bias covers all four.
            qkv_bias=family.qkv_bias_only or attention_bias,
            o_bias=not family.qkv_bias_only and attention_bias,
            qk_norm=family.qk_norm,
            fused_projections=family.fused_projections,
        )
        return cls(**(fields | quirks))


class _Settings:
    """config.json's values as ModelArgs takes them, each missing or invalid one noted on the
    way: a config is refused once, naming them all, rather than one field per try."""

    def __init__(self, config: Mapping) -> None:
        self.config = config
        self.missing: list[str] = []
        self.invalid: list[str] = []

    def whole(self, key: str, default: int | None = None) -> int:
        """A whole number above zero. Without a default config.json must give it; with one, a
        missing or zero value takes the default (transformers' configs write 0 or null for
        "as the model's other sizes say")."""
        value = self.config.get(key)
        if default is not None and not value:
            return default
        if value is None:
            self.missing.append(key)
            return 1  # a stand-in, so the rest is still read and checked
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole or value < 1:
            self.invalid.append(f"{key} is {_shown(value)}, not a whole number above zero")
            return default or 1
        return int(value)

    def number(self, key: str, value: Any, default: float) -> float:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.invalid.append(f"{key} is {_shown(value)}, not a number")
            return default
        return float(value)

    def mapping(self, key: str) -> Mapping | None:
        value = self.config.get(key)
        if value and not isinstance(value, Mapping):
            self.invalid.append(f"{key} is {_shown(value)}, not an object of settings")
            return None
        return value or None

    def hooks(self, family: Family, layers: int) -> dict[str, Any]:
        """The family's sliding windows and quirks from config.json; the keys they need that
        it lacks are noted with the rest (a stand-in goes on to find any others)."""
        config = _Noting(self.config, self.missing)
        try:
            return {"sliding_windows": family.sliding_windows(config, layers)} | family.model_args(config, layers)
        except (TypeError, ValueError, ArithmeticError, AttributeError) as exc:
            if not (self.missing or self.invalid):  # else a stand-in or a noted value is the likely cause
                self.invalid.append(f"its {family.name} settings cannot be read ({exc})")
            return {}

    def refuse(self, model_type: str | None) -> None:
        """Raise ModelFileError naming every problem noted so far (none: return)."""
        problems = ([f"it lacks {', '.join(dict.fromkeys(self.missing))}"] if self.missing else []) + self.invalid
        if problems:
            model = f"a {model_type} model" if model_type else "a model"
            raise ModelFileError(f"config.json does not describe {model} Wren can run: {'; '.join(problems)}")


class _Noting(dict):
    """config.json for a family's hooks: a key they need that is missing is noted, and 1 stands
    in for it so they go on to name any others."""

    def __init__(self, config: Mapping, missing: list[str]) -> None:
        super().__init__(config)
        self._missing = missing

    def __missing__(self, key: str) -> int:
        self._missing.append(key)
        return 1


def _shown(value: Any) -> str:
    """A config value for a message, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
