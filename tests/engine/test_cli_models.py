"""`wren models` list / import / pull / rm / info, in-process, with pulls from a fake hub on
127.0.0.1; one slow test interrupts a real `wren models pull` process with Ctrl+C."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakehub import FakeHub, use_fake_hub
from wren.engine.modelhub.sizing import OVERHEAD_BYTES, estimate_ram
from wren.engine.terminal.main import main

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/tiny-GGUF"
FILE = "tiny-llama.Q8_0.gguf"


def _gguf_kit():
    """The tiny-GGUF writer the model-hub tests use (loaded by path: its conftest is not ours)."""
    path = REPO_ROOT / "tests" / "engine" / "modelhub" / "conftest.py"
    name = "_wren_modelhub_gguf_kit"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look themselves up there
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    kit = _gguf_kit()
    spec = kit.TinySpec(hidden=256, heads=4, kv_heads=2, ffn=512, layers=2)
    path = tmp_path_factory.mktemp("gguf") / FILE
    return kit.write_gguf(path, spec, kit.hf_weights(spec), kit.Q.Q8_0)


@pytest.fixture
def no_starter(monkeypatch):
    from wren.engine.modelhub.registry import ModelRegistry

    monkeypatch.setattr(ModelRegistry, "ensure_starter", lambda self, progress=None: None)


@pytest.fixture
def hub(monkeypatch, tmp_path, tiny_gguf):
    with FakeHub() as server:
        use_fake_hub(server, monkeypatch, tmp_path / "hf-home")
        server.add_file(REPO, FILE, tiny_gguf.read_bytes())
        yield server


def listed(capsys) -> list[dict]:
    assert main(["models", "list", "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_import_info_and_rm(wren_home, tiny_gguf, no_starter, capsys, monkeypatch):
    assert main(["models", "import", str(tiny_gguf), "--name", "tiny"]) == 0
    captured = capsys.readouterr()
    assert "Installed tiny (llama, Q8_0" in captured.out
    assert "Importing [" in captured.err and "100.0%" in captured.err
    assert [m["name"] for m in listed(capsys)] == ["tiny"]

    assert main(["models", "info", "tiny", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    folder = wren_home / "models" / "tiny"
    assert info["name"] == "tiny" and info["architecture"] == "llama" and info["quantization"] == "Q8_0"
    assert info["context_length"] == 256 and info["parameters"] > 0
    assert info["size_bytes"] == sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    weights = (folder / "model.gguf").stat().st_size
    assert weights == tiny_gguf.stat().st_size
    kv_per_token = 2 * 2 * 2 * 64 * 4  # K and V x 2 layers x 2 KV heads x head size 64 x float32
    assert info["ram_bytes"] == {"4096": weights + kv_per_token * 4096 + OVERHEAD_BYTES,
                                 "32768": weights + kv_per_token * 32768 + OVERHEAD_BYTES}
    assert main(["models", "info", "tiny"]) == 0
    text = capsys.readouterr().out
    assert "RAM at 32k" in text and "beyond its 256-token limit" in text

    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # not a terminal: --yes is needed
    assert main(["models", "rm", "tiny"]) == 2
    assert "needs --yes" in capsys.readouterr().err
    assert [m["name"] for m in listed(capsys)] == ["tiny"]
    assert main(["models", "rm", "tiny", "--yes"]) == 0
    assert "Removed tiny" in capsys.readouterr().out
    assert listed(capsys) == []
    assert main(["models", "info", "tiny"]) == 2
    assert "no model named 'tiny'" in capsys.readouterr().err


def test_import_of_a_folder_registers_it_in_place(wren_home, tiny_model_dir, no_starter, capsys):
    assert main(["models", "import", str(tiny_model_dir), "--name", "hf-tiny"]) == 0
    assert "Installed hf-tiny" in capsys.readouterr().out
    (row,) = listed(capsys)
    assert row["name"] == "hf-tiny" and row["path"] == str(tiny_model_dir.resolve())
    assert main(["models", "--json"]) == 0  # plain `wren models` lists too
    assert json.loads(capsys.readouterr().out)["name"] == "hf-tiny"


def test_a_small_model_s_size_reads_in_kilobytes_not_0_mb(wren_home, tiny_model_dir, no_starter, capsys):
    from wren.engine.modelhub.sizing import human_size

    assert main(["models", "import", str(tiny_model_dir), "--name", "tiny"]) == 0
    installed = capsys.readouterr().out
    (row,) = listed(capsys)
    size = human_size(row["size_bytes"])
    assert f", {size})" in installed, installed
    assert row["size_bytes"] < 1_000_000 and size.endswith(" KB"), (row["size_bytes"], size)
    assert main(["models", "list"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert f" {size} " in line and " 0 MB" not in line, line
    assert main(["models", "info", "tiny"]) == 0
    (on_disk,) = [line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("on disk")]
    assert on_disk.endswith(f" {size}"), on_disk


def test_import_of_a_missing_file_is_one_clear_line(wren_home, capsys, tmp_path):
    assert main(["models", "import", str(tmp_path / "nope.gguf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wren: ") and "nope.gguf does not exist" in err and err.count("\n") == 1


def test_pull_from_the_hub(wren_home, hub, no_starter, capsys, tiny_gguf):
    assert main(["models", "pull", REPO, "--quant", "q8_0", "--name", "pulled"]) == 0
    captured = capsys.readouterr()
    assert "Installed pulled (llama, Q8_0" in captured.out
    assert f"Pulling {REPO}:{FILE}" in captured.err
    assert "100.0%" in captured.err and f"{tiny_gguf.stat().st_size / 1e6:.1f} MB" in captured.err
    (row,) = listed(capsys)
    assert row["name"] == "pulled"
    assert (Path(row["path"]) / "model.gguf").read_bytes() == tiny_gguf.read_bytes()


def test_pull_errors_are_one_clear_line(wren_home, hub, capsys):
    assert main(["models", "pull", REPO, "--quant", "Q5_K_M"]) == 2
    err = capsys.readouterr().err
    assert err == f"wren: {REPO} has no Q5_K_M GGUF; its quantizations: Q8_0\n"
    assert main(["models", "pull", "acme/nothing-here"]) == 2
    assert "no model acme/nothing-here" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_stops_a_pull_which_the_next_pull_resumes(wren_home, hub, tmp_path):
    # big enough for several of the 1 MB chunks Wren downloads in, past the 4 MB header check
    kit = _gguf_kit()
    spec = kit.TinySpec(hidden=256, heads=4, kv_heads=2, ffn=1024, layers=4)
    big = kit.write_gguf(tmp_path / "big.gguf", spec, kit.hf_weights(spec), kit.Q.F32)
    hub.add_file(REPO, FILE, big.read_bytes())
    size = big.stat().st_size
    hub.slow(REPO, FILE, chunk=64 << 10, delay=0.02)  # about 5 s for the whole file
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "wren.engine.terminal", "models", "pull", f"{REPO}:{FILE}"]
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    downloads = wren_home / "models" / ".downloads"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        parts = list(downloads.glob("*/*.part"))
        if parts and parts[0].stat().st_size > size // 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "cancelled" in err and "resumes" in err
    (part,) = downloads.glob("*/*.part")
    kept = part.stat().st_size
    assert 0 < kept < size

    hub.slow(REPO, FILE, chunk=1 << 20, delay=0)
    assert main(["models", "pull", f"{REPO}:{FILE}"]) == 0  # in-process this time: a fresh start costs seconds
    resumed = [r for r in hub.downloads(FILE) if r.range == f"bytes={kept}-"]
    assert resumed and resumed[-1].body_bytes == size - kept
    model = wren_home / "models" / "tiny-llama.q8_0" / "model.gguf"
    assert model.read_bytes() == big.read_bytes()


def test_estimate_ram_reads_the_shape_from_config(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896}))
    (folder / "model.safetensors").write_bytes(bytes(1000))
    (folder / "tokenizer.json").write_text("{}")  # not weights
    kv = 2 * 24 * 2 * 64 * 4  # head size 896 / 14 = 64
    assert estimate_ram(folder, 4096) == 1000 + kv * 4096 + OVERHEAD_BYTES
    (folder / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 128, "hidden_size": 512}))
    (folder / "model.gguf").write_bytes(bytes(5000))  # a GGUF folder: the GGUF is the weights
    assert estimate_ram(folder, 100) == 5000 + 2 * 2 * 8 * 128 * 100 * 4 + OVERHEAD_BYTES


def test_progress_bar_shows_percent_megabytes_and_speed(capsys):
    from wren.engine.terminal.main import _ProgressBar

    clock = iter([10.0, 10.05, 11.0, 12.0])
    bar = _ProgressBar("Downloading")
    bar._clock = lambda: next(clock)
    bar(1_000_000, 5_000_000)  # resumed: 1 MB was there already, so speed counts from here
    bar(1_200_000, 5_000_000)  # within 0.1 s of the last draw: skipped
    bar(3_000_000, 5_000_000)
    bar(5_000_000, 5_000_000)
    bar.finish()
    draws = capsys.readouterr().err.split("\r")[1:]
    assert len(draws) == 3
    assert " 20.0%  1.0/5.0 MB" in draws[0] and "MB/s" not in draws[0]
    assert " 60.0%  3.0/5.0 MB     2.0 MB/s" in draws[1]
    assert "100.0%  5.0/5.0 MB     2.0 MB/s\n" in draws[2]
