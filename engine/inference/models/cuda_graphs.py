"""The decode step on CUDA, captured into CUDA graphs and replayed with one launch.

A decoded token costs a few hundred small kernel launches; eager, their launch overhead held a
1B model to 16 tokens/s on an H200. Graphs need fixed shapes, so the step attends over a
fixed span of the cache with a mask: one graph per span bucket (powers of two from 256 up to
the context), so a short chat does not pay for reading the whole 8k cache. Several sequences
at once replay graphs per row count too (`CudaGraphDecode.batch`).
"""

from __future__ import annotations

import logging
import time

import torch

from .batched import batch_block
from .llama import Transformer

log = logging.getLogger(__name__)


def static_decode_step(model: Transformer, token: torch.Tensor, pos: torch.Tensor, span: int) -> torch.Tensor:
    """Logits [vocab] for `token` [1, 1] at device position `pos` [1], attending over cache
    positions [0, span): every shape is fixed, so the step can be captured in a CUDA graph.
    It is the batched step for one row, slot 0. Requires pos < span."""
    slot_ids = torch.zeros_like(pos)
    return _static_rows(model, token, pos, slot_ids, slice(0, 1), span)[0]


def static_batch_step(model: Transformer, tokens: torch.Tensor, pos: torch.Tensor, slot_ids: torch.Tensor,
                      span: int) -> torch.Tensor:
    """Logits [B, vocab] for B sequences: tokens [B, 1] at device positions pos [B] of the
    cache slots slot_ids [B], each attending over cache positions [0, span) of its slot (read
    by gathering the rows' slots, so any set of slots, in any order, takes the same graph).
    Fixed shapes for a fixed B and span, as CUDA graphs need. Requires every pos < span."""
    return _static_rows(model, tokens, pos, slot_ids, slot_ids, span)


def _static_rows(model: Transformer, tokens: torch.Tensor, pos: torch.Tensor, slot_ids: torch.Tensor, rows,
                 span: int) -> torch.Tensor:
    cos = model._cos.index_select(0, pos)[:, None]  # [B, 1 (length), 1 (heads), head_dim]
    sin = model._sin.index_select(0, pos)[:, None]
    key_pos = torch.arange(span, device=pos.device)[None, :]
    h = model.embed(tokens)
    for layer in model.layers:
        h = batch_block(layer, h, cos, sin, pos, slot_ids, rows, key_pos)
    return model.head(h[:, -1])


def batch_sizes(slots: int) -> list[int]:
    """The row counts batched CUDA graphs are captured for: powers of two from 2 below the
    slot count, and the slot count itself. A batch of b rows replays the smallest one >= b."""
    sizes, size = [], 2
    while size < slots:
        sizes.append(size)
        size *= 2
    return sizes + [slots] if slots > 1 else []


def padded_rows(tokens, positions, slots, size: int) -> list[list[int]]:
    """[tokens, positions, slots] of a batch padded to `size` rows by repeating its first row.
    A repeated row computes what the first does, bit for bit (each row's products are its
    own), and writes the same key and value to the same cache place, so padding changes
    nothing the real rows see."""
    pad = size - len(tokens)
    if pad < 0:
        raise ValueError(f"a batch of {len(tokens)} rows does not fit a graph of {size}")
    return [[int(v) for v in values] + [int(values[0])] * pad for values in (tokens, positions, slots)]


class CudaGraphDecode:
    """Replays a captured decode step per token: one launch instead of hundreds.

    Spans are powers of two from 256 up to the context length; a token at position p
    replays the smallest span above p. The graphs share one memory pool and read the
    token and position from static device tensors, so a step is two tiny copies plus a
    replay.

    Several sequences at once (a title or summary beside the answer, `wren serve`'s
    concurrent requests) replay batched graphs (`batch`): one per row count of
    `batch_sizes` and span, captured the first time a batch needs it (the step runs eagerly
    then, giving that step's logits, and is captured beside; capturing executes nothing)."""

    def __init__(self, model: Transformer, min_span: int = 256) -> None:
        if model.stages.split:  # a graph replays one device's kernels; a split step crosses to the CPU
            raise ValueError("CUDA graphs capture a model on one GPU, not one split across devices")
        self.model = model
        device = model._token.device
        self.token = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((1,), dtype=torch.long, device=device)
        ctx = model.context_length
        spans, span = [], min(min_span, ctx)
        while span < ctx:
            spans.append(span)
            span *= 2
        self.spans = spans + [ctx]
        self.batch_sizes = batch_sizes(model.slots)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        # batched: per row count, one int64 [3, size] of tokens, positions and slots (one copy
        # to the device a step); per (size, span), the graph and its logits, or None where
        # capturing failed (that batch shape stays eager)
        self._rows: dict[int, torch.Tensor] = {}
        self._batch_graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor] | None] = {}
        self._pool = None

    def capture(self) -> float:
        """Capture every span; returns the seconds it took. Writes scratch cache entries
        at position 0, so call it before the first prefill."""
        started = time.perf_counter()
        with torch.inference_mode():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up (lazy inits, cuBLAS handles) off-capture
                for span in self.spans:
                    static_decode_step(self.model, self.token, self.pos, span)
            torch.cuda.current_stream().wait_stream(side)
            # Largest first, so later captures fit in the pool the first one sized.
            for span in reversed(self.spans):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._pool):
                    logits = static_decode_step(self.model, self.token, self.pos, span)
                self._pool = graph.pool()
                self._graphs[span] = (graph, logits)
        torch.cuda.synchronize()
        return time.perf_counter() - started

    def span_for(self, pos: int) -> int:
        """The span a token at `pos` attends over: the smallest bucket above it."""
        return next(s for s in self.spans if s > pos)

    def __call__(self, token: int, pos: int) -> torch.Tensor:
        """Logits [vocab] on the device; valid until the next call."""
        span = self.span_for(pos)
        self.token.fill_(token)
        self.pos.fill_(pos)
        graph, logits = self._graphs[span]
        graph.replay()
        return logits

    def takes(self, rows: int) -> bool:
        """Whether `batch` takes a batch of this many rows (at most the largest size)."""
        return bool(self.batch_sizes) and 1 <= rows <= self.batch_sizes[-1]

    def batch(self, tokens, positions, slots) -> torch.Tensor:
        """Logits [b, vocab] on the device for b sequences (b <= the slot count), each in its
        own slot; valid until the next call. The caller has checked the batch (check_batch)."""
        b = len(tokens)
        size = next(s for s in self.batch_sizes if s >= b)
        span = self.span_for(max(int(p) for p in positions))
        io = self._rows.get(size)
        if io is None:
            io = self._rows[size] = torch.zeros((3, size), dtype=torch.long, device=self.token.device)
        io.copy_(torch.tensor(padded_rows(tokens, positions, slots, size), dtype=torch.long))
        key = (size, span)
        if key in self._batch_graphs:
            entry = self._batch_graphs[key]
            if entry is not None:
                entry[0].replay()
                return entry[1][:b]
            return self._batch_step(io, span)[:b]
        logits = self._batch_step(io, span)  # this step's answer, and the kernels compiled for the capture
        self._batch_graphs[key] = self._capture_batch(io, span)
        return logits[:b]

    def _batch_step(self, io: torch.Tensor, span: int) -> torch.Tensor:
        return static_batch_step(self.model, io[0].view(-1, 1), io[1], io[2], span)

    def _capture_batch(self, io: torch.Tensor, span: int):
        """A graph of the batched step for io's row count at `span`, in the shared pool; None
        (the shape stays eager, with a warning) where capturing fails, e.g. for memory."""
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                logits = self._batch_step(io, span)
            if self._pool is None:
                self._pool = graph.pool()
            return graph, logits
        except Exception as exc:  # eager still answers; the reason is logged
            log.warning("could not capture the batched decode step (%d rows, span %d); it runs eagerly: %s",
                        io.shape[1], span, exc)
            return None
