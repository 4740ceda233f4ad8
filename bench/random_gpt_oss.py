"""A synthetic gpt-oss-20b GGUF (architecture gpt-oss) of random blocks, written as a stream
by random_moe's machinery (one tensor in memory at a time: one layer's experts of one
projection, ~180 MB), with the experts in MXFP4 as the released file has them.

Shape from gpt-oss-20b's config: 24 layers, hidden 2880, 64 query heads and 8 key/value
heads of 64, 32 experts of inner size 2880, 4 a token, vocabulary 201,088, untied output,
a 128-token window on every even layer, YaRN (factor 32 over 4,096 positions), attention
sinks. Types: MXFP4 experts (llama.cpp's converter keeps the checkpoint's), Q8_0 attention,
embedding and output (the rest of a 12 GB file), F32 norms, sinks, router and biases.
MXFP4 blocks are random codes with scale bytes 2^-9..2^-6 (e8m0 118..121); the router's
rows are normal(0, 0.02), so routing spreads tokens over the experts.

    .venv/bin/python bench/random_gpt_oss.py OUT.gguf [--layers 24] [--seed 0] [--tokenizer-from GGUF]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGML_QUANT_VERSION, LlamaFileType, RopeScalingType
from gguf.constants import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_gguf
from make_gguf import Planned
from random_gguf import random_blocks
from random_moe import write_mixture

ARCH = "gpt-oss"
MXFP4_SCALES = (118, 122)  # e8m0 bytes: 2^-9 .. 2^-6 (values up to 6 times that)


@dataclass(frozen=True)
class GptOssShape:
    layers: int = 24
    hidden: int = 2880
    heads: int = 64
    kv_heads: int = 8
    head_dim: int = 64
    experts: int = 32
    used: int = 4
    expert_ffn: int = 2880
    vocab: int = 201088
    context_length: int = 131072
    window: int = 128
    rope_theta: float = 150000.0
    yarn_factor: float = 32.0
    yarn_original: int = 4096
    rms_eps: float = 1e-5
    label: str = "gpt-oss-20b"


def plan(shape: GptOssShape) -> list[Planned]:
    """Every tensor, in llama.cpp's order for gpt-oss, with the released file's types."""
    h, q, kv, e, f = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.experts, \
        shape.expert_ffn
    out = [Planned("token_embd.weight", (shape.vocab, h), T.Q8_0, "normal")]
    for i in range(shape.layers):
        b = f"blk.{i}."
        out += [
            Planned(b + "attn_norm.weight", (h,), T.F32, "ones"),
            Planned(b + "attn_q.weight", (q, h), T.Q8_0, "normal"), Planned(b + "attn_q.bias", (q,), T.F32, "small"),
            Planned(b + "attn_k.weight", (kv, h), T.Q8_0, "normal"), Planned(b + "attn_k.bias", (kv,), T.F32, "small"),
            Planned(b + "attn_v.weight", (kv, h), T.Q8_0, "normal"), Planned(b + "attn_v.bias", (kv,), T.F32, "small"),
            Planned(b + "attn_output.weight", (h, q), T.Q8_0, "normal"),
            Planned(b + "attn_output.bias", (h,), T.F32, "small"),
            Planned(b + "attn_sinks.weight", (shape.heads,), T.F32, "small"),
            Planned(b + "post_attention_norm.weight", (h,), T.F32, "ones"),
            Planned(b + "ffn_gate_inp.weight", (e, h), T.F32, "router"),
            Planned(b + "ffn_gate_inp.bias", (e,), T.F32, "small"),
            Planned(b + "ffn_gate_exps.weight", (e, f, h), T.MXFP4, "normal"),
            Planned(b + "ffn_gate_exps.bias", (e, f), T.F32, "small"),
            Planned(b + "ffn_up_exps.weight", (e, f, h), T.MXFP4, "normal"),
            Planned(b + "ffn_up_exps.bias", (e, f), T.F32, "small"),
            Planned(b + "ffn_down_exps.weight", (e, h, f), T.MXFP4, "normal"),
            Planned(b + "ffn_down_exps.bias", (e, h), T.F32, "small"),
        ]
    out += [Planned("output_norm.weight", (h,), T.F32, "ones"),
            Planned("output.weight", (shape.vocab, h), T.Q8_0, "normal")]
    return out


def mxfp4_blocks(n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    blocks = rng.integers(0, 256, (n_blocks, 17), dtype=np.uint8)
    blocks[:, 0] = rng.integers(*MXFP4_SCALES, n_blocks, dtype=np.uint8)
    return blocks


def tensor_data(p: Planned, rng: np.random.Generator) -> np.ndarray:
    if p.fill == "ones":
        return np.ones(p.shape, np.float32).view(np.uint8)
    if p.fill == "small":
        return (rng.standard_normal(p.shape, dtype=np.float32) * 0.02).view(np.uint8)
    if p.fill == "router":
        return (rng.standard_normal(p.shape, dtype=np.float32) * make_gguf.WEIGHT_STD).view(np.uint8)
    block, size = GGML_QUANT_SIZES[p.qtype]
    rows = math.prod(p.shape[:-1])
    n_blocks = rows * p.shape[-1] // block
    data = mxfp4_blocks(n_blocks, rng) if p.qtype == T.MXFP4 else random_blocks(p.qtype, n_blocks, rng)
    return data.reshape(*p.shape[:-1], p.shape[-1] // block * size)


def header(writer: GGUFWriter, shape: GptOssShape) -> None:
    writer.add_type("model")
    writer.add_name(f"Wren random {shape.label} MXFP4")
    writer.add_description("Random blocks with a real model's shapes, for Wren's benchmarks; not a trained model.")
    writer.add_block_count(shape.layers)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.expert_ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_sliding_window(shape.window)
    writer.add_rope_scaling_type(RopeScalingType.YARN)
    writer.add_rope_scaling_factor(shape.yarn_factor)
    writer.add_rope_scaling_orig_ctx_len(shape.yarn_original)
    writer.add_expert_count(shape.experts)
    writer.add_expert_used_count(shape.used)
    writer.add_expert_feed_forward_length(shape.expert_ffn)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(int(LlamaFileType.MOSTLY_MXFP4_MOE))
    writer.add_quantization_version(GGML_QUANT_VERSION)


def write(out: Path, shape: GptOssShape, *, tokenizer_from: Path, seed: int = 0) -> dict:
    return write_mixture(out, shape, plan(shape), header, tensor_data, arch=ARCH, tokenizer_from=tokenizer_from,
                         seed=seed)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", type=Path, help="a GGUF holding a tokenizer (default: the starter)")
    args = ap.parse_args(argv)
    if args.layers < 1:
        raise SystemExit("random_gpt_oss: --layers must be at least 1")
    summary = write(args.out, GptOssShape(layers=args.layers), seed=args.seed,
                    tokenizer_from=args.tokenizer_from or make_gguf.starter_gguf())
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
