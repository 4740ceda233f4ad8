"""A GGUF of random blocks at a real model's shape for any family Wren runs, as llama.cpp's
converter and llama-quantize write it (Q4_K_M), for bench/memory.py and bench/decode.py:

    .venv/bin/python bench/random_family.py OUT.gguf --family phi3 [--preset phi4-mini]
    .venv/bin/python bench/random_family.py OUT.gguf --family olmo2 --tiny   # for tests

Every matrix's bytes are random with its fp16 scales set (bench/random_gguf.py's blocks),
the norms 1.0. The tensor names are the family's own (its module in
engine/inference/families lists each layer's parts), their shapes follow from the preset,
and their types are llama-quantize's Q4_K_M choices: Q4_K matrices, Q5_K for a fused
attn_qkv, Q6_K for attn_v and ffn_down in the layers it gives more bits and for the output
(the token embedding when tied). The metadata is what each family's GGUF files carry (RoPE
bases, Granite's multipliers, Phi's partial rotary and LongRoPE tables, Gemma's window).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter, RopeScalingType
from gguf.constants import GGML_QUANT_SIZES, GGML_QUANT_VERSION, LlamaFileType
from gguf.constants import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_gguf
import random_gguf
from make_gguf import Planned

from wren.engine.inference import families

CHUNK_BYTES = 64 << 20  # random bytes made per piece of a large tensor


@dataclass(frozen=True)
class FamilyShape:
    family: str
    label: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied: bool
    head_dim: int = 0  # 0: hidden / heads
    context_length: int = 131072
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    # family metadata (without the "<arch>." prefix) and its type: "f32", "u32" or "bool"
    extra: dict[str, tuple[str, Any]] = field(default_factory=dict)

    @property
    def head(self) -> int:
        return self.head_dim or self.hidden // self.heads


def _phi4_mini(**over) -> FamilyShape:
    # microsoft/Phi-4-mini-instruct: partial rotary 0.75, LongRoPE from 4k to 128k
    base = dict(family="phi3", label="Phi-4-mini (3.8B)", hidden=3072, layers=32, heads=24, kv_heads=8, ffn=8192,
                vocab=200064, tied=True, rope_theta=10000.0,
                extra={"rope.dimension_count": ("u32", 96), "rope.scaling.original_context_length": ("u32", 4096),
                       "attention.sliding_window": ("u32", 0)})
    return FamilyShape(**(base | over))


PRESETS: dict[str, dict[str, FamilyShape]] = {  # each family's models, from their config.json
    "gemma3": {
        "4b": FamilyShape("gemma3", "Gemma-3-4B", hidden=2560, layers=34, heads=8, kv_heads=4, ffn=10240,
                          vocab=262144, tied=True, head_dim=256, rope_theta=1_000_000.0, rms_eps=1e-6,
                          extra={"rope.freq_base_swa": ("f32", 10000.0), "attention.sliding_window": ("u32", 1024),
                                 "rope.scaling.type": ("str", "linear"), "rope.scaling.factor": ("f32", 8.0)}),
        "1b": FamilyShape("gemma3", "Gemma-3-1B", hidden=1152, layers=26, heads=4, kv_heads=1, ffn=6912,
                          vocab=262144, tied=True, head_dim=256, rope_theta=1_000_000.0, rms_eps=1e-6,
                          context_length=32768,
                          extra={"rope.freq_base_swa": ("f32", 10000.0), "attention.sliding_window": ("u32", 512)}),
    },
    "phi3": {"phi4-mini": _phi4_mini()},
    "granite": {  # ibm-granite/granite-3.3-*-instruct
        "2b": FamilyShape("granite", "Granite-3.3-2B", hidden=2048, layers=40, heads=32, kv_heads=8, ffn=8192,
                          vocab=49159, tied=True, rope_theta=10_000_000.0, rms_eps=1e-5,
                          extra={"embedding_scale": ("f32", 12.0), "residual_scale": ("f32", 0.22),
                                 "attention.scale": ("f32", 0.015625), "logit_scale": ("f32", 8.0)}),
        "8b": FamilyShape("granite", "Granite-3.3-8B", hidden=4096, layers=40, heads=32, kv_heads=8, ffn=12800,
                          vocab=49159, tied=True, rope_theta=10_000_000.0, rms_eps=1e-5,
                          extra={"embedding_scale": ("f32", 12.0), "residual_scale": ("f32", 0.22),
                                 "attention.scale": ("f32", 0.0078125), "logit_scale": ("f32", 16.0)}),
    },
    "olmo2": {  # allenai/OLMo-2-0425-1B-Instruct
        "1b": FamilyShape("olmo2", "OLMo-2-1B", hidden=2048, layers=16, heads=16, kv_heads=16, ffn=8192,
                          vocab=100352, tied=False, rope_theta=500000.0, rms_eps=1e-6, context_length=4096),
    },
    "smollm3": {  # HuggingFaceTB/SmolLM3-3B
        "3b": FamilyShape("smollm3", "SmolLM3-3B", hidden=2048, layers=36, heads=16, kv_heads=4, ffn=11008,
                          vocab=128256, tied=True, rope_theta=5_000_000.0, rms_eps=1e-6, context_length=65536),
    },
}
DEFAULT_PRESET = {"gemma3": "4b", "phi3": "phi4-mini", "granite": "2b", "olmo2": "1b", "smollm3": "3b"}


def tiny(family: str, vocab: int = 49216) -> FamilyShape:
    """A few-MB model of the family, its parts the real ones' (for tests of this script)."""
    big = PRESETS[family][DEFAULT_PRESET[family]]
    head = 256 if family == "gemma3" else 64  # the rows of every matrix split into 256-value blocks
    extra = dict(big.extra)
    if family == "phi3":
        extra["rope.dimension_count"] = ("u32", 48)
    return dataclasses.replace(big, label=f"tiny {big.label}", hidden=256, layers=4, heads=4, kv_heads=2, ffn=512,
                               head_dim=head, vocab=vocab, extra=extra)


def _part_shapes(s: FamilyShape) -> dict[str, tuple[int, ...]]:
    fam = families.by_architecture(s.family)
    q, kv = s.heads * s.head, s.kv_heads * s.head
    ffn_rows = 2 * s.ffn if fam.fused_projections else s.ffn  # phi3's ffn_up holds gate and up
    return {
        "attn_q": (q, s.hidden), "attn_k": (kv, s.hidden), "attn_v": (kv, s.hidden),
        "attn_qkv": (q + 2 * kv, s.hidden), "attn_output": (s.hidden, q),
        "ffn_gate": (s.ffn, s.hidden), "ffn_up": (ffn_rows, s.hidden), "ffn_down": (s.hidden, s.ffn),
        # a per-head norm, or (olmo2) one over all of q and of k
        "attn_q_norm": (q,) if fam.qk_norm_whole else (s.head,),
        "attn_k_norm": (kv,) if fam.qk_norm_whole else (s.head,),
    }


def _type(part: str, layer: int, s: FamilyShape) -> T:
    """llama-quantize's Q4_K_M type for a layer matrix."""
    if part == "attn_qkv":
        return T.Q5_K
    if part in ("attn_v", "ffn_down") and random_gguf.use_more_bits(layer, s.layers):
        return T.Q6_K
    return T.Q4_K


def plan(s: FamilyShape) -> list[Planned]:
    """Every tensor of the file, in llama.cpp's order, with its type."""
    fam = families.by_architecture(s.family)
    shapes = _part_shapes(s)
    out = [Planned("token_embd.weight", (s.vocab, s.hidden), T.Q6_K if s.tied else T.Q4_K, "normal")]
    if fam.partial_rotary and "rope.scaling.original_context_length" in s.extra:  # LongRoPE's tables
        pairs = int(s.extra["rope.dimension_count"][1]) // 2
        out += [Planned(f"rope_factors_{which}.weight", (pairs,), T.F32, "ones") for which in ("long", "short")]
    for i in range(s.layers):
        for part in fam.layer_tensors:
            name = f"blk.{i}.{part}.weight"
            if part in shapes and len(shapes[part]) == 2:
                out.append(Planned(name, shapes[part], _type(part, i, s), "normal"))
            else:
                out.append(Planned(name, shapes.get(part, (s.hidden,)), T.F32, "ones"))
    out.append(Planned("output_norm.weight", (s.hidden,), T.F32, "ones"))
    if not s.tied:
        out.append(Planned("output.weight", (s.vocab, s.hidden), T.Q6_K, "normal"))
    for p in out:
        if p.fill == "normal" and p.shape[-1] % GGML_QUANT_SIZES[p.qtype][0]:
            raise ValueError(f"{p.name}: rows of {p.shape[-1]} values do not split into {p.qtype.name} blocks")
    return out


def tensor_data(p: Planned, rng: np.random.Generator) -> np.ndarray:
    if p.fill != "normal":
        return np.ones(p.shape, np.float32).view(np.uint8)
    block, size = GGML_QUANT_SIZES[p.qtype]
    rows, cols = p.shape
    row_bytes = cols // block * size
    step = max(1, CHUNK_BYTES // row_bytes)
    return np.concatenate([random_gguf.random_blocks(p.qtype, min(step, rows - r) * cols // block, rng)
                           .reshape(-1, row_bytes) for r in range(0, rows, step)])


def _header(writer: GGUFWriter, s: FamilyShape) -> None:
    writer.add_type("model")
    writer.add_name(f"Wren random {s.label} Q4_K_M")
    writer.add_description("Random blocks with a real model's shapes, for Wren's benchmarks; not a trained model.")
    writer.add_block_count(s.layers)
    writer.add_context_length(s.context_length)
    writer.add_embedding_length(s.hidden)
    writer.add_feed_forward_length(s.ffn)
    writer.add_head_count(s.heads)
    writer.add_head_count_kv(s.kv_heads)
    writer.add_key_length(s.head)
    writer.add_value_length(s.head)
    writer.add_rope_freq_base(s.rope_theta)
    writer.add_layer_norm_rms_eps(s.rms_eps)
    writer.add_vocab_size(s.vocab)
    if "rope.dimension_count" not in s.extra:
        writer.add_rope_dimension_count(s.head)
    add = {"f32": writer.add_float32, "u32": writer.add_uint32, "bool": writer.add_bool, "str": writer.add_string}
    for key, (kind, value) in s.extra.items():
        if key == "rope.scaling.type":
            writer.add_rope_scaling_type(RopeScalingType(value))
        else:
            add[kind](f"{s.family}.{key}", value)
    writer.add_file_type(int(LlamaFileType.MOSTLY_Q4_K_M))
    writer.add_quantization_version(GGML_QUANT_VERSION)


def write(out: Path, s: FamilyShape, *, tokenizer_from: Path, seed: int = 0) -> dict:
    """Write the random model to `out` (through a temporary name) and return a summary."""
    out = Path(out)
    planned = plan(s)
    tokenizer = make_gguf.tokenizer_metadata(Path(tokenizer_from), s.vocab)
    tmp = out.with_name(out.name + ".partial")
    writer = GGUFWriter(tmp, s.family)
    _header(writer, s)
    started = time.monotonic()
    counts = make_gguf.write_body(writer, tmp, out, tokenizer, planned,
                                  lambda index, p: tensor_data(p, np.random.default_rng([seed, index])))
    return {"path": str(out), "family": s.family, "shape": s.label, "file_bytes": out.stat().st_size,
            "tensor_bytes": sum(make_gguf.tensor_bytes(p) for p in planned),
            "parameters": sum(math.prod(p.shape) for p in planned if not p.name.startswith("rope_factors")),
            "tensors_per_type": counts, "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--family", required=True, choices=sorted(PRESETS))
    ap.add_argument("--preset", help="the family's model (default: " +
                    ", ".join(f"{f} {p}" for f, p in DEFAULT_PRESET.items()) + ")")
    ap.add_argument("--tiny", action="store_true", help="a tiny model of the family's parts (for tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", type=Path, help="a GGUF holding a tokenizer (default: the starter)")
    args = ap.parse_args(argv)
    presets = PRESETS[args.family]
    preset = args.preset or DEFAULT_PRESET[args.family]
    if preset not in presets:
        raise SystemExit(f"random_family: {args.family} has no preset {preset!r}; choose {', '.join(presets)}")
    shape = tiny(args.family) if args.tiny else presets[preset]
    try:
        summary = write(args.out, shape, seed=args.seed, tokenizer_from=args.tokenizer_from or make_gguf.starter_gguf())
    except ValueError as exc:
        raise SystemExit(f"random_family: {exc}") from None
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
