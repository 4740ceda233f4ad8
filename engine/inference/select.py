"""Turn a backend name from settings or the command line into a ready Backend."""

from __future__ import annotations

import platform

from ..errors import BackendUnavailable
from .backend import Backend

BACKEND_NAMES = ("auto", "torch", "torch-cpu", "torch-cuda", "mlx")


def resolve_backend(name: str = "auto") -> Backend:
    """auto: MLX on Apple Silicon, else torch on a CUDA GPU, else torch on the CPU.
    "torch" picks CUDA when there is a GPU. Backend modules are imported only here, so
    asking for one never imports the other's framework."""
    if name not in BACKEND_NAMES:
        raise BackendUnavailable(
            f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}"
        )
    if name == "mlx" or (name == "auto" and _apple_silicon()):
        from .backends.mlx import MLXBackend

        mlx = MLXBackend()
        reason = mlx.unavailable_reason()
        if reason is None:
            return mlx
        if name == "mlx":
            raise BackendUnavailable(f"the MLX backend cannot run here: {reason}")

    from .backends.torch import TorchBackend

    if name in ("auto", "torch"):
        cuda = TorchBackend("cuda")
        if cuda.available():
            return cuda
        name = "torch-cpu"
    backend = TorchBackend("cuda" if name == "torch-cuda" else "cpu")
    reason = backend.unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(f"the {backend.name} backend cannot run here: {reason}")
    return backend


def _apple_silicon() -> bool:
    return platform.system() == "Darwin" and platform.machine() == "arm64"
