"""MXFP4 (GGML type 39) blocks in MLX's own mxfp4 layout, for the MLX backend (gpt-oss's experts).

Both are OCP MX: 32 e2m1 codes sharing one e8m0 scale byte, the same byte and the same code
table (GGUF doubles the codes and halves the scale, which is the same value). Only the order
of the nibbles differs: a GGUF block keeps value j in byte j's low nibble and value 16 + j in
its high one; MLX packs 8 values per little-endian uint32, value k in bits 4k..4k+3, so a
byte holds two neighbours, the first in its low nibble. The values are exactly the file's:
MLX's quantized matmul (mode "mxfp4", groups of 32, 4 bits) runs them as they are.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ModelFileError

BLOCK_BYTES = 17
MLX_QUANTIZATION = {"group_size": 32, "bits": 4, "mode": "mxfp4"}


def mxfp4_to_mlx(raw: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """GGUF MXFP4 bytes of a tensor of `shape` (HF order, the last dimension the values of a
    row; 3-D for experts) -> (weight uint32 [..., cols / 8], scales uint8 [..., cols / 32])."""
    cols = shape[-1]
    rows = int(math.prod(shape[:-1]))
    if cols % 32 or raw.size != rows * cols // 32 * BLOCK_BYTES:
        raise ModelFileError(f"an MXFP4 tensor of shape {list(shape)} needs {rows * cols // 32 * BLOCK_BYTES} "
                             f"bytes in blocks of 32 values; it has {raw.size}")
    blocks = np.asarray(raw, dtype=np.uint8).reshape(rows, cols // 32, BLOCK_BYTES)
    scales = np.ascontiguousarray(blocks[..., 0])
    qs = blocks[..., 1:]
    codes = np.concatenate((qs & 0x0F, qs >> 4), axis=-1)  # the block's 32 codes in value order
    packed = np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << 4)).reshape(rows, cols // 2)
    return packed.view("<u4").reshape(*shape[:-1], cols // 8), scales.reshape(*shape[:-1], cols // 32)
