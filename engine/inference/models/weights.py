"""Where a model's tensors come from: its GGUF file or its safetensors files, by HF name.

`get(name)` returns a 2-D weight as a `QTensor` (the file's own bytes, docs/weights.md)
and a 1-D tensor (norms, biases) as float32. Tensors are read into process memory with
plain file reads, not through a mapping: a mapped page that was read counts as the
process's memory for as long as the mapping lives, which would double what loading costs.
A mixture's 3-D expert tensors are the exception: they stay mapped (WREN_MAP_EXPERTS=0 reads
them too). They are most of such a file (17 of Qwen3-30B-A3B's 18.6 GB) and a token reads
k of E of them, so as the file's clean pages they cost memory only while used, the kernel
drops cold experts under pressure (and reads them back when chosen again), and loading
reads nothing. Measured on a 12-layer Qwen3-30B-A3B-shaped file (bench/moe.py,
bench/results/qwen3moe_*): peak RSS 2.1 GiB mapped vs 5.1 read for a 5.0 GB file, load
3.3 s vs 31 s, decode no slower.

A mapped expert is read from the disk the first time a token chooses it, so a model's
first answers would wait on the disk, expert by expert (a 48-layer Qwen3-30B-A3B has 6,144).
Each mapped tensor's pages are therefore read ahead in the background (one thread per
file, so loading still returns at once) when the file fits in the memory available with
room to spare (PREFETCH_SHARE); where it does not, reading ahead would only push out the
pages just read, and experts are read when chosen. Read ahead is madvise WILLNEED: the disk
reads start, into the page cache. WREN_PREFETCH_EXPERTS=map goes on to map the cached pages
into the process (MADV_POPULATE_READ, Linux 5.14), as llama.cpp's MAP_POPULATE does: a
cached page that is not mapped in costs a page fault the first time a token touches it. On
the Linux 6.18 build machine that made no difference (cached file pages come in large folios,
mapped a folio a fault: no faults a token either way) and measured slower in 3 of 4 runs
(bench/moe.py --ways mapped,mapped-in; gpt-oss-20b's shape 6.7/7.9 vs 8.3/8.7 tok/s), so it is
not the default; mapped in, the pages also count in the process's RSS. =0 turns reading
ahead off.
"""

from __future__ import annotations

import ctypes
import mmap
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ... import switches
from ...errors import ModelFileError
from .. import families
from ..quant import ggml
from ..quant.modules import QTensor, dequantize

GGUF_FILE = "model.gguf"
F32 = 0  # GGML type id; float32 weights are used as dense tensors
# safetensors dtypes that stay as they are (GGML type ids)
_SAFETENSORS_TYPES = {torch.float32: F32, torch.float16: 1, torch.bfloat16: 30}
_BIASED_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
# Expert tensors as views of a private mapping of the file, not read into memory (see above).
MAP_EXPERTS = not switches.off("WREN_MAP_EXPERTS")
# Mapped experts read ahead in the background (see above) when the file takes at most this
# share of the memory available at load.
PREFETCH_EXPERTS = not switches.off("WREN_PREFETCH_EXPERTS")
PREFETCH_MAP_IN = switches.setting("WREN_PREFETCH_EXPERTS") == "map"  # after the page cache, into the process's page tables
PREFETCH_SHARE = 0.8
MADV_POPULATE_READ: int | None = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else None)
# A multimodal checkpoint's text model (Gemma 3 4B-27B), under the names of a text-only one
# (transformers 5 and 4 name it differently).
_TEXT_MODEL_PREFIXES = (("model.language_model.", "model."), ("language_model.model.", "model."),
                        ("language_model.lm_head.", "lm_head."))


def open_weights(model_dir: Path, config: dict) -> GGUFWeights | SafetensorsWeights:
    model_dir = Path(model_dir)
    if (model_dir / GGUF_FILE).is_file():
        return GGUFWeights(model_dir / GGUF_FILE, config)
    weights = SafetensorsWeights(model_dir)
    # gemma's norms scale by 1 + weight: the model takes the sum, as a GGUF stores it
    family = families.find_model_type(config.get("model_type"))
    weights.norm_offset = family.norm_offset if family is not None else 0.0
    return weights


class GGUFWeights:
    """The tensors of a model folder's model.gguf under their HF names: F32 ones as dense
    tensors, every other type as a QTensor of the file's blocks."""

    def __init__(self, path: Path, config: dict) -> None:
        from ...modelhub.gguf_file import GGUFFile
        from ...modelhub.gguf_import import plan_tensors

        self.path = path
        with GGUFFile(path) as gguf:
            arch = gguf.metadata.get("general.architecture")
            self._plan = {p.hf_name: p for p in plan_tensors(gguf, str(arch), config)}
        self.names = frozenset(self._plan)
        try:
            self._file = open(path, "rb")
        except OSError as exc:
            raise ModelFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
        self._map: mmap.mmap | None = None
        self._prefetch: bool | None = None  # decided at the first mapped tensor
        self._read_ahead: ReadAhead | None = None

    def close(self) -> None:
        self._file.close()

    def get(self, name: str) -> torch.Tensor | QTensor:
        planned = self._plan.get(name)
        if planned is None:
            return self._missing(name)
        info = planned.source
        if len(info.shape) == 3 and MAP_EXPERTS:
            return self._mapped(info)
        raw = torch.empty(info.n_bytes, dtype=torch.uint8)
        try:
            self._file.seek(info.offset)
            got = self._file.readinto(memoryview(raw.numpy()))
        except OSError as exc:
            raise ModelFileError(f"{self.path}: tensor {info.name} cannot be read: {exc.strerror or exc}") from None
        if got != info.n_bytes:
            raise ModelFileError(f"{self.path} is truncated: tensor {info.name} ends past the end of the file")
        if info.ggml_type == ggml.MXFP4:  # a scale past float32 would give inf/NaN weights: refuse it here
            ggml.check_mxfp4_scales(raw.view(-1, ggml.row_bytes(ggml.MXFP4, info.shape[-1])),
                                    f"{self.path}: tensor {info.name}")
        if len(info.shape) == 1:  # norms and biases: small, used as float32
            return dequantize(raw.view(1, -1), info.ggml_type, info.shape[0]).view(-1)
        if len(info.shape) == 3:  # a mixture's experts, [E, rows, cols]: all rows as one (models.experts)
            experts, rows, cols = info.shape
            return QTensor(raw.view(experts * rows, -1), info.ggml_type, (experts * rows, cols))
        if len(info.shape) != 2:
            raise ModelFileError(f"{self.path}: tensor {info.name} has {len(info.shape)} dimensions, not 2 or 3")
        rows, cols = info.shape
        order = _rope_unpermutation(rows, planned.unpermute_heads, self.path) if planned.unpermute_heads else None
        if info.ggml_type == F32:  # already what a dense layer takes
            weight = raw.view(torch.float32).view(rows, cols)
            return weight if order is None else weight[order].contiguous()
        blocks = QTensor(raw.view(rows, -1), info.ggml_type, (rows, cols))
        return blocks if order is None else blocks.permute_rows(order)

    def _mapped(self, info) -> QTensor:
        """A 3-D tensor as a view of the file's pages (copy-on-write, so never written back;
        the tensors keep the mapping alive after close)."""
        if self._map is None:
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_COPY)
        if info.offset + info.n_bytes > len(self._map):
            raise ModelFileError(f"{self.path} is truncated: tensor {info.name} ends past the end of the file")
        raw = torch.frombuffer(self._map, dtype=torch.uint8, count=info.n_bytes, offset=info.offset)
        if self._prefetch is None:
            self._prefetch = prefetch_fits(self.path.stat().st_size)
        if self._prefetch:
            if self._read_ahead is None:
                self._read_ahead = ReadAhead(self._map, PREFETCH_MAP_IN)
            self._read_ahead.add(info.offset, info.n_bytes)
        if info.ggml_type == ggml.MXFP4:
            ggml.check_mxfp4_scales(raw.view(-1, ggml.row_bytes(ggml.MXFP4, info.shape[-1])),
                                    f"{self.path}: tensor {info.name}")
        experts, rows, cols = info.shape
        return QTensor(raw.view(experts * rows, -1), info.ggml_type, (experts * rows, cols))

    def _missing(self, name: str) -> torch.Tensor:
        # HF builds every attention projection with a bias once one has it (qwen2's q/k/v);
        # a file may leave some out: they are zeros.
        if name.endswith(".bias") and name.split(".")[-2] in _BIASED_PROJECTIONS:
            weight = self._plan.get(name[: -len("bias")] + "weight")
            if weight is not None:
                return torch.zeros(weight.source.shape[0], dtype=torch.float32)
        raise ModelFileError(f"{self.path} has no tensor for {name}")


def prefetch_fits(file_bytes: int, available: int | None = None) -> bool:
    """Whether mapped experts are read ahead: on, and the file within PREFETCH_SHARE of the
    memory available (now, unless given)."""
    if not PREFETCH_EXPERTS or not hasattr(mmap, "MADV_WILLNEED"):
        return False
    if available is None:
        available = available_memory()
    return file_bytes <= PREFETCH_SHARE * available


def available_memory() -> int:
    """Bytes of memory available without swapping: Linux's MemAvailable, else (macOS) the
    physical memory, as the model catalog counts it."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    from ...modelhub.catalog import system_memory_bytes

    return system_memory_bytes()


class ReadAhead:
    """Reads ranges of one mapped file ahead, in order, on one background thread (a daemon:
    nothing waits for it): each range is advised WILLNEED (its disk reads start), then, with
    `map_in`, populated (MADV_POPULATE_READ: its pages mapped into the process, so the first
    token to touch them takes no page fault). A kernel without MADV_POPULATE_READ (before
    5.14) stops at the page cache."""

    def __init__(self, mapping: mmap.mmap, map_in: bool = False) -> None:
        self._mapping = mapping
        self._populate = MADV_POPULATE_READ if map_in else None  # None: stop at the page cache
        self._base = _address(mapping)
        self._ranges: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pending = 0

    def add(self, offset: int, length: int) -> threading.Thread:
        """Queue [offset, offset + length); returns the thread that reads it."""
        start = offset - offset % mmap.ALLOCATIONGRANULARITY  # madvise takes a page-aligned start
        length = min(length + offset - start, len(self._mapping) - start)
        with self._lock:
            self._ranges.put((start, length))
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wren-read-ahead", daemon=True)
                _READING.add(self._thread)
                self._thread.start()
            return self._thread

    def _run(self) -> None:
        while True:
            with self._lock:
                count, self._pending = self._pending, 0
                if not count:  # ends under the lock, so a range added now starts a new thread
                    self._thread = None
                    _READING.discard(threading.current_thread())
                    return
            ranges = [self._ranges.get() for _ in range(count)]
            for start, length in ranges:  # every range's reads started first: the disk works on them together
                self._advise(mmap.MADV_WILLNEED, start, length)
            for start, length in ranges:
                if self._populate is not None and not self._advise(self._populate, start, length):
                    self._populate = None  # declined (an older kernel): the page cache is as far as it goes

    def _advise(self, option: int, start: int, length: int) -> bool:
        if self._mapping.closed:  # the model was unloaded meanwhile
            return False
        if self._base is not None:  # through libc: mmap.madvise holds the GIL for the whole call,
            # and mapping 16 GB in takes seconds the loading thread would wait out
            return _madvise(self._base + start, length, option) == 0
        try:
            self._mapping.madvise(option, start, length)
        except (OSError, ValueError):  # a closed mapping, or a kernel that declines: read when chosen
            return False
        return True


def _address(mapping: mmap.mmap) -> int | None:
    """Where `mapping` starts in this process's memory, or None where that cannot be told (a
    read-only mapping, no libc madvise): then ReadAhead advises through mmap.madvise."""
    if _madvise is None:
        return None
    try:
        pointer = ctypes.c_char.from_buffer(mapping)
    except (TypeError, ValueError):
        return None
    address = ctypes.addressof(pointer)
    del pointer  # the mapping stays closable: its exported buffer is released here
    return address


def _libc_madvise():
    """libc's madvise(address, length, advice) -> 0 or -1; ctypes releases the GIL around it."""
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError, TypeError):  # Windows, or no madvise
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


_madvise = _libc_madvise()


_READING: set[threading.Thread] = set()  # the read-ahead threads running now


def wait_for_read_ahead(timeout: float | None = None) -> bool:
    """Wait for every read-ahead running now to finish (bench/moe.py measures decoding once
    the experts are in memory, as llama.cpp's are when it has loaded); whether they did."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in list(_READING):
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in list(_READING))


def read_ahead(mapping: mmap.mmap, offset: int, length: int, map_in: bool = False) -> threading.Thread:
    """Read [offset, offset + length) of a mapped file ahead from a background thread of its
    own (ReadAhead); returns the thread."""
    return ReadAhead(mapping, map_in).add(offset, length)


def _rope_unpermutation(rows: int, heads: int, path: Path) -> torch.Tensor:
    """The row order that undoes llama.cpp's Q/K permutation: within each head GGUF
    interleaves the two rotary halves row by row; HF's rotate-half keeps each contiguous."""
    if rows % (2 * heads):
        raise ModelFileError(f"{path}: cannot split {rows} rows into {heads} rotary heads")
    return torch.arange(rows).view(heads, rows // heads // 2, 2).transpose(1, 2).reshape(-1)


class SafetensorsWeights:
    """Tensors by HF name from every *.safetensors file in a folder, kept in their stored
    float type: F16 and BF16 matrices as QTensors, the rest as float32 tensors."""

    def __init__(self, model_dir: Path) -> None:
        from safetensors import SafetensorError, safe_open

        # Some repos ship a second copy in another layout (mistral's consolidated.safetensors).
        files = sorted(model_dir.glob("model*.safetensors")) or sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise ModelFileError(f"{model_dir} holds no weights (expected model.gguf or model.safetensors)")
        self._dir = model_dir
        self._where: dict[str, tuple[Path, object]] = {}
        self._stored: dict[str, str] = {}  # a text model's name -> the multimodal file's
        self.norm_offset = 0.0  # added to every norm weight (gemma: open_weights sets it)
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
                for prefix, text_name in _TEXT_MODEL_PREFIXES:
                    if name.startswith(prefix):
                        self._where.setdefault(text_name + name[len(prefix):], (path, handle))
                        self._stored[text_name + name[len(prefix):]] = name
        self.names = frozenset(self._where)

    def close(self) -> None:
        self._where.clear()

    def get(self, name: str) -> torch.Tensor | QTensor:
        if name not in self._where:
            raise ModelFileError(f"{self._dir}: no safetensors file holds tensor {name!r}")
        path, handle = self._where[name]
        try:
            tensor = handle.get_tensor(self._stored.get(name, name))  # type: ignore[attr-defined]
        except Exception as exc:  # safetensors raises bare errors on damaged data
            raise ModelFileError(f"{path}: tensor {name!r} cannot be read: {exc}") from None
        qtype = _SAFETENSORS_TYPES.get(tensor.dtype)
        if self.norm_offset and name.endswith("norm.weight"):
            return tensor.float() + self.norm_offset
        if tensor.dim() != 2 or qtype in (None, F32):
            return tensor.float().clone() if tensor.dtype == torch.float32 else tensor.float()
        # A copy, not a view of the mapped file (see the module docstring).
        raw = tensor.contiguous().view(torch.uint8).clone()
        return QTensor(raw, qtype, tuple(tensor.shape))


def dense(get: Callable[[str], torch.Tensor | QTensor], device: str, dtype: torch.dtype,
          ) -> Callable[[str], torch.Tensor]:
    """`get` with every weight widened to a dense `dtype` tensor on `device` (for CUDA, which
    has no kernels for the block formats yet, and for an explicit re-quantization)."""

    def widened(name: str) -> torch.Tensor:
        value = get(name)
        if isinstance(value, QTensor):
            rows = max(1, (64 << 20) // (4 * value.shape[1]))  # ~64 MB of float32 at a time
            out = torch.empty(value.shape, dtype=dtype, device=device)
            for start in range(0, value.shape[0], rows):
                chunk = value.raw[start : start + rows]
                out[start : start + rows] = dequantize(chunk, value.qtype, value.shape[1]).to(device, dtype)
            return out
        return value.to(device=device, dtype=dtype)

    return widened


def file_weight_bytes(model_dir: Path) -> int:
    """Bytes of weights in a model folder's files."""
    model_dir = Path(model_dir)
    gguf = model_dir / GGUF_FILE
    if gguf.is_file():
        from ...modelhub.gguf_file import GGUFFile

        with GGUFFile(gguf) as f:
            return sum(info.n_bytes for info in f.tensors.values())
    return sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))


__all__ = ["GGUF_FILE", "GGUFWeights", "SafetensorsWeights", "dense", "file_weight_bytes", "open_weights"]
