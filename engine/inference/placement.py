"""Which layers of a model go on the GPU, and how much context its KV cache holds there.

A pure plan from byte counts (no torch, no GPU): the weights of each decoder layer, the
embedding table and the output head, the KV bytes one token costs a layer, the GPU memory
free, the context asked for and a reserve for what else the GPU holds while decoding
(activations of a prompt chunk, CUDA graphs' pool, cuBLAS workspace, allocator slack).
Like llama.cpp's `-ngl`, layers [0, n) run on the GPU and [n, L) on the CPU; the torch
backend loads to the plan (engine.inference.models.offload), `wren models info --json`
prints it, and the Models page shows how many layers fit. The byte counts come from a
GGUF file's header alone (`model_bytes_from_gguf`), so planning never reads a weight.

Policy (`plan_layers`): every layer on the GPU when they fit together with the KV cache
for the context asked for (8k by default); otherwise as many layers as fit with their
share of that cache; when not even one does, as many as fit with a minimal context (the
cache then holds only what fits, and the plan says so); when none fits at all, the CPU.
A user's layer count (WREN_GPU_LAYERS, or `gpu_layers` at load) overrides the first steps:
the cache then holds as much context as the memory left allows, and a count that leaves
room for less than the minimal context is refused with the numbers.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelFileError, WrenError

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_CONTEXT = 8192
DEFAULT_SLOTS = 2  # sequences the torch backend's cache holds by default (backends/torch.py)
MIN_CONTEXT = 1024  # below this a chat no longer fits a system prompt and a few turns
# Held back for what decoding needs beside the weights and the cache: a 256-token prompt
# chunk's activations (float32 products of the widest projection), the CUDA graphs' pool,
# cuBLAS's workspace and the caching allocator's slack.
RESERVE_BYTES = 768 * MIB
KV_VALUE_BYTES = 2  # the CUDA cache holds bfloat16 keys and values
ENV_GPU_LAYERS = "WREN_GPU_LAYERS"
ENV_GPU_MEMORY = "WREN_GPU_MEMORY"
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": MIB, "gib": GIB, "tib": 1 << 40}


class PlanError(WrenError):
    """A placement that cannot work (a layer count that leaves no room for the cache)."""


@dataclass(frozen=True)
class ModelBytes:
    """What a plan needs to know of a model: bytes as it will sit in memory."""

    layer_bytes: tuple[int, ...]  # each decoder layer's weights
    embed_bytes: int  # the token embedding table
    head_bytes: int  # the output head and final norm (only the norm with a tied head: it is the table)
    tied: bool
    kv_bytes_per_token_layer: int  # keys and values of one token in one layer, one sequence
    max_context: int  # the model's own limit

    @property
    def layers(self) -> int:
        return len(self.layer_bytes)

    @property
    def total_bytes(self) -> int:
        return sum(self.layer_bytes) + self.embed_bytes + self.head_bytes


@dataclass(frozen=True)
class GpuPlan:
    """Where a model's parts go: layers [0, gpu_layers) on `device`, the rest on the CPU."""

    device: str  # what the figures are for ("NVIDIA GeForce RTX 4070", "a 12.0 GiB GPU")
    free_bytes: int  # GPU memory the plan could use
    layers: int
    gpu_layers: int
    kv_context: int  # tokens of context each sequence's cache holds
    requested_context: int
    slots: int  # sequences the cache holds
    weights_bytes: int  # weights on the GPU
    cpu_weights_bytes: int  # weights left on the CPU
    kv_bytes_per_token: int  # GPU cache bytes per token of context (every GPU layer, every slot)
    kv_bytes: int  # the GPU cache
    reserve_bytes: int
    head_on_gpu: bool
    embed_on_gpu: bool
    reason: str  # the plan in words, for a load notice

    @property
    def on_gpu(self) -> bool:
        return self.gpu_layers > 0

    @property
    def all_on_gpu(self) -> bool:
        return self.gpu_layers == self.layers

    @property
    def split(self) -> bool:
        return 0 < self.gpu_layers < self.layers

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_layers(model: ModelBytes, free_bytes: int, *, context: int | None = None, slots: int = 1,
                reserve_bytes: int = RESERVE_BYTES, gpu_layers: int | None = None,
                device: str = "cuda", min_context: int = MIN_CONTEXT) -> GpuPlan:
    """The plan for `model` on a GPU with `free_bytes` free (see the module's policy).
    `context` defaults to min(DEFAULT_CONTEXT, the model's limit); `gpu_layers` is a
    user's count (clipped to the model's layers; 0 keeps everything on the CPU)."""
    if free_bytes < 0 or slots < 1 or reserve_bytes < 0:
        raise ValueError(f"free_bytes and reserve_bytes must be >= 0 and slots >= 1 (got {free_bytes}, "
                         f"{reserve_bytes}, {slots})")
    wanted = min(context or DEFAULT_CONTEXT, model.max_context)
    if wanted < 1:
        raise ValueError(f"context must be at least 1 token, got {context}")
    floor = min(min_context, wanted)
    budget = _Budget(model, free_bytes, slots, reserve_bytes)
    if gpu_layers is not None:
        if gpu_layers < 0:
            raise PlanError(f"the GPU layer count must be 0 or more, got {gpu_layers}")
        n = min(gpu_layers, model.layers)
        if n == 0:
            return budget.plan(0, wanted, wanted, device, "the CPU only, as asked (0 GPU layers)")
        fits = budget.context_fits(n)
        if fits < floor:
            raise PlanError(
                f"{n} of {model.layers} layers on the GPU leave room for {max(fits, 0)} tokens of context "
                f"({_gib(free_bytes)} free, {_gib(budget.weights(n))} of weights, {_gib(reserve_bytes)} held "
                f"back); {floor} are needed: ask for fewer GPU layers")
        ctx = min(wanted, fits)
        return budget.plan(n, ctx, wanted, device, f"{n} of {model.layers} layers on the GPU, as asked"
                           + _shortened(ctx, wanted))
    n = budget.most_layers(wanted)
    if n == model.layers:
        return budget.plan(n, wanted, wanted, device, f"all {n} layers fit the GPU with {wanted} tokens of context")
    if n > 0:
        return budget.plan(n, wanted, wanted, device,
                           f"{n} of {model.layers} layers fit the GPU with {wanted} tokens of context; "
                           "the rest run on the CPU")
    n = budget.most_layers(floor)
    if n == 0:
        return budget.plan(0, wanted, wanted, device,
                           f"not one layer fits the GPU's {_gib(free_bytes)} with its cache: the CPU runs the model")
    ctx = min(wanted, budget.context_fits(n))
    return budget.plan(n, ctx, wanted, device, f"{n} of {model.layers} layers fit the GPU" + _shortened(ctx, wanted))


class _Budget:
    """GPU bytes of a plan with n layers there."""

    def __init__(self, model: ModelBytes, free: int, slots: int, reserve: int) -> None:
        self.model, self.free, self.slots, self.reserve = model, free, slots, reserve
        self.kv_token = model.kv_bytes_per_token_layer * slots  # one layer, every slot

    def head_on_gpu(self, n: int) -> bool:
        return n > 0

    def embed_on_gpu(self, n: int) -> bool:
        # A tied table is the head; an untied one is only gathered from: on the GPU only when
        # every layer is (one device then, which CUDA graphs need).
        return n > 0 and (self.model.tied or n == self.model.layers)

    def weights(self, n: int) -> int:
        m = self.model
        total = sum(m.layer_bytes[:n])
        if self.head_on_gpu(n):
            total += m.head_bytes
        if self.embed_on_gpu(n):
            total += m.embed_bytes
        return total

    def fits(self, n: int, context: int) -> bool:
        return self.weights(n) + n * self.kv_token * context + self.reserve <= self.free

    def most_layers(self, context: int) -> int:
        return max((n for n in range(1, self.model.layers + 1) if self.fits(n, context)), default=0)

    def context_fits(self, n: int) -> int:
        room = self.free - self.weights(n) - self.reserve
        return min(room // (n * self.kv_token), self.model.max_context) if room > 0 else 0

    def plan(self, n: int, context: int, wanted: int, device: str, reason: str) -> GpuPlan:
        m = self.model
        weights = self.weights(n)
        kv_token = n * self.kv_token
        return GpuPlan(device=device, free_bytes=self.free, layers=m.layers, gpu_layers=n, kv_context=context,
                       requested_context=wanted, slots=self.slots, weights_bytes=weights,
                       cpu_weights_bytes=m.total_bytes - weights,
                       kv_bytes_per_token=kv_token, kv_bytes=kv_token * context, reserve_bytes=self.reserve,
                       head_on_gpu=self.head_on_gpu(n), embed_on_gpu=self.embed_on_gpu(n), reason=reason)


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _shortened(context: int, wanted: int) -> str:
    return "" if context >= wanted else f"; the cache holds {context} tokens of context, not {wanted}"


# --- inputs -------------------------------------------------------------------------------

def parse_bytes(text: str) -> int:
    """A memory size as people write it: "12GiB", "12 GB", "8g", "1500MiB", "12884901888"."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a memory size (write it like 12GiB, 12GB or 8000MiB)")
    return int(float(match.group(1)) * _UNITS[unit])


def gpu_layers_from_env() -> int | None:
    """WREN_GPU_LAYERS as a layer count (None when unset or "auto")."""
    raw = os.environ.get(ENV_GPU_LAYERS, "").strip().lower()
    if raw in ("", "auto"):
        return None
    if not raw.isdigit():
        raise PlanError(f"{ENV_GPU_LAYERS} must be a number of layers (0 or more) or auto, got {raw!r}")
    return int(raw)


def gpu_memory_from_env() -> int | None:
    """WREN_GPU_MEMORY: the GPU memory Wren may use (None when unset)."""
    raw = os.environ.get(ENV_GPU_MEMORY, "").strip()
    if not raw:
        return None
    try:
        return parse_bytes(raw)
    except ValueError as exc:
        raise PlanError(f"{ENV_GPU_MEMORY}: {exc}") from None


def model_bytes_from_gguf(path: Path | str, kv_value_bytes: int = KV_VALUE_BYTES) -> ModelBytes:
    """The byte counts of a GGUF file's model, from its header alone (tensor shapes and types;
    no weight is read). Weights count as stored: the GPU keeps the file's blocks. Read once
    per file version (a header holds the whole vocabulary: a Models page refresh reads
    every installed model's)."""
    try:
        stat = Path(path).stat()
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    return _gguf_bytes(str(path), stat.st_size, stat.st_mtime_ns, kv_value_bytes)


@functools.lru_cache(maxsize=32)
def _gguf_bytes(path: str, size: int, mtime_ns: int, kv_value_bytes: int) -> ModelBytes:
    from ..modelhub.gguf_file import GGUFFile

    with GGUFFile(path) as gguf:
        meta, tensors = gguf.metadata, gguf.tensors
        arch = meta.get("general.architecture")

        def need(key: str) -> Any:
            value = meta.get(f"{arch}.{key}")
            if value is None:
                raise ModelFileError(f"{path} has no {arch}.{key} in its metadata")
            return max(value) if isinstance(value, list) else value  # per-layer lists: the largest

        layers, heads, hidden = int(need("block_count")), int(need("attention.head_count")), int(need("embedding_length"))
        kv_heads = int((meta.get(f"{arch}.attention.head_count_kv") and need("attention.head_count_kv")) or heads)
        key_dim = int(meta.get(f"{arch}.attention.key_length") or hidden // heads)
        value_dim = int(meta.get(f"{arch}.attention.value_length") or key_dim)
        per_layer = [0] * layers
        for name, info in tensors.items():
            if name.startswith("blk."):
                index = int(name.split(".")[1])
                if index >= layers:
                    raise ModelFileError(f"{path} has tensor {name} past its {layers} layers")
                per_layer[index] += info.n_bytes
        if "token_embd.weight" not in tensors:
            raise ModelFileError(f"{path} has no token_embd.weight")
        embed = tensors["token_embd.weight"].n_bytes
        head = tensors["output.weight"].n_bytes if "output.weight" in tensors else 0
        head += tensors["output_norm.weight"].n_bytes if "output_norm.weight" in tensors else 0
        return ModelBytes(layer_bytes=tuple(per_layer), embed_bytes=embed, head_bytes=head,
                          tied="output.weight" not in tensors,
                          kv_bytes_per_token_layer=kv_heads * (key_dim + value_dim) * kv_value_bytes,
                          max_context=int(meta.get(f"{arch}.context_length") or DEFAULT_CONTEXT))


def dense_model_bytes(config: dict[str, Any], bytes_per_weight: int, kv_value_bytes: int = KV_VALUE_BYTES
                      ) -> ModelBytes:
    """The byte counts of a model whose weights are widened to `bytes_per_weight` (its
    config.json's shape: attention, MLP and the two norms per layer)."""
    try:
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        ffn, vocab = int(config["intermediate_size"]), int(config["vocab_size"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ModelFileError(f"config.json lacks the model's shape ({exc!r})") from None
    q, kv = heads * head_dim, kv_heads * head_dim
    per_layer = (hidden * (q + 2 * kv) + q * hidden + 3 * hidden * ffn + 2 * hidden) * bytes_per_weight
    tied = bool(config.get("tie_word_embeddings"))
    return ModelBytes(layer_bytes=(per_layer,) * layers, embed_bytes=vocab * hidden * bytes_per_weight,
                      head_bytes=((0 if tied else vocab) + 1) * hidden * bytes_per_weight, tied=tied,
                      kv_bytes_per_token_layer=2 * kv * kv_value_bytes,
                      max_context=int(config.get("max_position_embeddings") or DEFAULT_CONTEXT))


def plan_for_folder(model_dir: Path | str, free_bytes: int, device: str, *, context: int | None = None,
                    slots: int = DEFAULT_SLOTS, gpu_layers: int | None = None) -> GpuPlan:
    """The plan for an installed model's folder as the CUDA backend loads it by default: a
    GGUF file's blocks as stored, safetensors widened to bfloat16."""
    folder = Path(model_dir)
    gguf = folder / "model.gguf"
    if gguf.is_file():
        model = model_bytes_from_gguf(gguf)
    else:
        from .backends import read_model_config  # config.json only, no torch

        model = dense_model_bytes(read_model_config(folder), 2)
    return plan_layers(model, free_bytes, context=context, slots=slots, gpu_layers=gpu_layers, device=device)


def gpu_budget(gpu_memory: int | None = None, *, load_torch: bool = False) -> tuple[str, int] | None:
    """(what the figure is for, bytes a model may use) to plan with: `gpu_memory`, a card of
    that size, as given; else this computer's CUDA GPU, its free memory plus what this
    process's own torch holds (a loaded model would give it back), at most WREN_GPU_MEMORY;
    else WREN_GPU_MEMORY alone; else None (no GPU, no figure). The GPU is asked through torch
    only where this process has loaded it already (it runs its models: a window that runs
    them elsewhere does not pay seconds to load it), or with `load_torch`."""
    if gpu_memory is not None:
        return f"a GPU with {_gib(gpu_memory)}", gpu_memory
    cap = gpu_memory_from_env()
    found = _cuda_memory(load_torch)
    if found is None:
        return None if cap is None else (f"a GPU with {_gib(cap)} ({ENV_GPU_MEMORY})", cap)
    name, free = found
    return name, free if cap is None else min(free, cap)


def _cuda_memory(load_torch: bool) -> tuple[str, int] | None:
    import importlib
    import importlib.util
    import sys

    if "torch" not in sys.modules and (not load_torch or importlib.util.find_spec("torch") is None):
        return None
    torch = importlib.import_module("torch")
    if not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info()
    return torch.cuda.get_device_name(), free + torch.cuda.memory_reserved()


__all__ = [
    "DEFAULT_CONTEXT",
    "DEFAULT_SLOTS",
    "ENV_GPU_LAYERS",
    "ENV_GPU_MEMORY",
    "MIN_CONTEXT",
    "RESERVE_BYTES",
    "GpuPlan",
    "ModelBytes",
    "PlanError",
    "dense_model_bytes",
    "gpu_budget",
    "gpu_layers_from_env",
    "gpu_memory_from_env",
    "model_bytes_from_gguf",
    "parse_bytes",
    "plan_for_folder",
    "plan_layers",
]
