"""resolve_backend: the name-to-backend rules and the reasons it gives when it cannot."""

from __future__ import annotations

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
    if mlx_backend.MLXBackend().available():
        assert resolve_backend("auto").name == "mlx"
    monkeypatch.setattr(mlx_backend.MLXBackend, "unavailable_reason", lambda self: "no mlx here")
    assert resolve_backend("auto").name.startswith("torch")
    with pytest.raises(BackendUnavailable, match="no mlx here"):
        resolve_backend("mlx")


def test_auto_off_apple_silicon_is_torch(monkeypatch):
    monkeypatch.setattr(select, "_apple_silicon", lambda: False)
    assert resolve_backend("auto").name == ("torch-cuda" if _cuda() else "torch-cpu")
