"""Fast one-token decode steps for the llama model: compiled blocks on CPU, CUDA graphs on GPU.

A decoded token costs a few hundred small ops; in eager PyTorch their dispatch overhead
rivals the memory traffic the token really needs. On a CPU, torch.compile fuses each
block's elementwise work into a few C++ loops; one compiled graph serves every layer (the
weights and caches are graph inputs) and the position (for a batched step: the row count
and the key span) is symbolic, so a model needs a few graphs, not one per token or
position. They are compiled ahead of time, so a call skips Dynamo's per-call checks, and
saved (engine.inference.models.precompile), so later starts load them. On CUDA the
whole step is captured into CUDA graphs instead (cuda_graphs.py).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import torch

from ..priority import set_this_thread_nice
from ..quant.modules import layer_signature
from .batched import batch_block
from .llama import Transformer, _zeros_on_demand

log = logging.getLogger(__name__)

COMPILE_NICE = 10  # the background compile thread: below the inference thread (priority.py)

# Dynamo specialises the int values 0 and 1; decoding there (after a one-token prompt)
# would compile a second graph, so those positions run eagerly.
_FIRST_COMPILED_POS = 2
# A compiled block's element-wise loops (a norm over 2,048 values, SiLU over 8,192) run on
# one thread: split between threads, each would cost a fork and a barrier (~7 a layer
# besides the linears' 4) for microseconds of work, and on a busy machine every barrier
# waits for whichever thread is off its core. Loops with more work per thread than this
# many elements are still split: the attention over the cache, which inductor sizes at
# the position the graph is traced at, so it is traced at _TRACE_POSITION (or the
# domain's end, if smaller), not at its first position.
_SERIAL_ELEMENTS = 16384
_TRACE_POSITION = 512


def compile_cpu_decode(model: Transformer, cache_dir: Path | None = None,
                       on_ready: Callable[[], None] | None = None,
                       in_subprocess: bool = False,
                       cancelled: threading.Event | None = None) -> float | None:
    """Compile the decode block and route `model.decode_block` through it once it works (call
    it on the thread that loads the model or on a background thread, never on a GUI
    thread). Graphs compiled before for the same model shapes load from `cache_dir`
    (seconds, no tracing); otherwise they compile, in a child process with
    `in_subprocess` (the compiler's Python work then never holds this process's
    interpreter, so a window in it stays smooth) or on scratch copies of the layers'
    caches here, so the model may decode eagerly on another thread meanwhile. Returns the
    seconds it took, or None when compiling failed and decoding stays eager. `on_ready`
    runs whenever compiled graphs are installed: first the earliest ones (later ranges, or
    the batched steps, may still be compiling), then again when the full set replaces
    them. Setting `cancelled` stops a compiling child process (the model was closed)."""
    from . import precompile

    if model.context_length <= _FIRST_COMPILED_POS + 1:
        return None  # nothing would ever run compiled
    if any(device.type != "cpu" for _, _, device, _ in model.stages.runs):
        return None  # the compiled blocks are CPU code; a GPU's layers would not run there
    if model.args.num_experts:
        return None  # a mixture's routing is data-dependent: its blocks run eagerly (models.experts)
    if cache_dir is not None:
        _use_cache_dir(cache_dir)
    started = time.perf_counter()
    try:
        step = CompiledBlocks(model)
        store = precompile.Store(cache_dir, model) if cache_dir is not None else None
        with torch.inference_mode(), _no_full_collections():
            if store is not None and store.load_into(step, cancelled=cancelled):
                step.from_disk = True
            elif store is not None and in_subprocess and precompile.can_spawn():
                def first_graphs(directory: Path) -> None:
                    # The one-sequence graphs, saved before the child compiles the batched
                    # ones: decoding goes compiled that much sooner.
                    early = CompiledBlocks(model)
                    if store.load_into(early, directory, cancelled):
                        _install(model, early, on_ready)

                if not store.compile_in_subprocess(cancelled, first_graphs):
                    return None  # cancelled
                if not store.load_into(step, cancelled=cancelled):
                    if cancelled is not None and cancelled.is_set():
                        return None
                    raise RuntimeError("the graphs compiled in a child process did not load")
            else:
                step.build(on_first=lambda: _install(model, step, on_ready))
                if store is not None:
                    store.save(step)
    except Exception as exc:  # no C++ compiler, an unsupported op: eager still works
        if model.decode_block is None:
            log.warning("torch.compile of the decode step failed; decoding eagerly: %s", exc)
            return None
        # The first positions compiled; the ones a later graph would have served stay eager.
        log.warning("compiling the decode step for later positions failed; they decode eagerly: %s", exc)
        return time.perf_counter() - started
    _install(model, step, on_ready)
    return time.perf_counter() - started


def _install(model: Transformer, step: CompiledBlocks, on_ready) -> None:
    if model.decode_block is not step:
        model.decode_block = step
        model.batch_block = step.batch
        if on_ready is not None:
            on_ready()


class CompiledBlocks:
    """Decoder blocks compiled ahead of time for one-token steps, called without Dynamo.

    A torch.compile'd function pays Dynamo's frame hook and guard evaluation on every call,
    ~50 us; a token calls the block once per layer, so that was ~1.5 ms of a ~10 ms token
    on the starter model. Instead each block shape is compiled ahead of time
    (`aot_compile`), and the inputs its guards accept are checked once, one by one, where
    it compiles; at decode time a call is a range lookup and the compiled graph. One
    graph serves every layer of a shape (weights and caches are inputs) over a range:
    of positions for the one-sequence step, of key spans for each row count of the
    batched step (engine.inference.models.batched). Where the compiler specialised (the
    starter model: a reduction past 4,096 keys) the next range gets a graph of its own;
    anything no graph covers runs eagerly.

    A graph's cells are (rows, first, last): rows 1 is the one-sequence step over
    positions first..last, rows B > 1 the batched step of B sequences over key spans
    first..last."""

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.groups = _layers_by_shape(model)
        # Each group's layers as every KV slot sees them: a one-sequence graph serves them
        # all; the batched step reads every slot through the model's own layers.
        index = {id(layer): i for i, layer in enumerate(model.layers)}
        views = [model.layers_for(slot) for slot in range(model.slots)]
        self._members = [[view[index[id(layer)]] for view in views for layer in layers] for layers in self.groups]
        # (id(layer), rows) -> [(first, last, compiled)], in increasing order. Appended to
        # by the compiling thread while the decoding thread reads: each list only grows.
        self._cells: dict[tuple[int, int], list[tuple[int, int, Callable]]] = {}
        # (group index, cells, compiled) for each graph, in the order they were added.
        self.graphs: list[tuple[int, list[tuple[int, int, int]], Callable]] = []
        self.from_disk = False

    def __call__(self, layer, h, cos, sin, start: int):
        if h.shape[1] == 1:
            for first, last, compiled in self._cells.get((id(layer), 1), ()):
                if first <= start <= last:
                    return compiled(layer, h, cos, sin, start)
        return layer(h, cos, sin, start)

    def batch(self, layer, h, cos, sin, pos, slot_ids, rows, key_pos):
        """`batched.batch_block` through a compiled graph where one covers B and the span."""
        span, batch = key_pos.shape[1], h.shape[0]
        if batch > 1:  # one row: the one-sequence graphs take other inputs
            for first, last, compiled in self._cells.get((id(layer), batch), ()):
                if first <= span <= last:
                    return compiled(layer, h, cos, sin, pos, slot_ids, slot_ids, key_pos)
        return batch_block(layer, h, cos, sin, pos, slot_ids, rows, key_pos)

    def ranges(self, layer, rows: int = 1) -> list[tuple[int, int]]:
        return [(first, last) for first, last, _ in self._cells.get((id(layer), rows), ())]

    def add(self, group: int, cells: list[tuple[int, int, int]], compiled) -> bool:
        """Route the group's layers through `compiled` for `cells`, if its guards accept
        each of them at both ends of every cell (under inference_mode); False if not."""
        model = self.model
        hidden = model.args.hidden_size
        for rows, first, last in cells:
            layers = self._members[group] if rows == 1 else self.groups[group]
            if not all(compiled.guard_check(layer, *_example(model._cos, model._sin, rows, x, hidden))
                       for layer in layers for x in (first, last)):
                return False
        compiled.disable_guard_check()
        for rows, first, last in cells:
            for layer in self._members[group] if rows == 1 else self.groups[group]:
                self._cells.setdefault((id(layer), rows), []).append((first, last, compiled))
        self.graphs.append((group, [(rows, first, last) for rows, first, last in cells], compiled))
        return True

    def reset(self) -> None:
        """Forget every graph (before the step is installed)."""
        self._cells.clear()
        self.graphs.clear()

    def build(self, on_first: Callable[[], None] | None = None) -> None:
        """Compile graphs here until every layer covers positions 2..context-2, and each
        batch size 2..slots spans 2..context-1 (call under inference_mode, as decoding
        runs). Raises when a shape cannot be compiled."""
        model = self.model
        pending = []
        for layers in self.groups:
            scratch = _with_scratch_cache(layers[0])
            pending.append(compile_cells(scratch, model._cos, model._sin, model.slots))
        # First every shape's graph from position 2 (where a chat starts), then the rest.
        for rounds in range(2):
            for group, graphs in enumerate(pending):
                for cells, compiled in graphs:
                    if not self.add(group, cells, compiled):
                        log.warning("layers differ from the block compiled for them; they run eagerly")
                    if rounds == 0:
                        break
            if rounds == 0 and on_first is not None and self.graphs:
                on_first()


def compile_cells(layer, cos: torch.Tensor, sin: torch.Tensor, slots: int, batched: bool | None = None):
    """Compile `layer`'s one-sequence step for positions 2..len(cos)-2, then (with several
    slots) its batched step for 2..slots rows over key spans 2..len(cos)-1, yielding
    (cells, compiled) per graph as each is ready; `batched` False or True compiles only
    the one or the other. `layer` must have caches of its own (scratch ones: they are
    written). Call under inference_mode. Raises when the block cannot be compiled."""
    context = cos.shape[0]
    # The final position (its cache slice ends the cache) and the full span would each
    # need a graph of their own: they run eagerly instead.
    if batched is not True:
        yield from _compile_domain(layer, cos, sin, _run_block, [1], context - 2)
    if slots > 1 and batched is not False:
        yield from _compile_domain(layer, cos, sin, _run_batch_block, list(range(2, slots + 1)), context - 1)


def _compile_domain(layer, cos, sin, fn, row_counts: list[int], end: int):
    hidden = layer.attention_norm.weight.shape[0]
    jit = torch.compile(fn, dynamic=True, fullgraph=True)
    # Dynamo specialises sizes and ints of 0 and 1, so every domain starts at 2.
    next_x = {rows: _FIRST_COMPILED_POS for rows in row_counts}
    while True:
        todo = [rows for rows in row_counts if next_x[rows] <= end]
        if not todo:
            return
        rows0 = todo[0]
        # Traced further on where the graph's guards take its first position there too;
        # else (a graph that specialised) at the first position, as the sweep needs.
        for x in dict.fromkeys((max(next_x[rows0], min(_TRACE_POSITION, end)), next_x[rows0])):
            with _compile_config():
                compiled = jit.aot_compile(((layer, *_example(cos, sin, rows0, x, hidden)), {}))
            if compiled.guard_check(layer, *_example(cos, sin, rows0, next_x[rows0], hidden)):
                break
        cells = _guarded_cells(compiled, layer, cos, sin, todo, next_x, end, hidden)
        if not cells or cells[0][0] != rows0:
            raise RuntimeError(f"the compiled block rejects the input it was compiled for ({rows0} rows "
                               f"at {next_x[rows0]})")
        yield cells, compiled


def _guarded_cells(compiled, layer, cos, sin, todo: list[int], next_x: dict[int, int], end: int,
                   hidden: int) -> list[tuple[int, int, int]]:
    """The (rows, first, last) cells `compiled` accepts from each row count's next position
    on (advancing next_x). The guards are checked input by input (microseconds each): a
    graph used outside its guards could be silently wrong."""
    cells = []
    for rows in todo:
        last = next_x[rows] - 1
        while last < end and compiled.guard_check(layer, *_example(cos, sin, rows, last + 1, hidden)):
            last += 1
        if last >= next_x[rows]:
            cells.append((rows, next_x[rows], last))
            next_x[rows] = last + 1
    return cells


def _hidden(dtype, size: int, device) -> torch.Tensor:
    """A stand-in for the hidden state a decoded token enters a block with."""
    return torch.zeros((1, 1, size), dtype=dtype, device=device)


def _example(cos: torch.Tensor, sin: torch.Tensor, rows: int, x: int, hidden: int) -> tuple:
    """Inputs (after the layer) as decoding passes them: rows 1, the one-token step at
    position x; rows B > 1, the batched step of B sequences whose longest spans x keys."""
    if rows == 1:
        return _hidden(cos.dtype, hidden, cos.device), cos[x : x + 1], sin[x : x + 1], x
    pos = torch.full((rows,), x - 1, dtype=torch.long, device=cos.device)
    slot_ids = torch.arange(rows, device=cos.device)
    h = torch.zeros((rows, 1, hidden), dtype=cos.dtype, device=cos.device)
    key_pos = torch.arange(x, device=cos.device)[None, :]
    return h, cos[pos][:, None], sin[pos][:, None], pos, slot_ids, slot_ids, key_pos


@contextlib.contextmanager
def _compile_config():
    # Floats (eps, scales) as constants: a symbolic float makes the compiler restart its
    # analysis, which ahead-of-time compiling cannot. No input size asserts: the guard
    # sweep already proved every call's shapes, and the asserts cost ~1 ms a token.
    with torch._dynamo.config.patch(specialize_float=True), \
            torch._inductor.config.patch({"size_asserts": False, "cpp.min_chunk_size": _SERIAL_ELEMENTS}):
        yield


QUIET_BEFORE_COMPILE = 1.0  # seconds the model goes unused before a background compile starts


class BackgroundCompile:
    """Loads or compiles (in a child process) the decode graphs on a low-priority thread
    while the model serves requests eagerly; the compiled step takes over from the next
    decoded token once it is ready.

    `cancel()` must run before the model goes: it kills a compiling child and joins the
    thread. A thread still inside torch while the interpreter shuts down aborts the
    process ("terminate called without an active exception", status 134)."""

    def __init__(self, model: Transformer, cache_dir: Path | None = None, *,
                 idle_seconds: Callable[[], float] | None = None) -> None:
        """`idle_seconds()`: how long the model has gone unused; the work starts once that
        reaches QUIET_BEFORE_COMPILE."""
        self.seconds: float | None = None  # the warm-up's duration, once it succeeded
        self.failed = False
        self._done = threading.Event()
        self._cancelled = threading.Event()
        self._idle_seconds = idle_seconds
        self._thread = threading.Thread(target=self._run, args=(model, cache_dir),
                                        name="wren-compile", daemon=True)
        _running.add(self)
        self._thread.start()

    def _run(self, model: Transformer, cache_dir: Path | None) -> None:
        try:
            # the compile competes with the answer being decoded for the same few cores; the
            # C++ compiler processes it starts inherit this
            set_this_thread_nice(COMPILE_NICE)
            if not self._wait_quiet():
                return
            self.seconds = compile_cpu_decode(model, cache_dir, in_subprocess=True,
                                              cancelled=self._cancelled)
            self.failed = self.seconds is None and not self._cancelled.is_set()
        except BaseException:  # reported, never raised into a thread nobody joins
            log.exception("background compile failed")
            self.failed = True
        finally:
            self._done.set()

    def _wait_quiet(self) -> bool:
        """Until the model has been unused QUIET_BEFORE_COMPILE seconds (False: cancelled).
        Loading the saved graphs imports torch's compiler, holding the GIL for seconds: an
        answer decoding meanwhile got its first token ~3 s late instead of 0.3 s."""
        if self._idle_seconds is None:
            return not self._cancelled.is_set()
        while self._idle_seconds() < QUIET_BEFORE_COMPILE:
            if self._cancelled.wait(0.1):
                return False
        return not self._cancelled.is_set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the compile finished (successfully or not)."""
        return self._done.wait(timeout)

    def cancel(self, timeout: float | None = 30.0) -> bool:
        """Stop compiling and wait (up to `timeout` seconds) for the thread to end: a
        compiling child process is killed at once (within 0.2 s), a load of saved graphs
        stops before its next file. True once the thread has ended."""
        self._cancelled.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        ended = not self._thread.is_alive()
        if ended:
            _running.discard(self)
        else:
            log.warning("the background compile did not stop within %s s", timeout)
        return ended


_running: weakref.WeakSet[BackgroundCompile] = weakref.WeakSet()


@atexit.register
def _cancel_running() -> None:
    """The safety net for a model nobody closed: no compile thread is left inside torch
    while the interpreter shuts down."""
    for job in list(_running):
        job.cancel(timeout=10.0)


_gc_lock = threading.Lock()
_gc_holders = 0
_gc_thresholds: tuple[int, int, int] | None = None


@contextlib.contextmanager
def _no_full_collections():
    """Compiling allocates millions of objects, so Python's full (generation 2) garbage
    collections, which scan every object and hold the GIL meanwhile, run often and take
    0.2-0.4 s each with torch's compiler loaded: the window would freeze that long. Young
    generations still collect (the compiler's garbage dies young); afterwards everything
    alive is frozen out of future collections (gc.freeze), so later full collections scan
    only what was allocated since (measured: 338 ms before, under 1 ms after)."""
    global _gc_holders, _gc_thresholds
    with _gc_lock:
        if _gc_holders == 0:
            _gc_thresholds = gc.get_threshold()
            gc.set_threshold(_gc_thresholds[0], _gc_thresholds[1], 2**30)
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_thresholds is not None:
                gc.freeze()
                gc.set_threshold(*_gc_thresholds)


def _layers_by_shape(model: Transformer) -> list[list]:
    """Layers grouped by what a compiled block specialises on: its constants (the sliding
    window, RoPE's width, smollm3's layers without it, granite's scales: Block.compiled_traits)
    and the weight types of its quantized linears (a Q4_K_M file mixes Q4_K and Q6_K layers)."""
    groups: dict[tuple, list] = {}
    for layer in model.layers:
        groups.setdefault((layer.compiled_traits(), layer_signature(layer)), []).append(layer)
    return list(groups.values())


def _with_scratch_cache(layer):
    """A copy of `layer` sharing its weights but writing into zeroed caches of its own
    (every slot's, which the batched step reads, and slot 0's view of them)."""
    attention = layer.attention
    device = attention.k_cache.device  # (a compiling child's skeleton has meta slot tensors)
    k_slots = _zeros_on_demand(tuple(attention.k_slots.shape), attention.k_slots.dtype, device)
    v_slots = _zeros_on_demand(tuple(attention.v_slots.shape), attention.v_slots.dtype, device)
    scratch = layer.with_caches(k_slots[0:1], v_slots[0:1])
    scratch.attention.k_slots, scratch.attention.v_slots = k_slots, v_slots
    return scratch


def _use_cache_dir(path: Path) -> None:
    # Inductor reads the variable on every cache access, but importing torch._dynamo (which
    # building any model on `meta` does) already set it to torch's default under /tmp,
    # which a reboot empties. Replace only that default: a directory the user chose wins.
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current is None or os.path.abspath(current) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)


def _run_block(layer, h, cos, sin, start: int):
    return layer(h, cos, sin, start)


def _run_batch_block(layer, h, cos, sin, pos, slot_ids, rows, key_pos):
    return batch_block(layer, h, cos, sin, pos, slot_ids, rows, key_pos)
