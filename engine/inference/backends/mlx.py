"""MLX backend (Apple Silicon GPUs; also mlx[cpu] on Linux for tests), built on mlx-lm."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...errors import BackendUnavailable, ModelFileError, UnsupportedArchitecture
from ..backend import ModelBase, check_batch, check_slot
from . import read_model_config
from .mlx_config import longrope_original, mlx_overrides

GGUF_FILE = "model.gguf"  # an imported GGUF, kept as it is (docs/weights.md)

try:  # importable without mlx so `available()` can say no
    import mlx.core as mx
except ImportError as exc:
    mx = None  # type: ignore[assignment]  # checked through _IMPORT_ERROR before any use
    _IMPORT_ERROR: str | None = str(exc)
else:
    _IMPORT_ERROR = None

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
DEFAULT_MAX_CONTEXT = 8192
DEFAULT_SLOTS = 2  # the visible answer plus one side task (a title, a summary)
# On mlx's CPU device (Linux, or a Mac without Metal) a quantized matmul runs in software for
# half precision: measured on mlx 0.32, a 37x576 by 576x1536 4-bit product takes 29 ms with
# float32 activations and scales, 228 ms in bfloat16 and 995 ms in float16 (dense float16:
# 15 ms). The starter (float16 scales) took 191 s to its first token for a 37-token prompt.
CPU_NOTICE = ("MLX has no GPU here and runs on its CPU device: Wren computes in float32 there "
              "(its half-precision quantized kernels are software-emulated); the torch backend "
              "is faster on this machine")


class MLXModel(ModelBase):
    """An mlx-lm model plus one prompt cache per KV slot; used from one inference thread.

    With several slots (models whose every layer keeps a plain KVCache) it decodes
    sequences together: `decode_batch` merges the slots' caches into mlx-lm's
    BatchKVCache (sequences right-aligned, left padding masked) and keeps that batch
    while the same slots keep stepping together, so a step costs one forward pass over
    B rows. Touching one of the batch's slots alone, or changing who steps together,
    first splits the batch back into per-slot caches."""

    def __init__(self, model, context_length: int, vocab_size: int, slots: int = 1) -> None:
        from mlx_lm.models.cache import KVCache, make_prompt_cache

        self._model = model
        # a slot's cache is None while a merged batch cache holds it (`_unbatch` gives it back)
        self._caches: list = [make_prompt_cache(model) for _ in range(max(1, slots))]
        if slots > 1 and not (_batch_cache_available() and all(type(c) is KVCache for c in self._caches[0])):
            self._caches = self._caches[:1]  # sliding windows etc.: no batched cache for them
        self.slots = len(self._caches)
        self.batched_decode = self.slots > 1
        self.kv_export = True
        # (slots stepping together, their next positions, one BatchKVCache per layer)
        self._batch: tuple[tuple[int, ...], list[int], list] | None = None
        self.backend = "mlx"
        self.context_length = context_length
        self.vocab_size = vocab_size

    def prefill(self, ids: Sequence[int], start: int, slot: int = 0) -> np.ndarray:
        ids = list(ids)
        if self._model is None:
            raise RuntimeError("the model is closed")
        if not ids:
            raise ValueError("prefill needs at least one token")
        check_slot(slot, self.slots)
        if start < 0 or start + len(ids) > self.context_length:
            raise ValueError(
                f"positions {start}..{start + len(ids) - 1} do not fit the "
                f"{self.context_length}-token context"
            )
        self._release(slot)
        self._rewind(start, slot)
        logits = self._model(mx.array([ids]), cache=self._caches[slot])[0, -1]
        # Converting forces MLX's lazy graph to run; float32 first as numpy has no bfloat16.
        return np.asarray(logits.astype(mx.float32))

    def _rewind(self, start: int, slot: int = 0) -> None:
        if start == 0:  # a fresh cache: cheaper than trimming, and works for every cache kind
            from mlx_lm.models.cache import make_prompt_cache

            self._caches[slot] = make_prompt_cache(self._model)
            return
        # Layer by layer rather than mlx-lm's trim_prompt_cache (which trims every layer by
        # the first one's amount): after a failed call the layers' offsets may disagree.
        for layer_cache in self._caches[slot]:
            if layer_cache.offset < start:
                raise ValueError(f"start {start} is past the {layer_cache.offset} cached positions")
            if layer_cache.offset > start:
                if not layer_cache.is_trimmable():
                    raise ValueError("this model's cache cannot be rewound; prefill from position 0")
                layer_cache.trim(layer_cache.offset - start)

    def decode(self, token: int, pos: int, slot: int = 0) -> np.ndarray:
        return self.prefill([int(token)], pos, slot)

    def decode_batch(self, tokens: Sequence[int], positions: Sequence[int],
                     slots: Sequence[int]) -> np.ndarray:
        """Logits [B, vocab]: row b appends tokens[b] at positions[b] to slot slots[b]."""
        from mlx_lm.models.cache import BatchKVCache

        if self._model is None:
            raise RuntimeError("the model is closed")
        slots, positions = tuple(int(s) for s in slots), [int(p) for p in positions]
        check_batch(tokens, positions, slots, self.slots, self.context_length)
        if self._batch is None or self._batch[:2] != (slots, positions):
            self._unbatch()
            for slot, pos in zip(slots, positions):
                self._rewind(pos, slot)
            layers = zip(*(self._caches[slot] for slot in slots))
            self._batch = (slots, positions, [BatchKVCache.merge(list(per_slot)) for per_slot in layers])
            for slot in slots:  # merged copies hold them now; `_unbatch` gives them back
                self._caches[slot] = None
        batch = self._batch[2]
        try:
            logits = self._model(mx.array([[int(t)] for t in tokens]), cache=batch)[:, -1]
            out = np.asarray(logits.astype(mx.float32))
        except Exception:
            # Some layers may have taken the step: the slots start over from empty caches
            # (the caller resets their sessions after a failed step).
            from mlx_lm.models.cache import make_prompt_cache

            self._batch = None
            for slot in slots:
                self._caches[slot] = make_prompt_cache(self._model)
            raise
        self._batch = (slots, [p + 1 for p in positions], batch)
        return out

    def _release(self, slot: int) -> None:
        """Give `slot` its own cache back before it is used alone."""
        if self._batch is not None and slot in self._batch[0]:
            self._unbatch()

    def _unbatch(self) -> None:
        if self._batch is None:
            return
        slots, _, batch = self._batch
        self._batch = None
        for row, slot in enumerate(slots):
            self._caches[slot] = [layer.extract(row) for layer in batch]

    def export_kv(self, n: int, slot: int = 0) -> tuple[list, int]:
        """Copies of the first `n` cached positions of every layer in `slot`, and their size."""
        check_slot(slot, self.slots)
        self._release(slot)
        state: list = []
        nbytes = 0
        for layer_cache in self._caches[slot]:
            if not _plain_layout(layer_cache):  # a sliding window's ring (gemma3): all its state
                saved = tuple(mx.array(x) if isinstance(x, mx.array) else x for x in layer_cache.state)
                mx.eval([x for x in saved if isinstance(x, mx.array)])
                state.append({"state": saved})
                nbytes += sum(x.nbytes for x in saved if isinstance(x, mx.array))
                continue
            keys, values = layer_cache.keys, layer_cache.values
            keys, values = mx.array(keys[..., :n, :]), mx.array(values[..., :n, :])
            mx.eval(keys, values)  # materialise now: the live arrays change in place later
            state.append((keys, values))
            nbytes += keys.nbytes + values.nbytes
        return state, nbytes

    def import_kv(self, state: list, n: int, slot: int = 0) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        check_slot(slot, self.slots)
        self._release(slot)
        self._caches[slot] = make_prompt_cache(self._model)
        for layer_cache, saved in zip(self._caches[slot], state):
            if isinstance(saved, dict):  # a ring is written in place: it gets copies
                layer_cache.state = tuple(mx.array(x) if isinstance(x, mx.array) else x for x in saved["state"])
                continue
            keys, values = saved
            # The cache grows by allocating past what it holds, so the saved arrays are
            # never written to and stay valid for a later restore.
            layer_cache.keys, layer_cache.values = keys[..., :n, :], values[..., :n, :]
            layer_cache.offset = n

    def kv_resumable(self, start: int, slot: int = 0) -> bool:
        """Whether `slot` may go on from `start`: a sliding window's ring (mlx-lm's
        RotatingKVCache) cannot be rewound once it has wrapped."""
        self._release(slot)
        caches = self._caches[slot] or []
        return start == 0 or all(c.offset == start or c.is_trimmable() for c in caches)

    def close(self) -> None:
        self._model = None
        self._caches = []
        self._batch = None
        if mx is not None:
            mx.clear_cache()


def mlx_device() -> str:
    """"gpu" when MLX has a GPU (Metal; CUDA in mlx[cuda]), "cpu" when it runs on its CPU
    device only."""
    return "gpu" if mx is not None and mx.default_device().type == mx.DeviceType.gpu else "cpu"


class MLXBackend:
    name = "mlx"

    @property
    def device(self) -> str:
        return mlx_device()

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
        self, model_dir: Path, *, dtype: str = "auto", context_length: int | None = None,
        slots: int | None = DEFAULT_SLOTS,
    ) -> MLXModel:
        """Load a model folder with mlx-lm: model.gguf (see mlx_gguf) or HF safetensors.
        dtype "auto" keeps the stored dtype (a GGUF's: float32 or bfloat16 for files of
        those, else float16, the quantized types' scales) on a GPU, and means float32 on
        mlx's CPU device (see CPU_NOTICE), where a half-precision dtype asked for by name
        widens the quantized layers to it (a dense half product is fast there; a
        quantized one is not);
        context_length defaults to min(max_position_embeddings, 8192); slots is how many
        sequences may decode together (1 turns batching off; models whose layers keep
        other cache kinds than mlx-lm's KVCache, such as sliding windows, get 1)."""
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"mlx: {reason}")
        if slots is None:
            slots = DEFAULT_SLOTS
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
        model_dir = Path(model_dir)
        config = read_model_config(model_dir)
        model_type = config.get("model_type")
        context_length = _context_length(config, context_length)
        overrides = mlx_overrides(config, context_length)
        is_gguf = (model_dir / GGUF_FILE).is_file()
        try:
            if is_gguf:
                from .mlx_gguf import load_gguf_model

                model, config, auto_dtype = load_gguf_model(model_dir / GGUF_FILE, config, overrides)
            else:
                from mlx_lm.utils import load_model

                _check_weight_files(model_dir)
                model, config = load_model(model_dir, model_config=overrides)
                auto_dtype = None  # the stored dtypes, as they are
        except ValueError as exc:
            if "not supported" in str(exc):
                raise UnsupportedArchitecture(f"mlx-lm cannot run model_type {model_type!r}: {exc}") from None
            raise ModelFileError(f"{model_dir}: weights do not match config.json: {exc}") from None
        except (TypeError, KeyError) as exc:  # mlx-lm's ModelArgs wants a field config.json lacks
            raise ModelFileError(
                f"{model_dir / 'config.json'} does not describe a {model_type!r} model: {exc}"
            ) from None
        except (RuntimeError, OSError) as exc:  # mx.load reports damaged files this way
            kind = GGUF_FILE if is_gguf else "safetensors weights"
            raise ModelFileError(f"{model_dir}: cannot read the {kind}: {exc}") from None
        on_cpu = mlx_device() == "cpu"
        chosen = ("float32" if on_cpu else auto_dtype) if dtype == "auto" else dtype
        if on_cpu and chosen != "float32":
            from mlx_lm.utils import dequantize_model

            model = dequantize_model(model)
        if chosen is not None:
            model.set_dtype(getattr(mx, chosen))
        return MLXModel(_soft_capped(model, config), context_length, int(config["vocab_size"]), slots)


def _context_length(config: dict, asked: int | None) -> int:
    """The KV cache's length: `asked`, or min(max_position_embeddings, 8192) and for
    LongRoPE at most the pretraining length (engine/inference/models/args.py says why)."""
    limit = int(config.get("max_position_embeddings") or DEFAULT_MAX_CONTEXT)
    if asked is None:
        return min(limit, DEFAULT_MAX_CONTEXT, longrope_original(config) or limit)
    if not (1 <= asked <= limit):
        raise ValueError(f"context_length must be 1..{limit}, got {asked}")
    return asked


def _plain_layout(layer_cache) -> bool:
    """A cache whose first `offset` positions are keys[..., :offset, :] (mlx-lm's KVCache)."""
    return type(layer_cache).__name__ == "KVCache"


def _soft_capped(model, config: dict):
    """mlx-lm's gemma3_text leaves out final_logit_softcapping (null in Gemma 3's own
    configs): a model of such a family (Family.mlx_softcap) whose config sets it caps its
    logits here."""
    from .. import families

    cap = config.get("final_logit_softcapping")
    family = families.find_model_type(config.get("model_type"))
    if not cap or family is None or not family.mlx_softcap:
        return model
    base = type(model)

    def capped(self, *args, **kwargs):
        return mx.tanh(base.__call__(self, *args, **kwargs) / cap) * cap

    model.__class__ = type(f"SoftCapped{base.__name__}", (base,), {"__call__": capped})
    return model



def _batch_cache_available() -> bool:
    """mlx-lm's batched KV cache with merge/extract (0.28 and later)."""
    try:
        from mlx_lm.models.cache import BatchKVCache
    except ImportError:
        return False
    return hasattr(BatchKVCache, "merge") and hasattr(BatchKVCache, "extract")


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
