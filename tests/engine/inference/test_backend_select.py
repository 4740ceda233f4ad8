"""resolve_backend: the name-to-backend rules and the reasons it gives when it cannot."""

from __future__ import annotations

import logging

import pytest

from wren.engine.errors import BackendUnavailable
from wren.engine.inference import select
from wren.engine.inference.select import BACKEND_NAMES, resolve_backend

pytest.importorskip("torch")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_names_and_unknown_name():
    assert BACKEND_NAMES == ("auto", "torch", "torch-cpu", "torch-cuda", "mlx")
    with pytest.raises(BackendUnavailable, match="unknown backend 'tpu'.*torch-cpu"):
        resolve_backend("tpu")


def test_torch_names():
    assert resolve_backend("torch-cpu").name == "torch-cpu"
    assert resolve_backend("torch").name == ("torch-cuda" if _cuda() else "torch-cpu")
    if _cuda():
        assert resolve_backend("torch-cuda").name == "torch-cuda"
    else:
        with pytest.raises(BackendUnavailable, match="torch-cuda.*CUDA"):
            resolve_backend("torch-cuda")


def test_auto_prefers_mlx_on_apple_silicon_and_falls_back_to_torch(monkeypatch):
    from wren.engine.inference.backends import mlx as mlx_backend

    monkeypatch.setattr(select, "_apple_silicon", lambda: True)
    monkeypatch.setattr(mlx_backend, "mlx_device", lambda: "gpu")  # Metal, as on a Mac
    if mlx_backend.MLXBackend().available():
        assert resolve_backend("auto").name == "mlx"
    monkeypatch.setattr(mlx_backend.MLXBackend, "unavailable_reason", lambda self: "no mlx here")
    assert resolve_backend("auto").name.startswith("torch")
    with pytest.raises(BackendUnavailable, match="no mlx here"):
        resolve_backend("mlx")


def test_auto_off_apple_silicon_is_torch(monkeypatch):
    monkeypatch.setattr(select, "_apple_silicon", lambda: False)
    assert resolve_backend("auto").name == ("torch-cuda" if _cuda() else "torch-cpu")


def test_mlx_without_a_gpu_auto_takes_torch_with_a_notice(monkeypatch, caplog):
    """MLX on its CPU device (mlx[cpu] on Linux, a Mac without Metal) is many times slower
    than torch there: "auto" says so and takes torch, even on Apple Silicon."""
    mlx_backend = pytest.importorskip("wren.engine.inference.backends.mlx")
    if not mlx_backend.MLXBackend().available():
        pytest.skip("MLX is not installed")
    monkeypatch.setattr(mlx_backend, "mlx_device", lambda: "cpu")
    for apple in (False, True):
        monkeypatch.setattr(select, "_apple_silicon", lambda apple=apple: apple)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="wren.engine.inference.select"):
            assert resolve_backend("auto").name.startswith("torch")
        assert "backend auto: torch, not MLX: MLX has no GPU here and runs on its CPU device" in caplog.text
    # by name it still runs (tests, comparisons), with the same notice
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wren.engine.inference.select"):
        assert resolve_backend("mlx").name == "mlx"
    assert "backend mlx: MLX has no GPU here" in caplog.text
    # with its GPU: no notice
    monkeypatch.setattr(mlx_backend, "mlx_device", lambda: "gpu")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wren.engine.inference.select"):
        assert resolve_backend("mlx").name == "mlx"
    assert caplog.text == ""


def test_mlx_without_a_gpu_is_still_auto_where_torch_is_missing(monkeypatch, caplog):
    """The Mac app ships without torch: on a Mac without Metal MLX's CPU device is all there is."""
    mlx_backend = pytest.importorskip("wren.engine.inference.backends.mlx")
    if not mlx_backend.MLXBackend().available():
        pytest.skip("MLX is not installed")
    from wren.engine.inference.backends.torch import TorchBackend

    monkeypatch.setattr(mlx_backend, "mlx_device", lambda: "cpu")
    monkeypatch.setattr(select, "_apple_silicon", lambda: True)
    monkeypatch.setattr(TorchBackend, "unavailable_reason", lambda self: "PyTorch is not installed")
    with caplog.at_level(logging.WARNING, logger="wren.engine.inference.select"):
        assert resolve_backend("auto").name == "mlx"
    assert "MLX on its CPU device, torch is not installed" in caplog.text


def test_auto_off_apple_silicon_without_mlx_says_nothing(monkeypatch, caplog):
    monkeypatch.setattr(select, "_apple_silicon", lambda: False)
    monkeypatch.setattr(select, "_mlx_installed", lambda: False)
    with caplog.at_level(logging.INFO, logger="wren.engine.inference.select"):
        assert resolve_backend("auto").name.startswith("torch")
    assert caplog.text == ""
