"""Compiled decode blocks kept on disk, and compiled in a child process.

Compiling the starter model's decode block takes ~15 s cold and, even from a warm inductor
cache, seconds of tracing whose Python work holds the interpreter in ~0.1-0.2 s bursts: a
window in the same process stutters meanwhile. So the graphs `decode.CompiledBlocks` runs
are saved (torch's `aot_compile` artifacts) under a key of everything they depend on, and
a later start loads them in about a second without tracing. When none are saved, a
child process compiles them from skeleton copies of the blocks (the
shapes, no weights) on idle CPU time only, and saves them for the parent to load.

    <cache>/decode-blocks/<key>/graphs.json     groups, ranges and their files
    <cache>/decode-blocks/<key>/g<group>-<first>.bin
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ... import paths
from ..quant import kernels, linear, modules
from ..quant.modules import layer_signature
from . import attention, batched, decode, llama

log = logging.getLogger(__name__)

# 3: attention moved into engine.inference.models.attention, one implementation for every
# path; graphs traced from the three copies before it are not loaded.
_FORMAT = 3
_CHILD_TIMEOUT_S = 1800


def can_spawn() -> bool:
    """A child interpreter can be started (not inside a frozen app bundle)."""
    return not getattr(sys, "frozen", False) and bool(sys.executable)


class Store:
    """The saved graphs for one loaded model's block shapes."""

    def __init__(self, cache_dir: Path, model: llama.Transformer) -> None:
        self.model = model
        self.groups = decode._layers_by_shape(model)
        self.dir = Path(cache_dir) / "decode-blocks" / _key(model, self.groups)
        _remove_leftovers(self.dir.parent)

    @property
    def partial_dir(self) -> Path:
        """Where a compiling child saves the one-sequence graphs before the batched ones."""
        return self.dir.with_name(self.dir.name + "-partial")

    @property
    def saved(self) -> bool:
        """Graphs for this model are saved (whether they still load is another matter)."""
        return (self.dir / "graphs.json").is_file()

    def load_into(self, step: decode.CompiledBlocks, directory: Path | None = None,
                  cancelled: threading.Event | None = None) -> bool:
        """Add every graph saved in `directory` (by default this model's) to `step` (call
        under inference_mode); False when none are saved or they no longer fit, in which
        case the stale ones are removed, or when `cancelled` is set between two files."""
        directory = directory or self.dir
        index = directory / "graphs.json"
        if not index.is_file():
            return False
        try:
            meta = json.loads(index.read_text())
            if meta.get("format") != _FORMAT or len(meta["groups"]) != len(self.groups):
                raise ValueError("saved for another layout")
            loaded = []
            for group, graphs in enumerate(meta["groups"]):
                for entry in graphs:
                    if cancelled is not None and cancelled.is_set():
                        return False  # the model is closing: the files stay for the next start
                    with open(directory / entry["file"], "rb") as f:
                        compiled = torch.compiler.load_compiled_function(f, f_globals=decode.__dict__)
                    cells = [(int(rows), int(first), int(last)) for rows, first, last in entry["cells"]]
                    loaded.append((group, cells, compiled))
            for graph in loaded:
                if not step.add(*graph):
                    raise ValueError(f"group {graph[0]} no longer passes the guards of its graph")
            os.utime(index)  # used: kept from the pruning of unused graphs
        except Exception as exc:  # unreadable, from another torch, or stale: compile again
            log.warning("saved decode graphs in %s are unusable (%s); compiling them again", directory, exc)
            step.reset()
            shutil.rmtree(directory, ignore_errors=True)
            return False
        return True

    def save(self, step: decode.CompiledBlocks) -> None:
        """Write `step`'s graphs (compiled in this process); failures only cost the next
        start a compile."""
        try:
            _write(self.dir, step.graphs, len(self.groups))
        except Exception as exc:
            log.warning("could not save the compiled decode graphs: %s", exc)

    def write_spec(self, path: Path) -> None:
        """What the compiling child needs: skeleton blocks (shapes, no weights), the RoPE
        tables and where to save."""
        torch.save({
            "layers": [_skeleton(layers[0]) for layers in self.groups],
            "cos": self.model._cos, "sin": self.model._sin,
            "out": str(self.dir), "partial": str(self.partial_dir),
            # The kernels are generated for a thread count (and guarded on it).
            "threads": torch.get_num_threads(),
        }, path)

    def compile_in_subprocess(self, cancelled: threading.Event | None = None,
                              on_partial: Callable[[Path], None] | None = None) -> bool:
        """Compile and save the graphs in a child process; False if `cancelled` was set
        meanwhile (the child is killed), raises if the child fails. `on_partial(directory)`
        runs once the child has saved the one-sequence graphs, before the batched ones."""
        if cancelled is not None and cancelled.is_set():
            return False
        paths.make_dirs(self.dir.parent)
        with tempfile.TemporaryDirectory(dir=self.dir.parent, prefix="spec-") as tmp:
            spec = Path(tmp) / "spec.pt"
            self.write_spec(spec)
            log_path = Path(tmp) / "child.log"
            with open(log_path, "w") as child_log:
                child = subprocess.Popen(child_command(spec), stdin=subprocess.DEVNULL, stdout=child_log,
                                         stderr=subprocess.STDOUT, env=child_env())
                started, cancelled = time.monotonic(), cancelled or threading.Event()
                try:
                    while child.poll() is None:
                        if cancelled.wait(0.2):
                            shutil.rmtree(self.partial_dir, ignore_errors=True)
                            return False
                        if on_partial is not None and (self.partial_dir / "graphs.json").is_file():
                            on_partial(self.partial_dir)
                            on_partial = None
                        if time.monotonic() - started > _CHILD_TIMEOUT_S:
                            raise RuntimeError(f"the compiling child process ran past {_CHILD_TIMEOUT_S} s")
                finally:
                    if child.poll() is None:  # cancelled, timed out, or this thread failed
                        child.kill()
                        child.wait()
            if child.returncode != 0:
                tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise RuntimeError(f"the compiling child process exited with {child.returncode}: {tail[0]}")
        return True


def child_command(spec: Path, parent: int | None = None) -> list[str]:
    """The compiling child's command line for `spec`: it is given its parent's pid (this
    process's, by default) so that it never outlives it (engine.inference.compile_child)."""
    parent = os.getpid() if parent is None else parent
    return [sys.executable, "-m", "wren.engine.inference.compile_child", str(parent), str(spec)]


def child_env() -> dict[str, str]:
    """This environment, with Wren importable from where this process imported it
    (installed or not)."""
    root = str(Path(decode.__file__).resolve().parents[3])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))


def _write(directory: Path, graphs, group_count: int) -> None:
    """Save graphs into a fresh directory and move it into place in one rename, so a
    reader never sees half of them."""
    paths.make_dirs(directory.parent)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix="staging-"))
    try:
        groups: list[list[dict]] = [[] for _ in range(group_count)]
        for group, cells, compiled in graphs:
            name = f"g{group}-{len(groups[group])}.bin"
            compiled.save_compiled_function(str(staging / name))
            groups[group].append({"file": name, "cells": [list(cell) for cell in cells]})
        (staging / "graphs.json").write_text(json.dumps({"format": _FORMAT, "groups": groups}))
        shutil.rmtree(directory, ignore_errors=True)
        try:
            os.replace(staging, directory)
        except OSError:
            if not (directory / "graphs.json").is_file():
                raise
            # Another Wren process saved the same graphs first: theirs serve as well.
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_LEFTOVER_S = 3600
_UNUSED_S = 30 * 86400


def _remove_leftovers(root: Path) -> None:
    """Half-written saves and compile inputs of processes that were killed, and graphs
    no start has loaded for a month (another Wren or torch version, a model since
    removed)."""
    if not root.is_dir():
        return
    now = time.time()
    for entry in root.iterdir():
        try:
            if entry.name.startswith(("staging-", "spec-")) or entry.name.endswith("-partial"):
                stale = now - entry.stat().st_mtime > _LEFTOVER_S
            else:
                stale = now - (entry / "graphs.json").stat().st_mtime > _UNUSED_S
            if stale:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def _key(model: llama.Transformer, groups: list[list]) -> str:
    """Everything a saved graph depends on: torch, Python, the CPU (its kernels use the
    vector instructions found here), the code it traced, and each block's tensor layout."""
    h = hashlib.sha256()
    parts = [str(_FORMAT), torch.__version__, sys.version, platform.machine(), _cpu_flags(),
             str(torch.get_num_threads()),  # the kernels are generated for it
             str(model.context_length), str(model.slots), str(model._cos.dtype),
             f"attend_one={kernels.ATTEND_ONE}"]  # Wren's norm and attention kernels in the graph, or inductor's
    for module in (attention, llama, decode, batched, linear, modules, kernels):
        parts.append(hashlib.sha256(Path(inspect.getfile(module)).read_bytes()).hexdigest())
    for layers in groups:
        parts.append(repr(layers[0].compiled_traits()))
        parts.append(repr(layer_signature(layers[0])))
        for name, mod in layers[0].named_modules():
            parts.append(f"{name}:{type(mod).__qualname__}")
        for name, t in [*layers[0].named_parameters(), *layers[0].named_buffers()]:
            parts.append(f"{name}:{tuple(t.shape)}:{t.stride()}:{t.dtype}")
    h.update("\n".join(parts).encode())
    return h.hexdigest()[:32]


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _skeleton(layer) -> torch.nn.Module:
    """A copy of `layer` on the meta device: its structure and tensor shapes, no data."""
    attention = layer.attention
    shallow = layer.with_caches(torch.empty_like(attention.k_cache, device="meta"),
                                torch.empty_like(attention.v_cache, device="meta"))
    # Plain attributes, not buffers (`.to` would not move them): their shapes, for the
    # scratch caches the child makes.
    shallow.attention.k_slots = torch.empty_like(attention.k_slots, device="meta")
    shallow.attention.v_slots = torch.empty_like(attention.v_slots, device="meta")
    return copy.deepcopy(shallow).to("meta")  # copies the weights (a few MB), then drops them


def _yield_the_cpu() -> None:
    """Run only on otherwise idle CPU time (the C++ compilers started inherit it): while the
    parent decodes an answer, the answer keeps the cores. Linux's SCHED_IDLE does that;
    elsewhere the lowest niceness comes closest."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except OSError:
            pass
    if hasattr(os, "nice"):
        os.nice(19)


def run_child(spec_path: str) -> None:
    """The child process (started through engine.inference.compile_child, which first ties
    its life to the parent's): compile each skeleton block's graphs and save them."""
    _yield_the_cpu()
    spec = torch.load(spec_path, weights_only=False)
    torch.set_num_threads(spec["threads"])
    graphs, partial = [], Path(spec["partial"])
    with torch.inference_mode(), decode._no_full_collections():
        # Inference tensors, as the parent's are: the guards check that too.
        cos, sin = spec["cos"].clone(), spec["sin"].clone()
        layers = [decode._with_scratch_cache(skeleton.to_empty(device=cos.device)) for skeleton in spec["layers"]]
        slots = layers[0].attention.k_slots.shape[0]
        for batched in (False, True):
            for group, layer in enumerate(layers):
                for cells, compiled in decode.compile_cells(layer, cos, sin, slots, batched):
                    graphs.append((group, cells, compiled))
            if not batched and slots > 1:
                _write(partial, graphs, len(layers))
    _write(Path(spec["out"]), graphs, len(layers))
    shutil.rmtree(partial, ignore_errors=True)

