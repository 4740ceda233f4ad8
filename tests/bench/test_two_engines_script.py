"""bench/two_engines.py on the tiny random-weight model: both modes are measured in one run
and every figure comes out (the speed itself is the benchmark's business, not a test's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_reports_alone_together_and_the_ratio_for_both_modes(tmp_path, tiny_model_dir):
    env = dict(os.environ, WREN_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "two_engines.py"), "--model", str(tiny_model_dir),
                           "--rounds", "1", "--seconds", "1", "--compile", "off", "--max-tokens", "8"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["cpu"]["cores"] == os.cpu_count()
    for mode in ("share_on", "share_off"):
        figures = report[mode]
        assert figures["alone_tps"] > 0 and figures["together_tps"] > 0
        assert len(figures["alone_runs"]) == 1 and len(figures["together_runs"]) == 2
        assert figures["aggregate_ratio"] == pytest.approx(sum(figures["together_runs"]) / figures["alone_runs"][0],
                                                           rel=0.05)
