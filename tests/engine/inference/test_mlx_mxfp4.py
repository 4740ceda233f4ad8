"""MXFP4 blocks in MLX's mxfp4 layout (engine/inference/backends/mlx_mxfp4.py): MLX's own
dequantization of them gives exactly the file's values (gguf.quants / Wren's ggml.py)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

mx = pytest.importorskip("mlx.core")

from wren.engine.errors import ModelFileError  # noqa: E402
from wren.engine.inference.backends.mlx_mxfp4 import MLX_QUANTIZATION, mxfp4_to_mlx  # noqa: E402


def random_blocks(rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, cols // 32, 17), dtype=np.uint8)
    raw[..., 0] = rng.integers(100, 140, (rows, cols // 32))
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("shape", [(5, 64), (3, 7, 96)])  # a matrix; experts [E, rows, cols]
def test_mlx_dequantizes_to_the_files_values(shape: tuple[int, ...]) -> None:
    rows = int(np.prod(shape[:-1]))
    raw = random_blocks(rows, shape[-1], seed=len(shape))
    want = quants.dequantize(raw, T.MXFP4).reshape(shape)
    weight, scales = mxfp4_to_mlx(raw, shape)
    assert weight.dtype == np.uint32 and weight.shape == (*shape[:-1], shape[-1] // 8)
    assert scales.dtype == np.uint8 and scales.shape == (*shape[:-1], shape[-1] // 32)
    got = mx.dequantize(mx.array(weight), mx.array(scales), **MLX_QUANTIZATION).astype(mx.float32)
    assert np.array_equal(np.array(got), want)


def test_mlx_quantized_matmul_runs_the_blocks() -> None:
    raw = random_blocks(16, 64, seed=3)
    w = quants.dequantize(raw, T.MXFP4).reshape(16, 64)
    weight, scales = mxfp4_to_mlx(raw, (16, 64))
    x = np.random.default_rng(4).standard_normal((2, 64)).astype(np.float32)
    y = mx.quantized_matmul(mx.array(x), mx.array(weight), mx.array(scales), transpose=True, **MLX_QUANTIZATION)
    np.testing.assert_allclose(np.array(y.astype(mx.float32)), x @ w.T, rtol=2e-2, atol=2e-2)


def test_q8_0_beside_mxfp4_keeps_the_files_values() -> None:
    # a file with MXFP4 is read without mx.load, its Q8_0 tensors too (mlx_gguf.q8_0_to_mlx)
    from wren.engine.inference.backends.mlx_gguf import q8_0_to_mlx

    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, (6, 2, 34), dtype=np.uint8)
    raw[..., 0:2] = rng.uniform(1e-3, 2e-2, (6, 2)).astype(np.float16).view(np.uint8).reshape(6, 2, 2)
    raw = raw.reshape(6, -1)
    packed, scales, biases = q8_0_to_mlx(raw, (6, 64))
    got = mx.dequantize(mx.array(packed), mx.array(scales), mx.array(biases), group_size=32, bits=8)
    assert np.array_equal(np.array(got.astype(mx.float32)), quants.dequantize(raw, T.Q8_0).reshape(6, 64))


def test_a_wrong_size_is_refused() -> None:
    with pytest.raises(ModelFileError, match="MXFP4 tensor of shape"):
        mxfp4_to_mlx(np.zeros(33, np.uint8), (1, 64))
