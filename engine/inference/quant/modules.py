"""Linear layers and embeddings over a model file's own weight blocks (docs/weights.md).

A `QTensor` is a weight as its file stores it: the raw bytes of each row's blocks, its GGML
type and its logical shape. `QuantLinear` multiplies by one or more of them without ever
widening the weight in memory: through Wren's kernels where they are built (8-bit rounded
activations and integer dot products for decoding, `kernels.qlinear`; float32 activations
for the output head, `kernels.qlinear_exact`), else by dequantizing exactly
(`ggml.dequantize`) a slice of rows at a time. Weights on a CUDA device are multiplied in their
blocks by Triton kernels (triton_gguf.py) where triton is installed and the types are theirs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from ... import switches
from . import ggml, kernels

log = logging.getLogger("wren.engine.inference.quant")
F32 = 0
# WREN_EXACT_ACTIVATIONS=1: every layer multiplies float32 activations (slower decoding,
# answers that follow the float32 reference more closely); by default only the output head.
EXACT_EVERYWHERE = switches.on("WREN_EXACT_ACTIVATIONS")
_exact = threading.local()


# Within prompt_activations, a call of more than PROMPT_INTEGER_ROWS rows (a long prompt's
# chunk) takes the integer prompt path (kernels.integer_prompt) for all but its last
# PROMPT_EXACT_TAIL rows, which keep float32 activations; a shorter call (a chat turn's few
# new tokens, where the float path costs little) stays float32 throughout. On the starter's
# reference prompts (35-40 tokens) the integer path for all rows took greedy agreement with
# the float32 reference from 51 to 31 of 73 tokens, and for all but the last 16 to 44; so
# short prompts keep today's exact answers. Both are settable for measurements
# (WREN_PROMPT_EXACT_TAIL=0: no exact rows; a huge WREN_PROMPT_INTEGER_ROWS: none integer).
PROMPT_EXACT_TAIL = max(0, int(os.environ.get("WREN_PROMPT_EXACT_TAIL", "") or 16))
PROMPT_INTEGER_ROWS = max(0, int(os.environ.get("WREN_PROMPT_INTEGER_ROWS", "") or 64))
# ...and only for a layer at least this wide. The starter (576 wide, its down projection 1536)
# answered an attached note wrongly with 8-bit prompt activations (tests/e2e/
# test_starter_attachment.py) and its float path already reads a prompt at 1.8x llama.cpp;
# from ~1B models up (2048 wide) the integer path is where the prompt time goes.
PROMPT_INTEGER_MIN_WIDTH = max(0, int(os.environ.get("WREN_PROMPT_INTEGER_WIDTH", "") or 2048))


@contextmanager
def exact_activations() -> Iterator[None]:
    """Within it, every QuantLinear multiplies float32 activations (tests that hold Wren to
    another implementation's float32 logits). Per thread."""
    before = getattr(_exact, "on", False)
    _exact.on = True
    try:
        yield
    finally:
        _exact.on = before


@contextmanager
def prompt_activations(exact_tail: bool = True) -> Iterator[None]:
    """Within it (a prompt's chunk), QuantLinear multiplies float32 activations for the last
    PROMPT_EXACT_TAIL rows of x, a prompt's last tokens, whose logits pick the answer's first
    word, and for every row of a call of at most PROMPT_INTEGER_ROWS rows (a short prompt
    after a cached prefix). Earlier rows of a longer call take 8-bit activations and integer
    products where the kernels have the integer prompt path (kernels.integer_prompt;
    otherwise every row stays float32). `exact_tail` False: a long prompt's earlier chunk,
    whose last rows pick no token (the final chunk's do): a call of more than
    PROMPT_INTEGER_ROWS rows takes the integer path for all of them. Per thread."""
    before = getattr(_exact, "prompt", False), getattr(_exact, "tail", True)
    _exact.prompt, _exact.tail = True, exact_tail
    try:
        yield
    finally:
        _exact.prompt, _exact.tail = before


def _prompt_min_rows() -> int:
    """Rows above which a prompt's call takes the integer path (prompt_activations)."""
    return max(PROMPT_EXACT_TAIL, PROMPT_INTEGER_ROWS) if getattr(_exact, "tail", True) else PROMPT_INTEGER_ROWS


_FALLBACK_ROWS = 1024  # rows dequantized at a time without the kernels (bounds the temporaries)

# Tests: weights on the CPU take the GPU kernels' path too, run by Triton's interpreter (where
# triton_gguf was imported with TRITON_INTERPRET=1). Off, CPU weights go through Wren's CPU kernels.
TRITON_ON_CPU = False
_triton: ModuleType | None = None


def _gpu_kernels(raw: torch.Tensor) -> ModuleType | None:
    """triton_gguf where its kernels take weights on raw's device (CUDA with triton), else None."""
    global _triton
    if raw.device.type == "cpu" and not TRITON_ON_CPU:
        return None
    if _triton is None:
        from . import triton_gguf  # imports triton: only where a weight is off the CPU

        _triton = triton_gguf
        if triton_gguf.NOTICE is not None:
            log.warning(triton_gguf.NOTICE)
    return _triton if _triton.runs_on(raw.device) else None


@dataclass(frozen=True)
class QTensor:
    """A 2-D weight in a file's own format: `raw` uint8 [rows, row_bytes], GGUF's row layout."""

    raw: torch.Tensor
    qtype: int
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        rows, cols = self.shape
        if self.raw.dtype != torch.uint8 or tuple(self.raw.shape) != (rows, ggml.row_bytes(self.qtype, cols)):
            raise ValueError(
                f"a {ggml.type_name(self.qtype)} weight of shape {self.shape} needs uint8 "
                f"[{rows}, {ggml.row_bytes(self.qtype, cols)}], got {self.raw.dtype} {tuple(self.raw.shape)}"
            )

    @property
    def nbytes(self) -> int:
        return self.raw.numel()

    def dequantize(self) -> torch.Tensor:
        """The float32 values the file holds (exact)."""
        return dequantize(self.raw, self.qtype, self.shape[1])

    def permute_rows(self, order: torch.Tensor) -> QTensor:
        """The rows in `order`: whole rows of blocks move, so every value is unchanged."""
        return QTensor(self.raw[order].contiguous(), self.qtype, self.shape)

    @staticmethod
    def cat(parts: Sequence[QTensor]) -> QTensor:
        """Parts of one type stacked by rows."""
        first = parts[0]
        if any(p.qtype != first.qtype or p.shape[1] != first.shape[1] for p in parts):
            raise ValueError("only weights of one type and width stack into one QTensor")
        if len(parts) == 1:
            return first
        rows = sum(p.shape[0] for p in parts)
        return QTensor(torch.cat([p.raw for p in parts]), first.qtype, (rows, first.shape[1]))


def dequantize(raw: torch.Tensor, qtype: int, cols: int) -> torch.Tensor:
    if qtype == F32:
        return raw.view(torch.float32).reshape(raw.shape[0], cols).clone()
    gpu = _gpu_kernels(raw)
    if gpu is not None and gpu.supports(qtype):
        return gpu.dequantize(raw.contiguous(), qtype, cols)
    if raw.device.type == "cpu" and kernels.available():
        return kernels.dequantize(raw, qtype, cols)
    return ggml.dequantize(raw, qtype, cols)


def is_quantized(weight: object) -> bool:
    return isinstance(weight, QTensor)


class QuantLinear(nn.Module):
    """y = x W^T + b, W the concatenation by rows of one or more QTensors (Q, K and V fused,
    say, where a Q4_K_M file stores V in another type). Activations go in and come out in
    x's dtype; the products are computed in float32."""

    def __init__(self, parts: Sequence[QTensor], bias: torch.Tensor | None = None, *,
                 exact: bool = False) -> None:
        super().__init__()
        # exact: the kernels multiply float32 activations (not rounded to 8 bits per block),
        # as the output head does: its logits decide which token comes next.
        self.exact = exact
        merged: list[QTensor] = []
        for part in parts:  # neighbours of one type become one part: one kernel call
            if merged and merged[-1].qtype == part.qtype and merged[-1].shape[1] == part.shape[1]:
                merged[-1] = QTensor.cat([merged[-1], part])
            else:
                merged.append(part)
        widths = {p.shape[1] for p in merged}
        if len(widths) != 1:
            raise ValueError(f"fused weights must share their input width, got {sorted(widths)}")
        if not exact:  # decoding reads Q4_0/Q4_1/Q4_K eight rows per pass where the kernels can (csrc/repack.cpp)
            merged = [p if _gpu_kernels(p.raw) is not None else QTensor(*kernels.interleaved(p.raw, p.qtype, p.shape[1]),
                                                                         p.shape) for p in merged]
        self.in_features = widths.pop()
        self.qtypes = tuple(p.qtype for p in merged)
        self.part_rows = tuple(p.shape[0] for p in merged)
        self.out_features = sum(self.part_rows)
        for i, part in enumerate(merged):
            self.register_buffer(f"raw{i}", part.raw)
        if bias is not None and tuple(bias.shape) != (self.out_features,):
            raise ValueError(f"bias of shape {tuple(bias.shape)} for {self.out_features} outputs")
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    @property
    def signature(self) -> tuple:
        """What a compiled graph specialises on: the types and their row counts."""
        return (self.in_features, self.qtypes, self.part_rows)

    def parts(self) -> list[QTensor]:
        return [QTensor(getattr(self, f"raw{i}"), q, (r, self.in_features))
                for i, (q, r) in enumerate(zip(self.qtypes, self.part_rows))]

    @property
    def weight_bytes(self) -> int:
        return sum(getattr(self, f"raw{i}").numel() for i in range(len(self.qtypes)))

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]  # nn.Module's, as .to()/.cuda() call it
        super()._apply(fn, recurse)
        self._relayout()
        return self

    def _relayout(self) -> None:
        """After a move: the file's row layout off the CPU (the GPU kernels read it), the CPU
        kernels' interleaved one on it (as __init__ chose). Every value stays the same."""
        qtypes = list(self.qtypes)
        for i, qtype in enumerate(qtypes):
            raw = getattr(self, f"raw{i}")
            if qtype in ggml.INTERLEAVED and (raw.device.type != "cpu" or _gpu_kernels(raw) is not None):
                raw, qtypes[i] = ggml.unpack_interleaved(raw, qtype)
            elif qtype not in ggml.INTERLEAVED and not self.exact and _gpu_kernels(raw) is None:
                raw, qtypes[i] = kernels.interleaved(raw, qtype, self.in_features)
            setattr(self, f"raw{i}", raw)
        self.qtypes = tuple(qtypes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raws = [getattr(self, f"raw{i}") for i in range(len(self.qtypes))]
        gpu = _gpu_kernels(raws[0])
        if gpu is not None and all(gpu.supports(q) for q in self.qtypes):
            # in x's dtype, products summed in float32; the bias added in the kernels. Compiled:
            # one opaque op (Dynamo does not trace Triton's launcher; fullgraph holds)
            run = gpu.linear_op if torch.compiler.is_compiling() else gpu.linear_parts
            y = run(x.reshape(-1, self.in_features), raws, list(self.qtypes), list(self.part_rows), self.bias)
            return y.view(*x.shape[:-1], self.out_features).to(x.dtype)
        rows = x.reshape(-1, self.in_features)
        if rows.dtype != torch.float32:
            rows = rows.float()
        rows = rows.contiguous()
        if raws[0].device.type == "cpu" and kernels.available():
            # Every part in one call: x quantized once per activation format, one parallel
            # pass over all the rows, no concatenation.
            exact_all = EXACT_EVERYWHERE or getattr(_exact, "on", False)
            prompt = getattr(_exact, "prompt", False) and not exact_all
            everywhere = exact_all or prompt
            if self.exact and not everywhere and kernels.WIDE_HEAD and len(raws) == 1:
                # the head's step: 15-16-bit activations (kernels.qlinear_wide says how close)
                y = kernels.qlinear_wide(rows, raws[0], self.qtypes[0], self.part_rows[0])
            elif prompt and not self.exact and rows.shape[0] > _prompt_min_rows() \
                    and self.in_features >= PROMPT_INTEGER_MIN_WIDTH and kernels.integer_prompt():
                y = self._prompt(rows, raws)
            else:
                y = kernels.qlinear_parts(rows, raws, self.qtypes, self.part_rows, self.exact or everywhere)
        else:
            outs = [_matmul(rows, raw, qtype, n, self.in_features, self.exact)
                    for raw, qtype, n in zip(raws, self.qtypes, self.part_rows)]
            y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def _prompt(self, rows: torch.Tensor, raws: list[torch.Tensor]) -> torch.Tensor:
        """A prompt's rows: all but the last PROMPT_EXACT_TAIL through the integer path,
        those through float32 activations (prompt_activations says why); every row through
        the integer path in a chunk whose tail picks no token."""
        y = kernels.qlinear_parts(rows, raws, self.qtypes, self.part_rows, False)
        if PROMPT_EXACT_TAIL and getattr(_exact, "tail", True):  # the tail's integer rows overwritten: no copy
            cut = rows.shape[0] - PROMPT_EXACT_TAIL
            y[cut:] = kernels.qlinear_parts(rows[cut:], raws, self.qtypes, self.part_rows, True)
        return y

    def extra_repr(self) -> str:
        types = "+".join(f"{ggml.type_name(q)}[{r}]" for q, r in zip(self.qtypes, self.part_rows))
        return f"in={self.in_features}, out={self.out_features}, {types}" + (", exact" if self.exact else "")


def _matmul(x: torch.Tensor, raw: torch.Tensor, qtype: int, rows: int, cols: int,
            exact: bool = False) -> torch.Tensor:
    if qtype == F32:
        return F.linear(x, raw.view(torch.float32).view(rows, cols))
    if raw.device.type == "cpu" and kernels.available():
        if exact or EXACT_EVERYWHERE or getattr(_exact, "on", False) or getattr(_exact, "prompt", False):
            return kernels.qlinear_exact(x, raw, qtype, rows)
        return kernels.qlinear(x, raw, qtype, rows)
    # Exact and slow: a slice of rows widened at a time, so memory stays bounded.
    outs = [F.linear(x, ggml.dequantize(chunk, qtype, cols)) for chunk in raw.split(_FALLBACK_ROWS)]
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


class QuantEmbedding(nn.Module):
    """An embedding table kept in its file's blocks; looked-up rows are dequantized exactly."""

    def __init__(self, weight: QTensor, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.qtype = weight.qtype
        self.num_embeddings, self.embedding_dim = weight.shape
        self.dtype = dtype
        self.register_buffer("raw", weight.raw)

    def as_qtensor(self) -> QTensor:
        return QTensor(self.raw, self.qtype, (self.num_embeddings, self.embedding_dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # index_select, not raw[ids]: advanced indexing of the whole table (gpt-oss: 615 MB)
        # measured 5-20 ms a decoded token at 2 threads against microseconds
        rows = dequantize(self.raw.index_select(0, ids.reshape(-1)), self.qtype, self.embedding_dim)
        return rows.view(*ids.shape, self.embedding_dim).to(self.dtype)

    def extra_repr(self) -> str:
        return f"rows={self.num_embeddings}, dim={self.embedding_dim}, {ggml.type_name(self.qtype)}"


def layer_signature(module: nn.Module) -> tuple:
    """The quantized layout of every QuantLinear under `module`, in order."""
    return tuple((name, m.signature) for name, m in module.named_modules() if isinstance(m, QuantLinear))


def weight_bytes(module: nn.Module) -> int:
    """Bytes of every tensor `module` holds (blocks as stored, plus any dense tensors)."""
    seen: set[int] = set()
    total = 0
    for t in [*module.parameters(), *module.buffers()]:
        if t is None or t.untyped_storage().data_ptr() in seen:
            continue
        seen.add(t.untyped_storage().data_ptr())
        total += t.untyped_storage().nbytes()
    return total
