"""bench/serve.py with the scripted backend: every figure comes out, for each variant and
client kind compared in one run, and a variant or client kind it does not know is refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WREN_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(REPO / "bench" / "serve.py"), "--backend", "scripted", *args],
                          capture_output=True, text=True, timeout=240, env=env, cwd=REPO)


@pytest.mark.slow
def test_scripted_run_reports_every_figure_for_each_variant(tmp_path):
    proc = _run(tmp_path, "--delay", "0.002", "--runs", "2", "--tokens", "6", "--clients", "1,2",
                "--variants", "default,h11", "--client-kinds", "raw,httpx")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert set(report["by_variant"]) == {"default+raw", "default+httpx", "h11+raw", "h11+httpx"}
    # the lean client reads the same stream as httpx: as many chunks in each answer
    chunks = {name: entry["chunks_per_answer"] for name, entry in report["by_variant"].items()}
    assert chunks["default+raw"] == chunks["default+httpx"] == chunks["h11+raw"] == chunks["h11+httpx"]
    assert report["variants"]["h11"] == {"http": "h11"}
    for entry in report["by_variant"].values():
        for key in ("ttft_conversation_ms", "ttft_new_chat_ms"):
            ttft = entry[key]
            assert ttft["engine_send"] > 0 and ttft["http"] > 0
            assert ttft["added_ms"] == pytest.approx(ttft["http"] - ttft["engine_send"], abs=1e-3)
        for clients in ("1", "2"):
            row = entry["concurrent_clients"][clients]
            assert row["in_process_tok_s"] > 0 and row["http_tok_s"] > 0
            assert row["http_vs_in_process"] == pytest.approx(row["http_tok_s"] / row["in_process_tok_s"], abs=1e-3)
            assert row["http_vs_in_process_median_of_pairs"] > 0
        assert entry["chunks_per_answer"] >= 2  # the scripted answer streams several chunks
        cpu = entry["concurrent_clients"]["1"]["loop_cpu_ms_per_token"]
        assert cpu["in_process"] > 0 and cpu["http"] > 0
        assert 0 < entry["concurrent_clients"]["1"]["client_cpu_share_of_one_core"] < 2


def test_an_unknown_variant_is_refused(tmp_path):
    proc = _run(tmp_path, "--variants", "default,turbo")
    assert proc.returncode == 2
    assert "unknown variant(s) turbo" in proc.stderr and "no-coalesce" in proc.stderr


def test_an_unknown_client_kind_is_refused(tmp_path):
    proc = _run(tmp_path, "--client-kinds", "raw,curl")
    assert proc.returncode == 2
    assert "--client-kinds: choose from raw, httpx" in proc.stderr
