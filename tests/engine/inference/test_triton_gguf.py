"""The GPU kernels for GGUF blocks (quant/triton_gguf.py), checked on the CPU in Triton's
interpreter mode: every type against the exact dequantization reference (triton_cases.py says
what and how closely), in a child pytest started with TRITON_INTERPRET=1 (interpreter mode must
be on before triton is first imported, and this process may have imported it already); and the
prepared GPU check, bench/device/kernels_check.py, in its --tiny CPU form.

Skipped where triton is not installed; the test extra (pyproject.toml) pins it, so `make test`
installs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed (the test extra brings it: pip install -e '.[test]')")

ROOT = Path(__file__).resolve().parents[3]
TYPES = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}


def _interpreted(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_every_kernel_matches_the_reference_in_the_interpreter():
    cases = "tests/engine/inference/triton_cases.py"
    out = _interpreted(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", cases], timeout=600)
    tail = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    assert " passed" in out.stdout and "skipped" not in out.stdout.splitlines()[-1], tail


def test_kernels_check_runs_tiny_on_the_cpu():
    """bench/device/kernels_check.py, the GPU check the lead runs, in its --tiny CPU form."""
    out = _interpreted([str(ROOT / "bench/device/kernels_check.py"), "--tiny"], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["device"] == "cpu" and set(report["exact"]) == TYPES
    assert all(report["exact"].values()), report["exact"]
    assert report["products"] and all(r["ok"] for r in report["products"]), report["products"]
    assert report["matvec"] and all(t["us"] > 0 for t in report["matvec"])
    rows = report["matvec_variants"]
    assert {(row["type"], row["m"]) for row in rows} == {("Q4_K", 1), ("Q4_K", 2), ("Q6_K", 1), ("Q6_K", 2)}, rows
    variants = [v for row in rows for v in row.values() if isinstance(v, dict)]
    assert len(variants) == 8 and all(v["ok"] and v["us"] > 0 for v in variants), rows
