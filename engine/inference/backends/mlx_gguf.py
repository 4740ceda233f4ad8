"""Model folders holding model.gguf, for the MLX backend: MLX reads the GGUF's tensors,
Wren gives them mlx-lm's names and order and builds the mlx-lm model from config.json.

What `mx.load` makes of each GGML type (measured on mlx 0.32; tests/engine/inference/
test_mlx_gguf.py checks each against `gguf.quants.dequantize`):

- F32, F16: kept as they are.
- Q8_0, Q4_0, Q4_1: MLX's own quantized layout (weight, scales, biases; 8/4/4 bits in groups
  of 32, scales and biases float16). The values are exactly the file's, so these stay
  quantized and run through MLX's quantized matmul.
- Q2_K, Q6_K: widened to float16 (the file's values rounded to float16): MLX has no kernels
  for their 16-value sub-blocks.
- BF16: mx.load turns it into float16, which overflows past 65504 and flushes tiny values;
  read here instead, bit for bit as bfloat16.
- Q4_K: mx.load widens it to float16 but gives every odd sub-block its even neighbour's scale
  and minimum, so the values are wrong. Its 32-value sub-blocks fit MLX's layout (4 bits,
  groups of 32; scale d*sc, bias -dmin*m, each one exact float32 product), so it is
  repacked here from the file's bytes and stays quantized, with the file's exact values.
- Q5_0, Q5_1, Q3_K, Q5_K (and any other type): mx.load fails on the whole file, so loading
  stops first with UnsupportedQuantization naming a tensor and its type.
- MXFP4 (gpt-oss's experts): mx.load reads a file holding it as no tensors at all, so such a
  file is read here whole: MXFP4 into MLX's own mxfp4 layout (mlx_mxfp4.py), Q8_0 into 8-bit
  affine groups (q + 128, scale d, bias -128 d), Q4_K as above, F32/F16/BF16 as they are; the
  values are the file's exactly. Other types beside MXFP4 are refused by name.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from gguf.constants import GGMLQuantizationType as T

from ...errors import ModelFileError, UnsupportedQuantization
from ...modelhub.gguf_file import GGUFFile
from .. import families
from .mlx_mxfp4 import MLX_QUANTIZATION, mxfp4_to_mlx

log = logging.getLogger(__name__)

# GGML type -> bits of the MLX quantized arrays it becomes (groups of 32 values)
QUANTIZED = {T.Q8_0: 8, T.Q4_0: 4, T.Q4_1: 4, T.Q4_K: 4}
GROUP_SIZE = 32
KEPT = frozenset({T.F32, T.F16})
WIDENED_BY_MLX = frozenset({T.Q2_K, T.Q6_K})  # float16, values rounded to it
READ_HERE = frozenset({T.BF16, T.Q4_K})  # mx.load gets these wrong: read from the bytes
RUNS = frozenset(QUANTIZED) | KEPT | WIDENED_BY_MLX | READ_HERE | {T.MXFP4}
# mx.load reads a GGUF holding MXFP4 (gpt-oss's experts) as no tensors at all: such a file is
# read here whole, each tensor from its bytes (mlx_mxfp4.py), for these types only.
READ_ALL_HERE = frozenset({T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_K, T.MXFP4})


def load_gguf_model(path: Path, config: dict, overrides: dict | None = None) -> tuple[nn.Module, dict, str]:
    """The mlx-lm model for the GGUF `path` of a model folder (its config.json is
    `config`, read by mlx-lm with `overrides` laid over it: mlx_config.mlx_overrides), and
    the dtype "auto" means for it.

    Raises UnsupportedQuantization for a tensor type MLX cannot run, ModelFileError for a
    damaged file; mlx-lm's own errors (an unknown model_type, weights that do not fit
    config.json) pass through for the caller to word."""
    from mlx_lm.utils import load_model

    from ...modelhub.gguf_import import plan_tensors

    path = Path(path)
    with GGUFFile(path) as gguf:  # checks the layout: a cut-short file fails here by name
        plan = plan_tensors(gguf, str(gguf.metadata.get("general.architecture")), config)
        loaded = read_tensors(gguf)

    weights: dict[str, mx.array] = {}
    quantized: dict[str, dict] = {}  # module path -> nn.quantize parameters
    for item in plan:
        info = item.source
        stem, kind = info.name.rsplit(".", 1)
        hf_stem = item.hf_name[: -len(kind) - 1]
        mxfp4 = info.ggml_type == T.MXFP4
        parts = [kind] + (["scales", "biases"] if info.ggml_type in QUANTIZED else ["scales"] if mxfp4 else [])
        for part in parts:
            array = loaded.pop(f"{stem}.{part}", None)
            if array is None:
                raise ModelFileError(f"{path}: MLX read no {stem}.{part} for tensor {info.name}")
            if item.unpermute_heads:
                array = unpermute_rows(array, item.unpermute_heads)
            # gpt-oss's sinks are a bare parameter in mlx-lm (self_attn.sinks)
            weights[hf_stem if hf_stem.endswith(".sinks") else f"{hf_stem}.{part}"] = array
        if info.ggml_type in QUANTIZED:
            quantized[hf_stem] = {"group_size": GROUP_SIZE, "bits": QUANTIZED[T(info.ggml_type)],
                                  "mode": "affine"}
        elif mxfp4:
            quantized[hf_stem] = dict(MLX_QUANTIZATION)
    _log_widened(plan, path)

    # mlx-lm builds the model from config.json (lazily: nothing is allocated until the
    # file's weights replace the initial ones); the layers the file keeps quantized
    # become quantized layers of the file's group size and bits.
    model, config = load_model(path.parent, lazy=True, strict=False, model_config=overrides)
    family = families.find_model_type(config.get("model_type"))
    if family is not None and family.norm_offset:  # a GGUF's gemma norms are weight + 1
        weights = {k: v - family.norm_offset if k.endswith("norm.weight") else v for k, v in weights.items()}
    if hasattr(model, "sanitize"):
        try:
            weights = model.sanitize(weights)
        except KeyError:  # load_model sanitized it once already (gemma3's then drops lm_head)
            pass
    nn.quantize(model, class_predicate=lambda p, m: quantized.get(p, False) if hasattr(m, "to_quantized") else False)
    _add_missing_biases(model, weights)
    model.eval()
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return model, config, _auto_dtype(plan)


def read_tensors(gguf: GGUFFile) -> dict[str, mx.array]:
    """Every tensor of an opened GGUF as MLX arrays, under mx.load's names: a quantized
    tensor NAME.weight comes as NAME.weight (packed uint32), NAME.scales and NAME.biases."""
    for info in gguf.tensors.values():  # mx.load would fail on the whole file, unnamed
        check_mlx_runs(info.ggml_type, info.name, gguf.path.name)
    if any(info.ggml_type == T.MXFP4 for info in gguf.tensors.values()):
        return _read_all_here(gguf)
    try:
        loaded = mx.load(str(gguf.path))
    except (RuntimeError, ValueError, OSError) as exc:
        raise ModelFileError(f"{gguf.path}: MLX cannot read it: {exc}") from None
    if not isinstance(loaded, dict):  # mx.load gives a dict of arrays for a GGUF file
        raise ModelFileError(f"{gguf.path}: MLX read it as {type(loaded).__name__}, not named tensors")
    for info in gguf.tensors.values():  # the types mx.load gets wrong, read again here
        if info.ggml_type == T.BF16:
            loaded[info.name] = mx.array(gguf.read(info.name)).view(mx.bfloat16)
        elif info.ggml_type == T.Q4_K:
            stem = info.name.rsplit(".", 1)[0]
            packed, scales, biases = q4_k_to_mlx(gguf.raw(info.name), info.shape)
            loaded[info.name] = mx.array(packed)
            loaded[f"{stem}.scales"], loaded[f"{stem}.biases"] = mx.array(scales), mx.array(biases)
    return loaded


def _read_all_here(gguf: GGUFFile) -> dict[str, mx.array]:
    """read_tensors for a file mx.load cannot read (MXFP4): every tensor from its bytes."""
    loaded: dict[str, mx.array] = {}
    for info in gguf.tensors.values():
        kind = T(info.ggml_type)
        if kind not in READ_ALL_HERE:
            raise UnsupportedQuantization(f"{gguf.path.name}: MLX cannot run {kind.name} tensors ({info.name}) in a "
                                          "file with MXFP4 tensors; use the torch backend")
        stem = info.name.rsplit(".", 1)[0]
        if kind == T.MXFP4:
            weight, scales = mxfp4_to_mlx(gguf.raw(info.name), info.shape)
            loaded[info.name], loaded[f"{stem}.scales"] = mx.array(weight), mx.array(scales)
        elif kind in (T.Q8_0, T.Q4_K):
            convert = q8_0_to_mlx if kind == T.Q8_0 else q4_k_to_mlx
            packed, scales, biases = convert(gguf.raw(info.name), info.shape)
            loaded[info.name] = mx.array(packed)
            loaded[f"{stem}.scales"], loaded[f"{stem}.biases"] = mx.array(scales), mx.array(biases)
        elif kind == T.BF16:
            loaded[info.name] = mx.array(gguf.read(info.name)).view(mx.bfloat16)
        else:
            loaded[info.name] = mx.array(gguf.read(info.name))
    return loaded


def q8_0_to_mlx(raw: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q8_0 bytes -> MLX's 8-bit affine arrays (groups of 32) with the file's values exactly:
    q + 128 unsigned, scale d, bias -128 d (each value d * q, as gguf computes it)."""
    rows, cols = int(math.prod(shape[:-1])), shape[-1]
    blocks = np.asarray(raw, dtype=np.uint8).reshape(rows, cols // 32, 34)
    d = blocks[..., 0:2].copy().view(np.float16).astype(np.float32).reshape(rows, cols // 32)
    q = (blocks[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8).reshape(rows, cols)
    return q.view("<u4").reshape(*shape[:-1], cols // 4), d.reshape(*shape[:-1], -1), (-128 * d).reshape(*shape[:-1], -1)


def q4_k_to_mlx(raw: np.ndarray, shape: tuple[int, ...],
                chunk_rows: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K bytes -> MLX's 4-bit affine arrays (packed uint32 weight, float32 scales and
    biases, groups of 32) holding the same values as gguf.quants.dequantize, exactly.

    A 144-byte block holds 256 values: fp16 d and dmin, twelve bytes packing eight 6-bit
    sub-block scales and eight 6-bit mins, then 128 bytes of 4-bit values where each 32
    bytes carry two sub-blocks (low nibbles, then high nibbles). Rows go in chunks so the
    temporaries stay small whatever the tensor's size."""
    rows, cols = (int(math.prod(shape[:-1])), shape[-1]) if len(shape) > 1 else (1, shape[0])
    if cols % 256:
        raise ModelFileError(f"a Q4_K tensor needs rows of a multiple of 256 values, not {cols}")
    blocks_all = raw.reshape(rows, cols // 256, 144)
    # MLX packs 8 values per little-endian uint32, value k in bits 4k..4k+3: as bytes, each
    # holds two neighbours, the first in the low nibble.
    packed = np.empty((rows, cols // 2), dtype=np.uint8)
    scales = np.empty((rows, cols // 32), dtype=np.float32)
    biases = np.empty((rows, cols // 32), dtype=np.float32)
    for start in range(0, rows, chunk_rows):
        b = blocks_all[start:start + chunk_rows]
        n = len(b)
        d = b[..., 0:2].copy().view(np.float16).astype(np.float32)
        dmin = b[..., 2:4].copy().view(np.float16).astype(np.float32)
        lo, mid, hi = b[..., 4:8], b[..., 8:12], b[..., 12:16]
        sc = np.concatenate([lo & 63, (hi & 0xF) | ((lo >> 6) << 4)], axis=-1)
        mins = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=-1)
        scales[start:start + n] = (d * sc.astype(np.float32)).reshape(n, -1)
        biases[start:start + n] = -(dmin * mins.astype(np.float32)).reshape(n, -1)
        pairs = b[..., 16:].reshape(n, -1, 4, 16, 2)  # 4 x 32 bytes, as neighbour pairs
        first, second = pairs[..., 0], pairs[..., 1]
        low_block = (first & 0xF) | ((second & 0xF) << 4)
        high_block = (first >> 4) | (second & 0xF0)
        packed[start:start + n] = np.stack([low_block, high_block], axis=3).reshape(n, -1)
    return packed.view("<u4").reshape(*shape[:-1], cols // 8), scales, biases


def check_mlx_runs(ggml_type: int, tensor_name: str, where: str) -> None:
    """UnsupportedQuantization naming the tensor and type unless MLX can run that type."""
    if ggml_type in RUNS:
        return
    try:
        name = T(ggml_type).name
    except ValueError:
        name = f"GGML type {ggml_type}"
    raise UnsupportedQuantization(
        f"{where}: MLX cannot run {name} tensors ({tensor_name}); use the torch backend"
    )


def unpermute_rows(array: mx.array, n_heads: int) -> mx.array:
    """Undo llama.cpp's Q/K row order (each head's two rotary halves interleaved row by
    row) for mlx-lm's rotate-half order. Rows move whole, so quantized rows (weight, scales,
    biases alike: MLX quantizes along a row) keep their exact values."""
    rows = array.shape[0]
    if rows % (2 * n_heads):
        raise ModelFileError(f"cannot split {rows} rows into {n_heads} rotary heads")
    rest = array.shape[1:]
    return array.reshape(n_heads, rows // n_heads // 2, 2, *rest).swapaxes(1, 2).reshape(array.shape)


def _add_missing_biases(model: nn.Module, weights: dict[str, mx.array]) -> None:
    """A model built with attention biases (qwen2's q/k/v) whose file leaves some out: zeros."""
    from mlx.utils import tree_flatten

    flat: list[tuple[str, mx.array]] = tree_flatten(model.parameters())  # type: ignore[assignment]  # a list unless asked for a dict
    for name, param in flat:
        if name.endswith(".bias") and name not in weights:
            weights[name] = mx.zeros(param.shape, dtype=mx.float32)


def _auto_dtype(plan) -> str:
    """The dtype the file's biggest tensors compute in: float32 or bfloat16 for files of
    those, float16 otherwise (the F16 weights, and the quantized types' float16 scales)."""
    by_type: Counter = Counter()
    for item in plan:
        by_type[item.source.ggml_type] += item.source.n_bytes
    main = by_type.most_common(1)[0][0] if by_type else T.F16
    return {T.F32: "float32", T.BF16: "bfloat16"}.get(main, "float16")


def _log_widened(plan, path: Path) -> None:
    widened = Counter(T(item.source.ggml_type).name for item in plan
                      if item.source.ggml_type in WIDENED_BY_MLX)
    for name, count in sorted(widened.items()):
        log.info("%s: %d %s tensors widened to float16 (MLX runs no %s blocks)", path, count, name, name)
