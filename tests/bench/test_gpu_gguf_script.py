"""bench/gpu_gguf.py's dry run (--device cpu --tiny) goes through every section a GPU run does
and leaves a complete report; bench/random_gguf.py writes files of llama-quantize's layout."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# A stand-in for llama.cpp's tools (a real process printing their output formats): the
# bench's plumbing from their output to the report, without building llama.cpp here.
FAKE_LLAMA_BENCH = r"""#!/usr/bin/env python3
import json, sys
a = sys.argv
get = lambda flag: a[a.index(flag) + 1]
rows = []
if get("-n") != "0":
    rows += [{"n_prompt": int(p), "n_gen": 0, "n_depth": 0, "avg_ts": 1000.0 + int(p)} for p in get("-p").split(",")]
    rows.append({"n_prompt": 0, "n_gen": int(get("-n")), "n_depth": 0, "avg_ts": 50.0})
else:
    rows.append({"n_prompt": int(get("-p")), "n_gen": 0, "n_depth": int(get("-d")), "avg_ts": 320.0})
print(json.dumps(rows))
"""
FAKE_BATCHED = r"""#!/usr/bin/env python3
import json
for pl in (1, 8):
    print(json.dumps({"pp": 8, "tg": 8, "pl": pl, "speed_tg": 40.0 * pl}))
"""


def _load(name: str, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))  # undone after the test, with what the module adds
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cpu_dry_run_reports_every_column(tmp_path, tokenizer_gguf):
    tools = tmp_path / "llama-bin"
    tools.mkdir()
    for name, text in (("llama-bench", FAKE_LLAMA_BENCH), ("llama-batched-bench", FAKE_BATCHED)):
        (tools / name).write_text(text.replace("/usr/bin/env python3", sys.executable))
        (tools / name).chmod(0o755)
    out = tmp_path / "gguf.json"
    env = dict(os.environ, WREN_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1", WREN_TORCH_COMPILE="off")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_gguf.py"), "--device", "cpu", "--tiny", "--runs", "1", "--tokens", "4",
         "--prompt-lengths", "8,16", "--history", "16", "--question", "8",
         "--tokenizer-from", str(tokenizer_gguf), "--llama-bench", str(tools), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report == json.loads(out.read_text()) and report["complete"] is True
    assert sum(line.startswith("PARTIAL ") for line in proc.stderr.splitlines()) > 20
    assert sum(line.startswith("SUMMARY ") for line in proc.stderr.splitlines()) == 1 + 3 * 4
    layouts = {"starter": {"Q4_1", "Q8_0", "F32"}, "llama-1b": {"Q4_K", "Q6_K", "F32"},
               "llama-8b": {"Q4_K", "Q6_K", "F32"}}
    for name, types in layouts.items():
        section = report[name]
        assert set(section["file"]["tensors"]) == types, section["file"]
        # the blocks a step reads are a fraction of the same matrices in bf16
        assert 0 < section["bound"]["weight_bytes"] < section["bound_bf16"]["weight_bytes"] / 2
        load = section["wren"]["load"]
        assert load["quant"] == "file" and load["context_length"] >= 36 and load["slots"] == 8
        for column in ("wren", "transformers"):
            figures = section[column]
            for key in ("prompt_8", "prompt_16", "decode_b1", "decode_b8"):
                assert (figures[key]["tokens_per_s"] or 0) > 0, (name, column, key, figures)  # None: lost in noise
            for key in ("decode_b1", "decode_b8"):
                assert 0 < figures[key]["fraction_of_bound"] < 1, (name, column, key)
            first = figures["first_token_after_16"]
            assert first["cold_ms"] > 0 and first["cached_history_ms"] > 0 and first["question"] == 8
        batch = section["wren"]["batch_graph_vs_eager"]
        assert batch["argmax_agrees"] == "72/72" and batch["graph_sizes"] == [2, 4, 8], (name, batch)
        assert batch["max_relative_logit_diff"] < 1e-3 and batch["replayed"] is False
        llama = section["llama.cpp"]
        assert llama["prompt_16"] == {"tokens_per_s": 1016.0}
        assert llama["decode_b1"]["tokens_per_s"] == 50.0
        assert llama["decode_b1"]["fraction_of_bound"] == pytest.approx(50.0 / section["bound"]["decode_b1_tokens_per_s"], rel=0.01)
        assert llama["decode_b8"]["tokens_per_s"] == 320.0
        first = llama["first_token_after_16"]
        assert first["cached_history_ms"] == pytest.approx(1e3 * 8 / 320.0)
        assert first["cold_ms"] == pytest.approx(1e3 * 24 / 1024.0, abs=0.01)  # 24 tokens at 1000 + 24 tokens/s
        assert "prompt_24" not in llama
    target = report["target"]
    assert target["model"] == "llama-8b" and target["met"] is None  # a dry run says nothing of a GPU
    assert target["ratio"] == pytest.approx(report["llama-8b"]["wren"]["decode_b1"]["tokens_per_s"] / 50.0, rel=0.01)


def test_without_llama_cpp_its_column_says_why(tmp_path, monkeypatch):
    others = _load("gpu_others", monkeypatch)
    gpu = _load("gpu", monkeypatch)
    budget = gpu.Budget(60, {"llama.cpp": 1.0})
    log = tmp_path / "build.log"
    log.write_text("[90/143] Building CUDA object ...\nBUILD EXIT 1\n")
    why = others.wait_for_build(tmp_path / "bin", log, budget)
    assert why.startswith(f"no llama-bench at {tmp_path / 'bin' / 'llama-bench'}: the build ended without it")
    assert "BUILD EXIT 1" in why
    assert others.wait_for_build(None, None, budget) == "no --llama-bench folder given"


def test_random_q4_k_m_files_have_llama_quantize_sizes(monkeypatch):
    """Llama-3.2-1B and Llama-3.1-8B Q4_K_M files from llama-quantize hold 0.80 and 4.91 GB
    of tensors (808 MB and 4.92 GB files with their tokenizers)."""
    random_gguf = _load("random_gguf", monkeypatch)
    make_gguf = _load("make_gguf", monkeypatch)
    sizes = {k: sum(make_gguf.tensor_bytes(p) for p in random_gguf.plan(make_gguf.PRESETS[k], "q4_k_m"))
             for k in ("1b", "8b")}
    assert sizes["1b"] == pytest.approx(0.800e9, rel=0.01)
    assert sizes["8b"] == pytest.approx(4.913e9, rel=0.01)
    q6 = [p.name for p in random_gguf.plan(make_gguf.PRESETS["8b"], "q4_k_m") if p.qtype.name == "Q6_K"]
    # output, and attn_v and ffn_down in 16 of the 32 layers (the first and last 4, every
    # third between): 33, as llama-quantize reports for Llama-3.1-8B Q4_K_M
    assert "output.weight" in q6 and len(q6) == 33
