"""PyTorch backend (CPU and CUDA) running Wren's own llama-family model."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import BackendUnavailable, ModelFileError
from engine.inference.backends import read_model_config

try:  # the backend module is importable without torch, so `available()` can say no
    import torch
except ImportError as exc:  # pragma: no cover - torch is installed wherever tests run
    torch = None
    _IMPORT_ERROR: str | None = str(exc)
else:
    _IMPORT_ERROR = None

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")


class TorchModel:
    """A loaded model plus its static KV cache; used from one inference thread."""

    def __init__(self, model, backend: str, context_length: int, vocab_size: int) -> None:
        self._model = model
        self.backend = backend
        self.context_length = context_length
        self.vocab_size = vocab_size

    def _check(self, count: int, start: int) -> None:
        if self._model is None:
            raise RuntimeError("the model is closed")
        if count < 1:
            raise ValueError("prefill needs at least one token")
        if start < 0 or start + count > self.context_length:
            raise ValueError(
                f"positions {start}..{start + count - 1} do not fit the "
                f"{self.context_length}-token context"
            )

    def prefill(self, ids: Sequence[int], start: int) -> np.ndarray:
        ids = list(ids)
        self._check(len(ids), start)
        with torch.inference_mode():
            return _to_numpy(self._model.prefill(ids, start))

    def decode(self, token: int, pos: int) -> np.ndarray:
        self._check(1, pos)
        with torch.inference_mode():
            return _to_numpy(self._model.decode_one(int(token), pos))

    def close(self) -> None:
        model, self._model = self._model, None
        del model
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()


def _to_numpy(logits) -> np.ndarray:
    return logits.to(device="cpu", dtype=torch.float32).numpy()


class TorchBackend:
    def __init__(self, device: str = "cpu") -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        self.device = device
        self.name = f"torch-{device}"

    def unavailable_reason(self) -> str | None:
        if torch is None:
            return f"PyTorch is not installed ({_IMPORT_ERROR})"
        if self.device == "cuda" and not torch.cuda.is_available():
            return "PyTorch cannot see a CUDA GPU (no NVIDIA driver, or a CPU-only torch build)"
        return None

    def available(self) -> bool:
        return self.unavailable_reason() is None

    def load(
        self, model_dir: Path, *, dtype: str = "auto", context_length: int | None = None
    ) -> TorchModel:
        """Load an HF folder. context_length defaults to min(max_position_embeddings, 8192)."""
        from engine.inference.models.llama import ModelArgs, build_model

        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"{self.name}: {reason}")
        model_dir = Path(model_dir)
        torch_dtype = self._torch_dtype(dtype)
        args = ModelArgs.from_hf_config(read_model_config(model_dir))
        if context_length is not None and not (1 <= context_length <= args.max_position_embeddings):
            raise ValueError(
                f"context_length must be 1..{args.max_position_embeddings}, got {context_length}"
            )
        weights = _SafetensorsFolder(model_dir, self.device, torch_dtype)
        # A checkpoint without lm_head has nothing else to project with: tie it.
        tied = args.tie_word_embeddings or "lm_head.weight" not in weights.names
        with torch.inference_mode():
            model = build_model(args, weights.get, tied=tied, context_length=context_length)
        return TorchModel(model, self.name, model.context_length, args.vocab_size)

    def _torch_dtype(self, dtype: str):
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
        if dtype == "auto":
            # bf16 matmuls are slow on most CPUs; on GPUs they halve memory at no accuracy cost
            # that matters for chat.
            dtype = "bfloat16" if self.device == "cuda" else "float32"
        return getattr(torch, dtype)



class _SafetensorsFolder:
    """Reads tensors by HF name from every *.safetensors file in a folder, converting each
    to the target dtype and device as it is read, so peak memory stays near one copy."""

    def __init__(self, model_dir: Path, device: str, dtype) -> None:
        from safetensors import SafetensorError, safe_open

        # Some repos ship a second copy in another layout (mistral's consolidated.safetensors).
        files = sorted(model_dir.glob("model*.safetensors")) or sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise ModelFileError(f"{model_dir} holds no .safetensors weights (expected model.safetensors)")
        self._dir, self._device, self._dtype = model_dir, device, dtype
        self._where: dict[str, object] = {}
        for path in files:
            size = path.stat().st_size
            try:
                handle = safe_open(str(path), framework="pt", device="cpu")
            except (SafetensorError, OSError) as exc:
                # safetensors checks that the header covers the whole file, so a cut-short
                # download fails here rather than mid-load.
                raise ModelFileError(
                    f"{path} is not a readable safetensors file ({size} bytes; truncated?): {exc}"
                ) from None
            for name in handle.keys():
                self._where[name] = (path, handle)
        self.names = frozenset(self._where)

    def get(self, name: str):
        if name not in self._where:
            raise ModelFileError(f"{self._dir}: no safetensors file holds tensor {name!r}")
        path, handle = self._where[name]
        try:
            tensor = handle.get_tensor(name)
        except Exception as exc:  # safetensors raises bare errors on damaged data
            raise ModelFileError(f"{path}: tensor {name!r} cannot be read: {exc}") from None
        return tensor.to(device=self._device, dtype=self._dtype)

