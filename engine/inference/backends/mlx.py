"""MLX backend (Apple Silicon GPUs; also mlx[cpu] on Linux for tests), built on mlx-lm."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import BackendUnavailable, ModelFileError, UnsupportedArchitecture
from engine.inference.backends import read_model_config

try:  # importable without mlx so `available()` can say no
    import mlx.core as mx
except ImportError as exc:
    mx = None
    _IMPORT_ERROR: str | None = str(exc)
else:
    _IMPORT_ERROR = None

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
DEFAULT_MAX_CONTEXT = 8192


class MLXModel:
    """An mlx-lm model plus its prompt cache; used from one inference thread."""

    def __init__(self, model, context_length: int, vocab_size: int) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        self._model = model
        self._cache = make_prompt_cache(model)
        self.backend = "mlx"
        self.context_length = context_length
        self.vocab_size = vocab_size

    def prefill(self, ids: Sequence[int], start: int) -> np.ndarray:
        ids = list(ids)
        if self._model is None:
            raise RuntimeError("the model is closed")
        if not ids:
            raise ValueError("prefill needs at least one token")
        if start < 0 or start + len(ids) > self.context_length:
            raise ValueError(
                f"positions {start}..{start + len(ids) - 1} do not fit the "
                f"{self.context_length}-token context"
            )
        self._rewind(start)
        logits = self._model(mx.array([ids]), cache=self._cache)[0, -1]
        # Converting forces MLX's lazy graph to run; float32 first as numpy has no bfloat16.
        return np.asarray(logits.astype(mx.float32))

    def _rewind(self, start: int) -> None:
        if start == 0:  # a fresh cache: cheaper than trimming, and works for every cache kind
            from mlx_lm.models.cache import make_prompt_cache

            self._cache = make_prompt_cache(self._model)
            return
        # Layer by layer rather than mlx-lm's trim_prompt_cache (which trims every layer by
        # the first one's amount): after a failed call the layers' offsets may disagree.
        for layer_cache in self._cache:
            if layer_cache.offset < start:
                raise ValueError(f"start {start} is past the {layer_cache.offset} cached positions")
            if layer_cache.offset > start:
                if not layer_cache.is_trimmable():
                    raise ValueError("this model's cache cannot be rewound; prefill from position 0")
                layer_cache.trim(layer_cache.offset - start)

    def decode(self, token: int, pos: int) -> np.ndarray:
        return self.prefill([int(token)], pos)

    def export_kv(self, n: int) -> tuple[list, int]:
        """Copies of the first `n` cached positions of every layer, and their size."""
        state, nbytes = [], 0
        for layer_cache in self._cache:
            keys, values = layer_cache.keys, layer_cache.values
            keys, values = mx.array(keys[..., :n, :]), mx.array(values[..., :n, :])
            mx.eval(keys, values)  # materialise now: the live arrays change in place later
            state.append((keys, values))
            nbytes += keys.nbytes + values.nbytes
        return state, nbytes

    def import_kv(self, state: list, n: int) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        self._cache = make_prompt_cache(self._model)
        for layer_cache, (keys, values) in zip(self._cache, state):
            # The cache grows by allocating past what it holds, so the saved arrays are
            # never written to and stay valid for a later restore.
            layer_cache.keys, layer_cache.values = keys[..., :n, :], values[..., :n, :]
            layer_cache.offset = n

    def close(self) -> None:
        self._model = None
        self._cache = None
        if mx is not None:
            mx.clear_cache()


class MLXBackend:
    name = "mlx"

    def unavailable_reason(self) -> str | None:
        if mx is None:
            return f"MLX is not installed ({_IMPORT_ERROR})"
        try:
            import mlx_lm  # noqa: F401
        except ImportError as exc:
            return f"mlx-lm is not installed ({exc})"
        return None

    def available(self) -> bool:
        return self.unavailable_reason() is None

    def load(
        self, model_dir: Path, *, dtype: str = "auto", context_length: int | None = None
    ) -> MLXModel:
        """Load an HF folder with mlx-lm. dtype "auto" keeps the stored dtype;
        context_length defaults to min(max_position_embeddings, 8192)."""
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"mlx: {reason}")
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
        from mlx_lm.utils import load_model

        model_dir = Path(model_dir)
        config = read_model_config(model_dir)
        _check_weight_files(model_dir)
        model_type = config.get("model_type")
        try:
            model, config = load_model(model_dir)
        except ValueError as exc:
            if "not supported" in str(exc):
                raise UnsupportedArchitecture(f"mlx-lm cannot run model_type {model_type!r}: {exc}") from None
            raise ModelFileError(f"{model_dir}: weights do not match config.json: {exc}") from None
        except (TypeError, KeyError) as exc:  # mlx-lm's ModelArgs wants a field config.json lacks
            raise ModelFileError(
                f"{model_dir / 'config.json'} does not describe a {model_type!r} model: {exc}"
            ) from None
        except (RuntimeError, OSError) as exc:  # mx.load reports damaged files this way
            raise ModelFileError(f"{model_dir}: cannot read the safetensors weights: {exc}") from None
        if dtype != "auto":
            model.set_dtype(getattr(mx, dtype))
        limit = int(config.get("max_position_embeddings") or DEFAULT_MAX_CONTEXT)
        if context_length is None:
            context_length = min(limit, DEFAULT_MAX_CONTEXT)
        elif not (1 <= context_length <= limit):
            raise ValueError(f"context_length must be 1..{limit}, got {context_length}")
        return MLXModel(model, context_length, int(config["vocab_size"]))



def _check_weight_files(model_dir: Path) -> None:
    """Fail with the file's name before mlx-lm reads a missing or cut-short weight file."""
    from safetensors import SafetensorError, safe_open

    # The same files mlx-lm's load_model reads.
    files = sorted(model_dir.glob("model*.safetensors"))
    if not files:
        raise ModelFileError(f"{model_dir} holds no model*.safetensors weights")
    for path in files:
        try:
            with safe_open(str(path), framework="numpy"):
                pass  # opening validates the header against the file size
        except (SafetensorError, OSError) as exc:
            raise ModelFileError(
                f"{path} is not a readable safetensors file "
                f"({path.stat().st_size} bytes; truncated?): {exc}"
            ) from None
