"""`wren models info` of a mixture of experts: total and active parameters (the tiny
qwen3moe that llama.cpp's converter made, tests/data/families/qwen3moe), and the catalog's
MoE entries."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest

from wren.engine.modelhub.catalog import load_catalog
from wren.engine.terminal.main import main

MOE = Path(__file__).resolve().parents[1] / "data" / "families" / "qwen3moe" / "model.gguf"


@pytest.fixture
def no_starter(monkeypatch):
    from wren.engine.modelhub.registry import ModelRegistry

    monkeypatch.setattr(ModelRegistry, "ensure_starter", lambda self, progress=None: None)


def _counts_from_the_file() -> tuple[int, int]:
    """Every tensor's values, and what one token reads: the non-expert tensors whole, 4 of
    the 16 experts of each *_exps tensor."""
    total = active = 0
    for tensor in gguf.GGUFReader(str(MOE)).tensors:
        n = int(tensor.n_elements)
        total += n
        active += n * 4 // 16 if tensor.name.endswith("_exps.weight") else n
    return total, active


def test_info_gives_total_and_active_parameters(wren_home, no_starter, capsys):
    assert main(["models", "import", str(MOE), "--name", "moe"]) == 0
    capsys.readouterr()
    assert main(["models", "info", "moe", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    total, active = _counts_from_the_file()
    assert info["architecture"] == "qwen3_moe"
    assert (info["parameters"], info["active_parameters"]) == (total, active)
    assert active < total / 2
    assert main(["models", "info", "moe"]) == 0
    line = next(row for row in capsys.readouterr().out.splitlines() if row.startswith("parameters"))
    assert line.split(None, 1)[1] == f"{total / 1e6:.1f} M, {active / 1e6:.1f} M active per token"


def test_catalog_offers_the_two_mixtures_with_their_active_parameters():
    entries = {e.id: e for e in load_catalog()}
    qwen, oss = entries["qwen3-30b-a3b"], entries["gpt-oss-20b"]
    assert (qwen.architecture, qwen.quant, oss.architecture, oss.quant) == ("qwen3_moe", "Q4_K_M", "gpt_oss", "MXFP4")
    for entry in (qwen, oss):
        assert 0 < entry.active_parameters < entry.parameters / 4
        assert entry.ram_bytes_4k > entry.size_bytes  # the page's badge compares this with the computer's RAM
    dense = [e for e in entries.values() if e.id not in ("qwen3-30b-a3b", "gpt-oss-20b")]
    assert all(e.active_parameters == 0 for e in dense)  # 0: every parameter is active
