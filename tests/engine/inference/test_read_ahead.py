"""Mapped experts are read ahead into the page cache in the background (models.weights):
the pages of the asked range come in without anything touching them, and only when the
file fits the memory available."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time

import pytest

from wren.engine.inference.models import weights

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="mincore and fadvise are Linux's")


def _resident(mapping: mmap.mmap, start: int, length: int) -> int:
    """How many pages of [start, start + length) of the mapping are in memory (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    pages = (length + page - 1) // page
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(base + start), ctypes.c_size_t(length), vec) != 0:
        pytest.skip(f"mincore failed: errno {ctypes.get_errno()}")
    return sum(v & 1 for v in vec)


@linux_only
def test_read_ahead_brings_the_range_into_memory(tmp_path):
    path = tmp_path / "experts.bin"
    size = 16 << 20
    path.write_bytes(os.urandom(size))
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    start, length = 4 << 20, 8 << 20
    pages = length // mmap.PAGESIZE
    if _resident(mapping, start, length) > pages // 4:
        pytest.skip("the file system keeps the file's pages in memory (the test cannot tell read-ahead)")
    weights.read_ahead(mapping, start + 100, length - 100).join(timeout=30)
    deadline = time.monotonic() + 10
    while _resident(mapping, start, length) < pages and time.monotonic() < deadline:
        time.sleep(0.05)  # the reads were started, not waited for
    assert _resident(mapping, start, length) == pages
    # and only that range: the pages past it were not asked for
    assert _resident(mapping, 14 << 20, 2 << 20) < (2 << 20) // mmap.PAGESIZE
    mapping.close()


def test_read_ahead_only_when_the_file_fits(monkeypatch):
    monkeypatch.setattr(weights, "PREFETCH_EXPERTS", True)
    gib = 1 << 30
    assert weights.prefetch_fits(int(18.6 * gib), available=int(23.5 * gib))
    assert not weights.prefetch_fits(int(18.6 * gib), available=20 * gib)  # 0.8 x 20 = 16 GiB
    monkeypatch.setattr(weights, "PREFETCH_EXPERTS", False)
    assert not weights.prefetch_fits(gib, available=64 * gib)


def test_available_memory_is_told():
    available = weights.available_memory()
    assert 0 < available <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")



def _mapped_in(mapping: mmap.mmap, start: int, length: int) -> int:
    """How many pages of [start, start + length) of the mapping are in this process's page
    tables, without touching them."""
    return _present(ctypes.addressof(ctypes.c_char.from_buffer(mapping)) + start, length)


def _present(address: int, length: int) -> int:
    """How many pages of [address, address + length) are in this process's page tables (bit
    63 of their /proc/self/pagemap entries)."""
    page = mmap.PAGESIZE
    base = address - address % page
    pages = (length + address - base + page - 1) // page
    try:
        with open("/proc/self/pagemap", "rb") as pagemap:
            pagemap.seek(base // page * 8)
            raw = pagemap.read(pages * 8)
    except OSError as exc:
        pytest.skip(f"/proc/self/pagemap cannot be read: {exc}")
    entries = memoryview(raw).cast("Q")
    return sum(1 for entry in entries if entry >> 63)


@linux_only
@pytest.mark.parametrize("map_in", [True, False])
def test_read_ahead_maps_the_pages_in(tmp_path, map_in):
    """Cached is not enough: a page in the page cache but not in the process's page tables
    costs a page fault the first time a token touches it. Mapped in (MADV_POPULATE_READ),
    every page of the range is present and nothing past it; the page cache alone (map_in off,
    the control) leaves the page tables as they were."""
    if weights.MADV_POPULATE_READ is None:
        pytest.skip("no MADV_POPULATE_READ here")
    path = tmp_path / "experts.bin"
    path.write_bytes(os.urandom(16 << 20))
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    if map_in:
        try:  # a kernel before 5.14 declines the advice: nothing to test
            mapping.madvise(weights.MADV_POPULATE_READ, 15 << 20, mmap.PAGESIZE)
        except OSError:
            pytest.skip("this kernel has no MADV_POPULATE_READ")
    start, length = 4 << 20, 8 << 20
    weights.read_ahead(mapping, start, length, map_in=map_in).join(timeout=30)
    present = _mapped_in(mapping, start, length)
    if map_in:
        assert present == length // mmap.PAGESIZE
        assert _mapped_in(mapping, 12 << 20, 2 << 20) == 0  # past the range: not asked for
    else:
        assert present == 0
    mapping.close()

def test_one_thread_reads_a_files_ranges_in_turn(tmp_path):
    """A file's mapped tensors are read ahead by one thread, not one thread each."""
    path = tmp_path / "experts.bin"
    path.write_bytes(bytes(4 << 20))
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    reader = weights.ReadAhead(mapping, map_in=False)
    threads = {reader.add(offset, 1 << 20) for offset in range(0, 4 << 20, 1 << 20)}
    assert len(threads) <= 2  # one, or a second one if the first had finished before the last range came
    assert weights.wait_for_read_ahead(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    later = reader.add(0, 1 << 20)  # a range added once the thread has ended starts another
    assert weights.wait_for_read_ahead(timeout=30) and not later.is_alive()
    mapping.close()



@linux_only
def test_a_mixtures_experts_are_mapped_in_at_load(monkeypatch, tmp_path):
    """Loading a GGUF mixture (the tiny qwen3moe of tests/data) reads its mapped experts ahead
    into the process: once the read-ahead is done, every page of an expert tensor is present."""
    import json
    from pathlib import Path

    from wren.engine.modelhub import ModelRegistry

    if weights.MADV_POPULATE_READ is None or not weights.MAP_EXPERTS:
        pytest.skip("no MADV_POPULATE_READ, or experts are read, not mapped, in this run")
    data = Path(__file__).resolve().parents[2] / "data" / "families" / "qwen3moe" / "model.gguf"
    folder = ModelRegistry(tmp_path).import_gguf(data, "qwen3moe").path
    monkeypatch.setattr(weights, "PREFETCH_EXPERTS", True)
    monkeypatch.setattr(weights, "PREFETCH_MAP_IN", True)
    opened = weights.GGUFWeights(folder / "model.gguf", json.loads((folder / "config.json").read_text()))
    gate = opened.get("model.layers.0.mlp.switch_mlp.gate_proj.weight")
    assert weights.wait_for_read_ahead(timeout=30)
    start, length = gate.raw.data_ptr(), gate.raw.numel()
    spanned = (start + length - 1) // mmap.PAGESIZE - start // mmap.PAGESIZE + 1
    assert _present(start, length) == spanned
    opened.close()
