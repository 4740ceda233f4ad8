"""Weights and other large CPU buffers are advised into transparent huge pages on Linux
(engine/inference/__init__.py): torch's allocator does it when THP_MEM_ALLOC_ENABLE is set
before its first allocation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

pytestmark = pytest.mark.skipif(sys.platform != "linux" or not THP.exists() or "[never]" in THP.read_text(),
                                reason="Linux with transparent huge pages")

PROBE = """
import sys
import wren.engine.inference.backends.torch  # noqa: F401  (what loading a model imports)
import torch

buffer = torch.empty(64 << 20, dtype=torch.uint8)
address = buffer.data_ptr()
with open("/proc/self/smaps") as smaps:
    region = None
    for line in smaps:
        head = line.split()
        if "-" in head[0] and len(head) >= 5:
            start, end = (int(x, 16) for x in head[0].split("-"))
            region = start <= address < end
        elif region and line.startswith("VmFlags:"):
            print("advised" if "hg" in line.split()[1:] else "plain")
            break
"""


def _probe(environ: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_large_buffer_is_advised_into_huge_pages():
    environ = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    assert _probe(environ) == "advised"


def test_the_user_can_turn_it_off():
    assert _probe({**os.environ, "THP_MEM_ALLOC_ENABLE": "0"}) == "plain"


def test_a_resident_engine_counts_wrens_default_as_set(monkeypatch):
    """`wren ask` finds the resident engine by the variables that shape it: unset and Wren's own
    value are the same engine, the user's 0 another."""
    from wren.engine import engine_sockets

    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    unset = engine_sockets._environment_digest()
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    assert engine_sockets._environment_digest() == unset
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    assert engine_sockets._environment_digest() != unset
