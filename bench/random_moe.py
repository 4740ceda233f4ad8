"""A synthetic Qwen3-30B-A3B GGUF (architecture qwen3moe) of random blocks, written as a
stream: one tensor in memory at a time (the largest, one layer's experts of one projection,
~150 MB), so an 18 GB file needs well under 1 GB of RAM.

Shape from Qwen3-30B-A3B's config: 48 layers, hidden 2048, 32 query heads and 4 key/value
heads of 128, 128 experts of inner size 768, 8 a token, vocabulary 151,936, untied output.
Types as llama-quantize's Q4_K_M gives them (the real file's byte count): Q4_K matrices and
experts; Q6_K for the output and, in the layers llama.cpp gives more bits (random_gguf's
use_more_bits), attn_v and ffn_down_exps; the router (ffn_gate_inp), norms and q/k norms F32.
Blocks are random with their fp16 scales set (random_gguf.random_blocks), so a product's
speed is a real file's; the router's rows are normal(0, 0.02) floats, so routing spreads
tokens over the experts as a trained router does rather than always picking the same 8.
--layers N writes fewer layers at the same per-layer shape (a machine short of RAM or disk).

    .venv/bin/python bench/random_moe.py OUT.gguf [--layers 48] [--seed 0] [--tokenizer-from GGUF]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGML_QUANT_VERSION, LlamaFileType
from gguf.constants import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_gguf
from make_gguf import Planned, tensor_bytes
from random_gguf import random_blocks, use_more_bits

ARCH = "qwen3moe"


@dataclass(frozen=True)
class MoeShape:
    layers: int = 48
    hidden: int = 2048
    heads: int = 32
    kv_heads: int = 4
    head_dim: int = 128
    experts: int = 128
    used: int = 8
    expert_ffn: int = 768
    ffn: int = 6144  # the config's dense size (the file records it; no layer uses it)
    vocab: int = 151936
    context_length: int = 40960
    rope_theta: float = 1000000.0
    rms_eps: float = 1e-6
    label: str = "Qwen3-30B-A3B"


def plan(shape: MoeShape) -> list[Planned]:
    """Every tensor, in llama.cpp's order, with Q4_K_M's type for it."""
    h, q, kv, e, f = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim, shape.experts, \
        shape.expert_ffn
    out = [Planned("token_embd.weight", (shape.vocab, h), T.Q4_K, "normal")]
    for i in range(shape.layers):
        b, more = f"blk.{i}.", use_more_bits(i, shape.layers)
        out += [
            Planned(b + "attn_norm.weight", (h,), T.F32, "ones"),
            Planned(b + "attn_q.weight", (q, h), T.Q4_K, "normal"),
            Planned(b + "attn_k.weight", (kv, h), T.Q4_K, "normal"),
            Planned(b + "attn_v.weight", (kv, h), T.Q6_K if more else T.Q4_K, "normal"),
            Planned(b + "attn_output.weight", (h, q), T.Q4_K, "normal"),
            Planned(b + "attn_q_norm.weight", (shape.head_dim,), T.F32, "ones"),
            Planned(b + "attn_k_norm.weight", (shape.head_dim,), T.F32, "ones"),
            Planned(b + "ffn_norm.weight", (h,), T.F32, "ones"),
            Planned(b + "ffn_gate_inp.weight", (e, h), T.F32, "router"),
            Planned(b + "ffn_gate_exps.weight", (e, f, h), T.Q4_K, "normal"),
            Planned(b + "ffn_up_exps.weight", (e, f, h), T.Q4_K, "normal"),
            Planned(b + "ffn_down_exps.weight", (e, h, f), T.Q6_K if more else T.Q4_K, "normal"),
        ]
    out += [Planned("output_norm.weight", (h,), T.F32, "ones"),
            Planned("output.weight", (shape.vocab, h), T.Q6_K, "normal")]
    return out


def tensor_data(p: Planned, rng: np.random.Generator) -> np.ndarray:
    if p.fill == "ones":
        return np.ones(p.shape, np.float32).view(np.uint8)
    if p.fill == "router":
        return (rng.standard_normal(p.shape, dtype=np.float32) * make_gguf.WEIGHT_STD).view(np.uint8)
    block, size = GGML_QUANT_SIZES[p.qtype]
    rows = math.prod(p.shape[:-1])
    data = random_blocks(p.qtype, rows * p.shape[-1] // block, rng)
    return data.reshape(*p.shape[:-1], p.shape[-1] // block * size)


def header(writer: GGUFWriter, shape: MoeShape) -> None:
    writer.add_type("model")
    writer.add_name(f"Wren random {shape.label} Q4_K_M")
    writer.add_description("Random blocks with a real model's shapes, for Wren's benchmarks; not a trained model.")
    writer.add_block_count(shape.layers)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_expert_count(shape.experts)
    writer.add_expert_used_count(shape.used)
    writer.add_expert_feed_forward_length(shape.expert_ffn)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(int(LlamaFileType.MOSTLY_Q4_K_M))
    writer.add_quantization_version(GGML_QUANT_VERSION)


def active_bytes(planned: list[Planned], shape) -> int:
    """Bytes one decoded token reads: every tensor but the embedding (one row of it), and of
    the experts' tensors (`*_exps.*`, biases too) `used` of `experts`."""
    total = 0
    for p in planned:
        if p.name == "token_embd.weight":
            continue
        n = tensor_bytes(p)
        total += n * shape.used // shape.experts if "_exps." in p.name else n
    return total


def write(out: Path, shape: MoeShape, *, tokenizer_from: Path, seed: int = 0) -> dict:
    return write_mixture(out, shape, plan(shape), header, tensor_data, arch=ARCH, tokenizer_from=tokenizer_from,
                         seed=seed)


def write_mixture(out: Path, shape, planned: list[Planned], header_of, data_of, *, arch: str,
                  tokenizer_from: Path, seed: int = 0) -> dict:
    """Stream a mixture's GGUF (`header_of(writer, shape)`, `data_of(planned, rng)`; also for
    random_gpt_oss.py) and say what it holds: sizes, parameters, active ones."""
    out = Path(out)
    tokenizer = make_gguf.tokenizer_metadata(Path(tokenizer_from), shape.vocab)
    tmp = out.with_name(out.name + ".partial")
    writer = GGUFWriter(tmp, arch)
    header_of(writer, shape)
    started = time.monotonic()
    counts = make_gguf.write_body(writer, tmp, out, tokenizer, planned,
                                  lambda index, p: data_of(p, np.random.default_rng([seed, index])),
                                  log=lambda line: print(line, file=sys.stderr, flush=True))
    parameters = sum(math.prod(p.shape) for p in planned)
    expert = sum(math.prod(p.shape) for p in planned if "_exps." in p.name)
    return {"path": str(out), "shape": shape.__dict__, "file_bytes": out.stat().st_size,
            "tensor_bytes": sum(tensor_bytes(p) for p in planned), "active_bytes_per_token": active_bytes(planned, shape),
            "parameters": parameters, "active_parameters": parameters - expert * (shape.experts - shape.used) // shape.experts,
            "tensors_per_type": counts, "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", type=Path, help="a GGUF holding a tokenizer (default: the starter)")
    args = ap.parse_args(argv)
    if args.layers < 1:
        raise SystemExit("random_moe: --layers must be at least 1")
    summary = write(args.out, MoeShape(layers=args.layers), seed=args.seed,
                    tokenizer_from=args.tokenizer_from or make_gguf.starter_gguf())
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
