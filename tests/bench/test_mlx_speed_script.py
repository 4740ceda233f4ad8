"""bench/mlx_speed.py's dry run (--tiny): Wren's MLX backend and mlx-lm's own loop on two tiny
random GGUF models (MLX's quantized layouts, and Q4_K_M's repacked and widened types), on
mlx's CPU device where there is no Metal; a complete JSON report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WREN_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(REPO / "bench" / "mlx_speed.py"), *argv],
                          capture_output=True, text=True, timeout=240, env=env, cwd=REPO)


@pytest.mark.slow
def test_tiny_dry_run_reports_both_loops(tmp_path, tokenizer_gguf):
    out = tmp_path / "mlx.json"
    proc = _run(tmp_path, "--tiny", "--runs", "1", "--tokenizer-from", str(tokenizer_gguf), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report == json.loads(out.read_text())
    import mlx.core as mx

    assert report["machine"]["mlx"] == mx.__version__ and report["machine"]["mlx_device"]
    assert set(report["models"]) == {"tiny-starter", "tiny-q4_k_m"}
    for name, entry in report["models"].items():
        for column in ("wren", "mlx_lm"):
            figures = entry[column]
            assert "error" not in figures, (name, column, figures)
            for key in ("prompt_16", "prompt_64", "decode_b1"):
                assert (figures[key]["tokens_per_s"] or 0) > 0, (name, column, key, figures[key])
            assert figures["first_token_ms"] > 0 and figures["first_token_prompt"] == 32
    assert sum(line.startswith("SUMMARY ") for line in proc.stderr.splitlines()) == 4


def test_a_missing_gguf_is_named(tmp_path):
    proc = _run(tmp_path, "--gguf", str(tmp_path / "nope.gguf"))
    assert proc.returncode == 2
    assert f"--gguf {tmp_path / 'nope.gguf'}: no such file" in proc.stderr
