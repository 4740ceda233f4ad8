"""Llama-family GGUF files of random blocks, written at disk speed: an 8B Q4_K_M in seconds.

bench/make_gguf.py quantizes random floats in Python (minutes for an 8B, and it has no K-quant
quantizer); the speed of a matrix product does not depend on the values, so here every
block's bytes are random and only its fp16 scale fields are set, to values that keep the
weights near normal(0, 0.02) as make_gguf's are (activations stay finite through the layers).
The types follow llama-quantize's choices, so the byte counts match real files:

  q4_k_m   Q4_K matrices; Q6_K for the output (the token embedding when tied) and for attn_v
           and ffn_down in the layers llama.cpp gives more bits (its use_more_bits rule)
  q4_0     Q4_0 matrices and token embedding, Q6_K for the output (llama-quantize's Q4_0)
  starter  the shipped starter's layout: Q4_1 matrices, the tied embedding Q8_0

Tokenizer: a GGUF's tokenizer.* keys (--tokenizer-from, default the starter's), padded as
make_gguf pads them. `tokenizer_gguf` writes one holding only those keys (a few MB), which a
GPU machine without the starter package can take instead.

    .venv/bin/python bench/random_gguf.py OUT.gguf --preset 8b [--layout q4_k_m] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, LlamaFileType
from gguf.constants import GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_gguf
from make_gguf import PRESETS, Planned, Shape, tensor_bytes

LAYOUTS = {"q4_k_m": LlamaFileType.MOSTLY_Q4_K_M, "q4_0": LlamaFileType.MOSTLY_Q4_0,
           "starter": LlamaFileType.MOSTLY_Q4_1}
# Where each type's fp16 scales sit in its block and the value they take (so the block's
# values have a spread near 0.02): (offset, value) pairs.
FP16_FIELDS: dict[T, tuple[tuple[int, float], ...]] = {
    T.Q4_0: ((0, 0.0043),),  # d * (q - 8)
    T.Q4_1: ((0, 0.0043), (2, -0.032)),  # d * q + m, centred
    T.Q8_0: ((0, 2.7e-4),),  # d * q, q int8
    T.Q4_K: ((0, 1.4e-4), (2, 1.0e-3)),  # d * sc * q - dmin * m, 6-bit sc and m
    T.Q5_K: ((0, 7.0e-5), (2, 1.0e-3)),  # as Q4_K, q of 5 bits
    T.Q6_K: ((208, 1.5e-5),),  # d * sc * (q - 32), int8 sc
}


def use_more_bits(i: int, n: int) -> bool:
    """llama-quantize's layers whose attn_v and ffn_down get Q6_K in a Q4_K_M file."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def plan(shape: Shape, layout: str) -> list[Planned]:
    """Every tensor of the file, in order, with its type (make_gguf's order and names)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    shape.check()
    base = make_gguf.plan(shape, "Q4_0", pure=True)  # names, shapes and fills; types set here
    matrix, head = {"q4_k_m": (T.Q4_K, T.Q6_K), "q4_0": (T.Q4_0, T.Q6_K)}.get(layout, (T.Q4_1, T.Q8_0))
    out = []
    for p in base:
        qtype = p.qtype
        if p.fill == "normal":
            qtype = matrix
            if p.name == "output.weight" or (p.name == "token_embd.weight" and shape.tied):
                qtype = head
            elif layout == "q4_k_m" and p.name.endswith(("attn_v.weight", "ffn_down.weight")):
                if use_more_bits(int(p.name.split(".")[1]), shape.layers):
                    qtype = T.Q6_K
            block = GGML_QUANT_SIZES[qtype][0]
            if p.shape[-1] % block:
                raise ValueError(f"{p.name}: rows of {p.shape[-1]} values do not split into {qtype.name} "
                                 f"blocks of {block}; choose the 'starter' layout for this shape")
        out.append(dataclasses.replace(p, qtype=qtype))
    return out


def random_blocks(qtype: T, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [n_blocks, block bytes]: random bytes, the fp16 scales set (each times 0.5..1)."""
    size = GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    for at, value in FP16_FIELDS[qtype]:
        scale = (value * rng.uniform(0.5, 1.0, n_blocks)).astype(np.float16)
        blocks[:, at:at + 2] = scale.view(np.uint8).reshape(-1, 2)
    return blocks


def tensor_data(p: Planned, shape: Shape, rng: np.random.Generator) -> np.ndarray:
    if p.fill != "normal":
        return make_gguf.tensor_data(p, shape, rng)
    block, size = GGML_QUANT_SIZES[p.qtype]
    rows, cols = p.shape
    return random_blocks(p.qtype, rows * cols // block, rng).reshape(rows, cols // block * size)


def write(out: Path, shape: Shape, layout: str, *, tokenizer_from: Path, seed: int = 0) -> dict:
    """Write the random model to `out` (through a temporary name) and return a summary."""
    out = Path(out)
    planned = plan(shape, layout)
    tokenizer = make_gguf.tokenizer_metadata(Path(tokenizer_from), shape.vocab)
    tmp = out.with_name(out.name + ".partial")
    writer = GGUFWriter(tmp, "llama")
    _header(writer, shape, layout)
    started = time.monotonic()
    counts = make_gguf.write_body(writer, tmp, out, tokenizer, planned,
                                  lambda index, p: tensor_data(p, shape, np.random.default_rng([seed, index])))
    return {"path": str(out), "shape": dataclasses.asdict(shape), "layout": layout,
            "file_bytes": out.stat().st_size, "tensor_bytes": sum(tensor_bytes(p) for p in planned),
            "parameters": sum(math.prod(p.shape) for p in planned if p.fill != "rope_freqs"),
            "tensors_per_type": counts, "seconds": round(time.monotonic() - started, 1)}


def _header(writer: GGUFWriter, shape: Shape, layout: str) -> None:
    make_gguf.write_header(writer, shape, f"Wren random {shape.label} {layout}", "Random blocks",
                           int(LAYOUTS[layout]), quantized=True)


def tokenizer_gguf(source: Path, out: Path) -> Path:
    """A GGUF holding only `source`'s tokenizer.* keys: what `write` takes a tokenizer from."""
    from wren.engine.modelhub.gguf_file import GGUFFile

    with GGUFFile(Path(source)) as g:
        meta = {k: v for k, v in g.metadata.items() if k.startswith("tokenizer.")}
    writer = GGUFWriter(out, "llama")
    for key, value in meta.items():
        make_gguf._add_metadata(writer, key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return Path(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--layout", default="q4_k_m", choices=sorted(LAYOUTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", type=Path, help="a GGUF holding a tokenizer (default: the starter)")
    args = ap.parse_args(argv)
    try:
        summary = write(args.out, PRESETS[args.preset], args.layout, seed=args.seed,
                        tokenizer_from=args.tokenizer_from or make_gguf.starter_gguf())
    except ValueError as exc:
        raise SystemExit(f"random_gguf: {exc}") from None
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
