"""Turn a backend name from settings or the command line into a ready Backend."""

from __future__ import annotations

import importlib.util
import logging
import platform

from ..errors import BackendUnavailable
from .backend import Backend

log = logging.getLogger(__name__)

BACKEND_NAMES = ("auto", "torch", "torch-cpu", "torch-cuda", "mlx")


def resolve_backend(name: str = "auto") -> Backend:
    """auto: MLX on Apple Silicon when MLX has its GPU there, else torch on a CUDA GPU, else
    torch on the CPU. "torch" picks CUDA when there is a GPU. Backend modules are imported
    only here, so asking for one never imports the other's framework.

    MLX without a GPU runs on its CPU device (mlx[cpu] on Linux, a Mac without Metal),
    many times slower than torch there: "auto" then takes torch and logs a notice saying
    why (MLX still, where torch is not installed); "mlx" by name still runs MLX (tests,
    comparisons), with a notice too."""
    if name not in BACKEND_NAMES:
        raise BackendUnavailable(
            f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}"
        )
    if name == "mlx" or (name == "auto" and (_apple_silicon() or _mlx_installed())):
        from .backends.mlx import CPU_NOTICE, MLXBackend

        mlx = MLXBackend()
        reason = mlx.unavailable_reason()
        if reason is None and name == "mlx":
            if mlx.device == "cpu":
                log.warning("backend mlx: %s", CPU_NOTICE)
            return mlx
        if reason is None and mlx.device == "gpu" and _apple_silicon():
            return mlx
        if name == "mlx":
            raise BackendUnavailable(f"the MLX backend cannot run here: {reason}")
        if reason is None and mlx.device == "cpu":
            from .backends.torch import TorchBackend

            if not TorchBackend("cpu").available():  # the Mac app has no torch: slow beats none
                log.warning("backend auto: MLX on its CPU device, torch is not installed: %s", CPU_NOTICE)
                return mlx
            # info, not a warning: on Linux this is every start (auto never took MLX there)
            log.info("backend auto: torch, not MLX: %s", CPU_NOTICE)

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


def _mlx_installed() -> bool:
    """MLX is importable (found without importing it)."""
    return importlib.util.find_spec("mlx") is not None
