"""A Gemma 3 GGUF of random blocks at a real model's shape (default Gemma 3 4B, Q4_K_M), as
bench/random_gguf.py makes llama ones: every matrix's bytes random but its fp16 scales set,
the norms 1.0, the types llama-quantize picks for Q4_K_M (Q4_K matrices; Q6_K for the tied
embedding, and for attn_v and ffn_down in the layers it gives more bits), gemma3's tensor
names and metadata as llama.cpp's converter writes them. For bench/memory.py:

    .venv/bin/python bench/random_gemma3.py /tmp/gemma3-4b-q4_k_m.gguf [--preset 4b]
    .venv/bin/python bench/memory.py /tmp/gemma3-4b-q4_k_m.gguf --no-starter --no-llama-cpp
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, RopeScalingType
from gguf.constants import GGML_QUANT_SIZES, GGML_QUANT_VERSION, LlamaFileType
from gguf.constants import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_gguf
import random_gguf


@dataclass(frozen=True)
class Gemma3Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    window: int
    vocab: int = 262144
    context_length: int = 131072
    label: str = "custom"


PRESETS = {  # google/gemma-3-*-it config.json
    "1b": Gemma3Shape(hidden=1152, layers=26, heads=4, kv_heads=1, head_dim=256, ffn=6912, window=512,
                      context_length=32768, label="Gemma-3-1B"),
    "4b": Gemma3Shape(hidden=2560, layers=34, heads=8, kv_heads=4, head_dim=256, ffn=10240, window=1024,
                      label="Gemma-3-4B"),
}


def tensors(s: Gemma3Shape) -> list[tuple[str, tuple[int, int] | tuple[int], T]]:
    """(name, numpy shape, type) of every tensor, llama.cpp's names."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    out: list[tuple[str, tuple[int, int] | tuple[int], T]] = [("token_embd.weight", (s.vocab, s.hidden), T.Q6_K)]
    for i in range(s.layers):
        more = random_gguf.use_more_bits(i, s.layers)
        out += [
            (f"blk.{i}.attn_norm.weight", (s.hidden,), T.F32),
            (f"blk.{i}.attn_q.weight", (q, s.hidden), T.Q4_K),
            (f"blk.{i}.attn_k.weight", (kv, s.hidden), T.Q4_K),
            (f"blk.{i}.attn_v.weight", (kv, s.hidden), T.Q6_K if more else T.Q4_K),
            (f"blk.{i}.attn_q_norm.weight", (s.head_dim,), T.F32),
            (f"blk.{i}.attn_k_norm.weight", (s.head_dim,), T.F32),
            (f"blk.{i}.attn_output.weight", (s.hidden, q), T.Q4_K),
            (f"blk.{i}.post_attention_norm.weight", (s.hidden,), T.F32),
            (f"blk.{i}.ffn_norm.weight", (s.hidden,), T.F32),
            (f"blk.{i}.ffn_gate.weight", (s.ffn, s.hidden), T.Q4_K),
            (f"blk.{i}.ffn_up.weight", (s.ffn, s.hidden), T.Q4_K),
            (f"blk.{i}.ffn_down.weight", (s.hidden, s.ffn), T.Q6_K if more else T.Q4_K),
            (f"blk.{i}.post_ffw_norm.weight", (s.hidden,), T.F32),
        ]
    return out + [("output_norm.weight", (s.hidden,), T.F32)]


def _bytes(shape: tuple[int, ...], qtype: T) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return math.prod(shape) // block * size


def write(out: Path, s: Gemma3Shape, tokenizer_from: Path, seed: int = 0) -> dict:
    planned = tensors(s)
    tmp = out.with_name(out.name + ".partial")
    writer = GGUFWriter(tmp, "gemma3")
    writer.add_type("model")
    writer.add_name(f"Wren random {s.label} Q4_K_M")
    writer.add_block_count(s.layers)
    writer.add_context_length(s.context_length)
    writer.add_embedding_length(s.hidden)
    writer.add_feed_forward_length(s.ffn)
    writer.add_head_count(s.heads)
    writer.add_head_count_kv(s.kv_heads)
    writer.add_key_length(s.head_dim)
    writer.add_value_length(s.head_dim)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_float32("gemma3.rope.freq_base_swa", 10000.0)
    writer.add_rope_scaling_type(RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(8.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(s.window)
    writer.add_file_type(int(LlamaFileType.MOSTLY_Q4_K_M))
    writer.add_quantization_version(GGML_QUANT_VERSION)
    for key, value in make_gguf.tokenizer_metadata(tokenizer_from, s.vocab).items():
        make_gguf._add_metadata(writer, key, value)
    for name, shape, qtype in planned:
        if qtype == T.F32:
            writer.add_tensor_info(name, shape, np.dtype(np.float32), _bytes(shape, qtype))
        else:
            block, size = GGML_QUANT_SIZES[qtype]
            writer.add_tensor_info(name, (*shape[:-1], shape[-1] // block * size), np.dtype(np.uint8),
                                   _bytes(shape, qtype), raw_dtype=qtype)
    started = time.monotonic()
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for index, (_, shape, qtype) in enumerate(planned):
        rng = np.random.default_rng([seed, index])
        if qtype == T.F32:
            writer.write_tensor_data(np.ones(shape, dtype=np.float32))
        else:
            block = GGML_QUANT_SIZES[qtype][0]
            rows, cols = shape[0], shape[-1]
            chunk = max(1, (64 << 20) // (cols // block * GGML_QUANT_SIZES[qtype][1]))
            data = np.concatenate([random_gguf.random_blocks(qtype, min(chunk, rows - r) * cols // block, rng)
                                   .reshape(-1, cols // block * GGML_QUANT_SIZES[qtype][1])
                                   for r in range(0, rows, chunk)])
            writer.write_tensor_data(data)
    writer.close()
    os.replace(tmp, out)
    return {"path": str(out), "shape": s.label, "file_bytes": out.stat().st_size,
            "tensor_bytes": sum(_bytes(shape, q) for _, shape, q in planned),
            "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", default="4b", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", type=Path, help="a GGUF holding a tokenizer (default: the starter)")
    args = ap.parse_args()
    print(json.dumps(write(args.out, PRESETS[args.preset], args.tokenizer_from or make_gguf.starter_gguf(),
                           args.seed), indent=2))


if __name__ == "__main__":
    main()
