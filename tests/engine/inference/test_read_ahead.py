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
