"""PyTorch backend (CPU and CUDA) running Wren's own llama-family model."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import BackendUnavailable
from ..backend import ModelBase, check_batch, check_slot
from ..cpu_share import CpuShare
from . import read_model_config

if TYPE_CHECKING:
    from ..models.decode import BackgroundCompile
    from ..models.offload import Placement
    from ..placement import GpuPlan

log = logging.getLogger(__name__)

try:  # the backend module is importable without torch, so `available()` can say no
    import torch
except ImportError as exc:  # pragma: no cover - torch is installed wherever tests run
    torch = None
    _IMPORT_ERROR: str | None = str(exc)
else:
    _IMPORT_ERROR = None

DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")
# "file": weights stay in the blocks their file stores (docs/weights.md); "none": widened
# to the activation dtype; "int8"/"int4": re-quantized onto torch's packed int4 kernel's
# grid (lossy, only when asked for).
QUANT_NAMES = ("auto", "file", "none", "int8", "int4")
# Under this many parameters a decoded token costs per-op overhead more than memory
# traffic: compiling the decode step does not pay for itself.
QUANT_MIN_PARAMS = 20_000_000
# KV-cache slots, i.e. sequences decoded together: the answer and one side request (its
# title, a summary, a quick prompt); more wait their turn. Each slot may grow to a full
# context of cache (starter model, fp32, 8k: ~380 MB; its memory is committed as positions
# are written), so two rather than four by default.
DEFAULT_SLOTS = 2
_ENV_COMPILE = {"": "auto", "auto": "auto", "on": "on", "1": "on", "true": "on", "yes": "on",
                "off": "off", "0": "off", "false": "off", "no": "off"}


class TorchModel(ModelBase):
    """A loaded model plus its static KV cache; used from one inference thread."""

    kv_export = True
    verifies = True
    partial_prefill = True

    def __init__(self, model, backend: str, context_length: int, vocab_size: int, *,
                 dtype: str = "float32", quant: str = "none", step=None, share: CpuShare | None = None) -> None:
        self._model = model
        self.share = share  # turns on the cores with the user's other CPU models; None on CUDA
        self.backend = backend
        self.context_length = context_length
        self.vocab_size = vocab_size
        # What "auto" resolved to and how decoding runs, for the UI and benchmarks.
        self.dtype = dtype
        self.quant = quant
        self.warmup_s = 0.0  # compile or capture time spent in load
        self.background: BackgroundCompile | None = None  # while the decode step compiles in the background
        self.gpu_plan: GpuPlan | None = None  # on CUDA: which layers the GPU holds, and why
        self.slots = model.slots  # slot 0 is the one export_kv/import_kv and decode use
        self.batched_decode = self.slots > 1
        self._graphs = step
        self._step = step or model.decode_one
        self._last_used = time.monotonic()  # loading counts as use: a background compile waits a moment
        self._rows_alone: bool | None = None  # see verifies_exactly
        self._compiles_exactly = False  # see verifies_exactly

    def idle_seconds(self) -> float:
        """Seconds since the model last ran (or loaded)."""
        return time.monotonic() - self._last_used

    @property
    def decode_mode(self) -> str:
        """How a decoded token runs now: "cuda-graph", "compiled", "compiling" (eager while
        the compiled step is being built in the background) or "eager"."""
        if self._model is None:
            return "closed"
        if self._graphs is not None:
            return "cuda-graph"
        if self._model.decode_block is not None:
            return "compiled"
        return "compiling" if self.background is not None and not self.background.done else "eager"

    def wait_compiled(self, timeout: float | None = None) -> str:
        """Block until a background compile has finished; returns decode_mode."""
        if self.background is not None:
            self.background.wait(timeout)
            if self.background.seconds is not None:
                self.warmup_s = self.background.seconds
        return self.decode_mode

    def _check(self, count: int, start: int, slot: int = 0) -> None:
        if self._model is None:
            raise RuntimeError("the model is closed")
        check_slot(slot, self.slots)
        if count < 1:
            raise ValueError("prefill needs at least one token")
        if start < 0 or start + count > self.context_length:
            raise ValueError(
                f"positions {start}..{start + count - 1} do not fit the "
                f"{self.context_length}-token context"
            )

    def prefill(self, ids: Sequence[int], start: int, slot: int = 0, final: bool = True) -> np.ndarray:
        ids = list(ids)
        self._check(len(ids), start, slot)
        self._last_used = time.monotonic()
        with self._turn(), torch.inference_mode():
            return _to_numpy(self._model.prefill(ids, start, slot, final))

    def verify(self, ids: Sequence[int], start: int, slot: int = 0) -> np.ndarray:
        ids = list(ids)
        self._check(len(ids), start, slot)
        self._last_used = time.monotonic()
        with self._turn(), torch.inference_mode():
            tokens = torch.as_tensor(ids, dtype=torch.long, device=self._model._token.device).view(1, -1)
            # Outside prompt_activations: each row rounds its activations as a decoded token does.
            return _to_numpy(self._model.verify(tokens, start, slot=slot))

    @property
    def verifies_exactly(self) -> bool:
        """Whether `verify` gives each row the bits `decode` would, now: on the CPU, every
        linear one of Wren's quantized ones (their kernels compute each row alone; torch's
        float GEMM blocks rows together), no mixture of experts (its chunk and token paths
        differ), and decoding eagerly or through compiled steps that call Wren's own norm
        and one-query attention kernels, as the eager rows do (inductor's fused loops for
        them round otherwise, by ~5e-7), in blocks whose remaining element-wise ops were
        checked to compile to the eager bits (_compiles_exactly)."""
        model = self._model
        if model is None or self._graphs is not None:
            return False
        if self._rows_alone is None:
            self._rows_alone = _rows_alone(model)
            self._compiles_exactly = self._rows_alone and _compiles_exactly(model)
        if not self._rows_alone:
            return False
        from ..quant import kernels

        return model.decode_block is None or (self._compiles_exactly and kernels.RMS_NORM and kernels.ATTEND_ONE)

    def decode(self, token: int, pos: int, slot: int = 0) -> np.ndarray:
        self._check(1, pos, slot)
        self._last_used = time.monotonic()
        if slot and self._graphs is not None:  # the one-sequence graphs read slot 0 only
            return self.decode_batch([token], [pos], [slot])[0]
        with self._turn(), torch.inference_mode():
            if slot:
                return _to_numpy(self._model.decode_one(int(token), pos, slot))
            return _to_numpy(self._step(int(token), pos))

    def decode_batch(self, tokens: Sequence[int], positions: Sequence[int],
                     slots: Sequence[int]) -> np.ndarray:
        """Logits [B, vocab]: one token for each of B sequences, each in its own slot."""
        from ..models.batched import decode_batch

        if self._model is None:
            raise RuntimeError("the model is closed")
        self._last_used = time.monotonic()
        with self._turn(), torch.inference_mode():
            if self._graphs is not None and self._graphs.takes(len(tokens)):
                check_batch(tokens, positions, slots, self.slots, self.context_length)
                return _to_numpy(self._graphs.batch(tokens, positions, slots))
            return _to_numpy(decode_batch(self._model, tokens, positions, slots))

    def _turn(self):
        return self.share.step() if self.share is not None else contextlib.nullcontext()

    def rest(self) -> None:
        if self.share is not None:
            self.share.rest()

    def serving(self, cancelled) -> None:
        if self.share is not None:
            self.share.cancelled = cancelled

    def export_kv(self, n: int, slot: int = 0) -> tuple[list, int]:
        """Copies of the first `n` cached positions of every layer in `slot`, and their size."""
        check_slot(slot, self.slots)
        with torch.inference_mode():
            return self._model.export_kv(n, slot)

    def import_kv(self, state: list, n: int, slot: int = 0) -> None:
        check_slot(slot, self.slots)
        with torch.inference_mode():
            self._model.import_kv(state, n, slot)

    def kv_resumable(self, start: int, slot: int = 0) -> bool:
        """Whether `slot` may go on from `start` (a sliding-window ring may have lost it)."""
        with torch.inference_mode():
            return self._model.kv_resumable(start, slot)

    def close(self) -> None:
        if self.background is not None:
            self.background.cancel()
        if self.share is not None:
            self.share.close()
            self.share = None
        model, self._model, self._step, self._graphs = self._model, None, None, None
        del model
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()


def _rows_alone(model) -> bool:
    """Whether each row of a multi-row forward computes as a one-row one does (apart from
    attention, which verify runs row by row): every linear quantized and on the CPU, float32
    activations, no experts."""
    from torch import nn

    from ..quant.modules import QuantLinear

    if model.args.num_experts or any(device.type != "cpu" for _, _, device, _ in model.stages.runs):
        return False
    if model.norm.weight.dtype != torch.float32:
        return False
    return all(isinstance(m, QuantLinear) for m in model.modules() if isinstance(m, (nn.Linear, QuantLinear)))


def _compiles_exactly(model) -> bool:
    """Whether a compiled decode step computes the eager step's bits: its norms and one-query
    attention are Wren's kernels in both (kernels.RMS_NORM, kernels.ATTEND_ONE), and its
    blocks are llama-shaped (norms before attention and MLP, SiLU, RoPE over whole heads from
    the model's tables, a cache of every position, no q/k norms or attention sinks), whose
    other ops (RoPE's products and sums, SiLU, the residual adds) inductor rounds as eager
    torch does (tests/engine/inference/test_speculative_exact.py, on the starter). Other
    shapes (gemma3's rings and GELU, qwen3's q/k norms, gpt-oss's sinks) are not checked:
    False."""
    for layer in model.layers:
        attention = layer.attention
        if (layer.placement != "pre" or layer.post_attention_norm is not None or layer.feed_forward.gelu
                or attention.qk_norm is not None or attention.sinks is not None
                or attention.pos_slots is not None or attention.rope_cos is not None
                or attention.rotary_dim not in (0, attention.head_dim)):
            return False
    return True


def _to_numpy(logits) -> np.ndarray:
    return logits.to(device="cpu", dtype=torch.float32).numpy()


class TorchBackend:
    def __init__(self, device: str = "cpu") -> None:
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        self.device = device
        self.name = f"torch-{device}"
        # False for a process that ends after one answer: compile="auto" then decodes
        # eagerly instead of loading (or compiling) the compiled step in the background.
        self.background_compile = True

    def unavailable_reason(self) -> str | None:
        if torch is None:
            return f"PyTorch is not installed ({_IMPORT_ERROR})"
        if self.device == "cuda" and not torch.cuda.is_available():
            return "PyTorch cannot see a CUDA GPU (no NVIDIA driver, or a CPU-only torch build)"
        return None

    def available(self) -> bool:
        return self.unavailable_reason() is None

    def load(
        self, model_dir: Path, *, dtype: str = "auto", quant: str = "auto",
        context_length: int | None = None, compile: bool | str = "auto", slots: int | None = DEFAULT_SLOTS,
        gpu_layers: int | None = None, placement: Placement | None = None,
    ) -> TorchModel:
        """Load a model folder (model.gguf, or safetensors). context_length defaults to
        min(max_position_embeddings, 8192).

        dtype is the activation and KV-cache dtype; quant the weight format. On a CPU
        "auto" is "file": every weight stays in the blocks its file stores and is
        multiplied by Wren's kernels (engine/inference/quant), exactly the file's values,
        with float32 activations. "none" widens the weights to dtype; "int4" / "int8"
        (CPU only) re-quantize them onto torch's packed int4 kernel (lossy: only when
        asked for). On CUDA "auto" is "file" for a GGUF file (its blocks move to the GPU
        once, as stored: an 8B Q4_K_M needs ~5 GB there, not 16) and "none" (bfloat16) for
        safetensors.

        On CUDA the model is placed by engine.inference.placement's plan: every layer on the
        GPU when they fit with the KV cache for the context (8k by default), else layers
        [0, n) there and the rest on the CPU (float32, Wren's kernels), else the CPU alone;
        the cache holds no more context than fits (`context_length` of the result says how
        much, `gpu_plan` why). gpu_layers (or WREN_GPU_LAYERS) sets n, as llama.cpp's -ngl;
        WREN_GPU_MEMORY caps the GPU memory used. `placement` (engine.inference.models.offload)
        places the layers by hand on any two devices instead, "cpu" and "cpu" included.

        compile=True makes decoding fast at a start-up cost, paid here on the loading
        thread: on a CPU it compiles the decode step ahead of time (needs a C++ compiler;
        falls back to eager if compiling fails; the graphs are saved under <data
        dir>/cache/torch-inductor/decode-blocks and load in ~1-2 s on later starts), on
        CUDA it captures the decode step in CUDA graphs. `warmup_s` on the result says how
        long it took. compile="auto" (the default; the WREN_TORCH_COMPILE environment
        variable, "auto", "on" or "off", overrides it) compiles on a CPU for models where
        it pays off (over QUANT_MIN_PARAMS) in a low-priority child process, or loads the
        saved graphs, on a background thread, decoding eagerly until they are ready
        (`decode_mode` "compiling"); on CUDA it stays eager, as the CUDA-graph path has not
        been measured on a GPU yet.

        slots is how many sequences the KV cache holds for batched decoding (1 turns it off;
        None: DEFAULT_SLOTS)."""
        from ..models.llama import ModelArgs, build_model
        from ..models.offload import mark_split
        from ..models.weights import GGUF_FILE, open_weights

        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"{self.name}: {reason}")
        model_dir = Path(model_dir)
        config = read_model_config(model_dir)
        args = ModelArgs.from_hf_config(config)
        asked_dtype = dtype
        dtype, quant = self.resolve_format(dtype, quant, _parameter_count(args),
                                           gguf=(model_dir / GGUF_FILE).is_file())
        if context_length is not None and not (1 <= context_length <= args.max_position_embeddings):
            raise ValueError(
                f"context_length must be 1..{args.max_position_embeddings}, got {context_length}"
            )
        if slots is None:
            slots = DEFAULT_SLOTS
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        torch_dtype = getattr(torch, dtype)
        plan = None
        if placement is None and self.device == "cuda":
            plan = _plan(model_dir, config, quant, context_length, slots, gpu_layers)
            if not plan.on_gpu:  # not one layer fits: the CPU runs it all, as torch-cpu would
                return self._load_on_cpu(model_dir, plan, asked_dtype, context_length, compile, slots)
            context_length, placement = plan.kv_context, _gpu_placement(plan, torch_dtype)
        if placement is not None and quant not in ("file", "none"):
            raise ValueError(f"quant={quant!r} re-quantizes on the CPU; a placed model takes 'file' or 'none'")
        weights = open_weights(model_dir, config)
        try:
            get = _weights_getter(weights, quant, self.device, torch_dtype, placement)
            # A checkpoint without lm_head has nothing else to project with: tie it.
            tied = args.tie_word_embeddings or "lm_head.weight" not in weights.names
            with torch.inference_mode():
                model = build_model(args, get, tied=tied, context_length=context_length,
                                    prepare=_quantizer(quant, torch_dtype), slots=slots,
                                    dtype=placement.activation_dtype if placement is not None else torch_dtype)
        finally:
            weights.close()
        if placement is not None:
            mark_split(model, placement)
        if quant == "file":
            _check_kernels()
        when = self.resolve_compile(compile, _parameter_count(args))
        if model.stages.split and self.device != "cpu":
            when = "off"  # CUDA graphs take a model on one GPU (a split on the CPU alone compiles)
        warmup_s, step, cache = 0.0, None, None
        if when != "off" and self.device == "cpu":
            from ...paths import cache_dir, private_dir
            from ..models import decode

            cache = private_dir(cache_dir() / "torch-inductor")  # 0700 both: inductor would make them 0755
            if when != "background":
                warmup_s = decode.compile_cpu_decode(model, cache) or 0.0
        elif when != "off":
            from ..models.cuda_graphs import CudaGraphDecode

            step = CudaGraphDecode(model)
            warmup_s = step.capture()
        share = CpuShare.for_this_user() if self.device == "cpu" else None
        loaded = TorchModel(model, self.name, model.context_length, args.vocab_size,
                            dtype=dtype, quant=quant, step=step, share=share)
        loaded.warmup_s = warmup_s
        loaded.gpu_plan = plan
        if when == "background" and cache is not None:
            from ..models.decode import BackgroundCompile

            # decoding eagerly meanwhile; it starts once the model has had a quiet second
            loaded.background = BackgroundCompile(model, cache, idle_seconds=loaded.idle_seconds)
        _return_freed_heap()
        return loaded

    def _load_on_cpu(self, model_dir: Path, plan: GpuPlan, dtype: str, context_length: int | None,
                     compile: bool | str, slots: int) -> TorchModel:
        """The model on the CPU alone, as torch-cpu loads it, when not one layer fits the GPU."""
        _notice(plan.reason)
        cpu = TorchBackend("cpu")
        cpu.background_compile = self.background_compile
        loaded = cpu.load(model_dir, dtype=dtype, context_length=context_length, compile=compile, slots=slots)
        loaded.gpu_plan = plan
        return loaded

    def resolve_compile(self, compile: bool | str, parameters: int) -> str:
        """"now", "background" or "off": when `load` compiles the decode step."""
        if compile == "auto":
            raw = os.environ.get("WREN_TORCH_COMPILE", "").strip().lower()
            chosen = _ENV_COMPILE.get(raw)
            if chosen is None:
                raise ValueError(f"WREN_TORCH_COMPILE must be auto, on or off, got {raw!r}")
            compile = chosen
        if compile in (True, "on"):
            return "now"
        if compile in (False, "off"):
            return "off"
        if compile != "auto":
            raise ValueError(f"compile must be True, False, 'auto', 'on' or 'off', got {compile!r}")
        # On CUDA a decoded token is hundreds of small kernel launches: captured once in CUDA
        # graphs at load, replayed per token (on an H200, eager launches held a 1B model to
        # 16 tokens/s). On the CPU, tiny models gain nothing from compiling.
        if self.device != "cpu":
            return "now"
        if parameters < QUANT_MIN_PARAMS or not self.background_compile:
            return "off"
        return "background"

    def resolve_format(self, dtype: str, quant: str, parameters: int, *, gguf: bool = False) -> tuple[str, str]:
        """(compute dtype, weight format) that `load` uses for these options (`gguf`: the
        model folder holds a GGUF file)."""
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
        if quant not in QUANT_NAMES:
            raise ValueError(f"quant must be one of {', '.join(QUANT_NAMES)}, got {quant!r}")
        if self.device == "cuda":
            if quant in ("int4", "int8"):
                raise ValueError(f"quant={quant!r} runs on the CPU only; use quant='file' or 'none' on CUDA")
            if quant == "auto":  # a GGUF file's blocks stay as stored; safetensors widen
                quant = "file" if gguf else "none"
            # bf16 halves memory traffic at no accuracy cost that matters for chat.
            return ("bfloat16" if dtype == "auto" else dtype), quant
        if quant == "auto":
            quant = "file"
        if quant in ("none", "file"):
            return ("float32" if dtype == "auto" else dtype), quant
        if dtype == "float16":
            raise ValueError(f"quant={quant!r} runs with float32 or bfloat16 activations, not float16")
        return ("float32" if dtype == "auto" else dtype), quant


def _parameter_count(args) -> int:
    per_layer = args.hidden_size * (args.q_size + 2 * args.kv_size) + args.q_size * args.hidden_size
    per_layer += 3 * args.hidden_size * args.intermediate_size
    heads = 1 if args.tie_word_embeddings else 2
    return args.num_hidden_layers * per_layer + heads * args.vocab_size * args.hidden_size


def _weights_getter(weights, quant: str, device: str, dtype, placement: Placement | None):
    """`build_model`'s `get` for the weight format and placement."""
    from ..models.offload import placed
    from ..models.weights import dense

    if quant == "file":
        return _activations_in(weights.get, dtype) if placement is None else placed(weights.get, placement)
    if placement is not None:  # widened where the file's values are, then moved to each side
        return placed(dense(weights.get, "cpu", torch.float32), placement)
    # Quantizers see the file's values, not a rounding of them.
    return dense(weights.get, device, torch.float32 if quant != "none" else dtype)


def _gpu_placement(plan: GpuPlan, dtype) -> Placement:
    """Where the plan puts each part on this GPU; said to the user when not all of it fits."""
    from ..models.offload import Placement

    if not plan.all_on_gpu or plan.kv_context < plan.requested_context:
        _notice(plan.reason)
    return Placement.from_plan(plan, "cuda", first_dtype=dtype)


def _plan(model_dir: Path, config: dict, quant: str, context_length: int | None, slots: int,
          gpu_layers: int | None) -> GpuPlan:
    """The placement plan on this CUDA GPU (engine.inference.placement)."""
    from ..models.offload import gpu_memory
    from ..models.weights import GGUF_FILE
    from ..placement import dense_model_bytes, gpu_layers_from_env, model_bytes_from_gguf, plan_layers

    gguf = model_dir / GGUF_FILE
    facts = model_bytes_from_gguf(gguf) if quant == "file" and gguf.is_file() else dense_model_bytes(config, 2)
    name, free = gpu_memory("cuda")
    if gpu_layers is None:
        gpu_layers = gpu_layers_from_env()
    return plan_layers(facts, free, context=context_length, slots=slots, gpu_layers=gpu_layers, device=name)


def _notice(text: str) -> None:
    """Where the model runs, for the user to read now (engine/store's notice attribute)."""
    log.warning("%s", text, extra={"wren_notice": True})


def _activations_in(get, dtype):
    """`get` with dense tensors (norms, biases) in the activation dtype; QTensors as read."""
    from ..quant.modules import QTensor

    def cast(name: str):
        value = get(name)
        return value if isinstance(value, QTensor) else value.to(dtype)

    return cast


def _check_kernels() -> None:
    """Say once, in the log, when the weights run on the slow exact path."""
    from ..quant import kernels

    kernels.available()  # logs kernels.NOTICE the first time, when they are missing


def _quantizer(quant: str, dtype):
    """For an explicit re-quantization ("int4"/"int8"): the build hook that packs a
    module's linear weights (their kernel takes bf16) and casts the remaining parameters
    (norms, embeddings) to the activation dtype."""
    if quant in ("none", "file"):
        return None
    from ..quant import GroupQuantEmbedding, quantize_linears

    def prepare(module) -> None:
        # The output head stays int8 under int4: 4-bit groups cannot hold the starter's
        # Q8_0 embedding (9% error), which changed its greedy answer from the first token.
        quantize_linears(module, quant, dtype=torch.bfloat16, int8_names=("output",))
        for sub in module.modules():
            for name, param in sub.named_parameters(recurse=False):
                if param.dtype != dtype:
                    setattr(sub, name, torch.nn.Parameter(param.to(dtype), requires_grad=False))
        embeddings = getattr(module, "tok_embeddings", None)
        if isinstance(embeddings, torch.nn.Embedding):
            # A table from a Q8_0 file fits int8 groups exactly: a quarter of the memory
            # (the starter model: 113 MB to 31 MB) for the same values.
            compact = GroupQuantEmbedding.lossless(embeddings.weight)
            if compact is not None:
                module.tok_embeddings = compact

    return prepare


def _return_freed_heap() -> None:
    """Loading reads and quantizes the float32 weights; glibc keeps the freed heap for
    reuse, so the process would look ~80 MB (the starter model) bigger than it is."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass
