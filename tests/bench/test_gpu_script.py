"""bench/gpu.py's dry run (--device cpu --tiny) goes through every section a GPU run does
(bar the CUDA-graph capture itself) and leaves a complete JSON report, also in --out."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cpu_dry_run_reports_every_figure(tmp_path):
    out = tmp_path / "gpu.json"
    env = dict(os.environ, WREN_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu.py"), "--device", "cpu", "--tiny", "--runs", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=240, env=env, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report == json.loads(out.read_text())  # --out holds the final report too
    assert report["complete"] is True
    assert report["copy_bandwidth_gb_per_s"] > 0
    # The partial lines came as it went, so a run cut short still leaves figures.
    partial = [line for line in proc.stderr.splitlines() if line.startswith("PARTIAL ")]
    assert len(partial) > 10
    json.loads(partial[0].removeprefix("PARTIAL "))

    for name in ("starter", "llama-1b"):
        section = report[name]
        bound = section["bound"]
        assert bound["weight_bytes"] > 0 and bound["kv_bytes_per_position"] > 0
        # Batch 8 reads the weights once for 8 tokens: its bound is higher.
        assert bound["decode_b8_tokens_per_s"] > bound["decode_b1_tokens_per_s"] > 0
        # Weights counted once, the tied head's table with them: bf16 bytes of the matrices
        # (`parameters`) and of the norms (two per layer and the final one).
        shape = section["shape"]
        norms = (2 * shape["num_hidden_layers"] + 1) * shape["hidden_size"]
        assert bound["weight_bytes"] == 2 * (section["parameters"] + norms)
        for column in ("wren_eager", "transformers"):
            figures = section[column]
            for key in ("prompt_16", "prompt_64", "decode_b1", "decode_b8"):
                assert (figures[key]["tokens_per_s"] or 0) > 0, (name, column, key, figures[key])
            for key in ("decode_b1", "decode_b8"):
                assert 0 < figures[key]["fraction_of_bound"] < 1, (name, column, key)
        assert section["wren_cuda_graphs"].startswith("skipped: CUDA graphs need a CUDA device")
        # The step the CUDA graphs capture, run eagerly, gives decode's tokens.
        step = section["wren_eager"]["graph_step_vs_eager"]
        assert step["argmax_agrees"] == "8/8"
        assert step["max_relative_logit_diff"] < 0.05
        # The step the batched graphs capture, padded as a replay pads, gives each row's tokens.
        batch = section["wren_eager"]["batch_graph_vs_eager"]
        assert batch["argmax_agrees"] == "72/72" and batch["graph_sizes"] == [2, 4, 8], batch
        assert batch["max_relative_logit_diff"] < 0.05 and batch["replayed"] is False
    kernels = report["torch_weight_only_kernels"]
    for fmt in ("bf16", "int8", "int4"):
        assert kernels[fmt]["matmul_ms_per_token"] > 0, kernels
    # int8 and int4 read about 1/2 and 1/4 of bf16's bytes (plus their scales)
    assert kernels["int4"]["weight_bytes"] < kernels["int8"]["weight_bytes"] < kernels["bf16"]["weight_bytes"]
    assert report["target"]["best_fraction"] == report["llama-1b"]["wren_eager"]["decode_b1"]["fraction_of_bound"]
    assert report["target"]["met"] is None  # a dry run says nothing of a GPU


def _load_gpu_script():
    spec = importlib.util.spec_from_file_location("wren_bench_gpu", REPO / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("argv", "message"), [
    (["--models", "starter,gpt5"], "unknown model 'gpt5'"),
    (["--context", "32"], "--context 32 is shorter than the longest run (64 positions)"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    gpu = _load_gpu_script()
    with pytest.raises(SystemExit) as exc:
        gpu.main(["--device", "cpu", "--tiny", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_without_transformers_the_column_says_so(monkeypatch, tmp_path):
    gpu = _load_gpu_script()
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    report = gpu.Report(None, {})
    gpu.measure_hf("starter", tmp_path, None, report, gpu.Budget(60, {"starter": 1.0}), None)
    assert report.data["starter"]["transformers"].startswith("skipped: transformers is not installed")


def test_a_spent_budget_skips_sections_and_still_reports(tmp_path, capsys):
    gpu = _load_gpu_script()
    report = gpu.main(["--device", "cpu", "--tiny", "--budget-s", "0", "--out", str(tmp_path / "g.json")])
    assert report["complete"] is True
    assert report["starter"]["skipped"] == report["llama-1b"]["skipped"] == "the run's time budget is spent"
    assert report["torch_weight_only_kernels"] == "skipped: the run's time budget is spent"
    assert report["target"] == {"check": "batch-1 llama-1b bf16 decode >= 50% of the bandwidth bound",
                                "best_fraction": None, "met": None}
    assert json.loads(capsys.readouterr().out) == report
