"""bench/random_family.py writes, for every family it knows, a GGUF that Wren imports as
`wren models import` does (the family's tensor names, shapes and Q4_K_M types) and runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from wren.engine.modelhub import ModelRegistry
from wren.engine.modelhub.gguf_file import GGUFFile

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def random_family():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("random_family", REPO / "bench" / "random_family.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["random_family"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("random_family", None)
        sys.path.remove(str(REPO / "bench"))


@pytest.mark.parametrize("family", ["gemma3", "phi3", "granite", "olmo2", "smollm3"])
def test_tiny_file_of_each_family_imports_and_runs(family, random_family, tokenizer_gguf, tmp_path):
    from wren.engine.inference.select import resolve_backend

    path = tmp_path / f"{family}.gguf"
    summary = random_family.write(path, random_family.tiny(family, vocab=512), tokenizer_from=tokenizer_gguf)
    with GGUFFile(path) as gguf:
        assert gguf.metadata["general.architecture"] == family
        types = {gguf.tensors[name].type_name for name in gguf.tensors}
    expected = {"Q4_K", "Q6_K", "F32"} | ({"Q5_K"} if family == "phi3" else set())
    assert types == expected == set(summary["tensors_per_type"]), types
    info = ModelRegistry(tmp_path / "home").import_gguf(path, f"random-{family}")
    logits = np.asarray(resolve_backend("torch").load(info.path, context_length=64).prefill([1, 5, 9, 7], 0))
    assert logits.shape == (512,) and np.isfinite(logits).all() and logits.std() > 0


def test_presets_have_the_real_files_sizes(random_family):
    # Phi-4-mini-instruct Q4_K_M as published: 2.49 GB; Gemma 3 4B's weights 2.48 GB
    for family, preset, low, high in (("phi3", "phi4-mini", 2.40e9, 2.55e9), ("gemma3", "4b", 2.40e9, 2.55e9)):
        planned = random_family.plan(random_family.PRESETS[family][preset])
        total = sum(random_family.make_gguf.tensor_bytes(p) for p in planned)
        assert low < total < high, (family, total)


def test_unknown_preset_is_refused(random_family, tmp_path):
    with pytest.raises(SystemExit, match="granite has no preset 'huge'; choose 2b, 8b"):
        random_family.main([str(tmp_path / "x.gguf"), "--family", "granite", "--preset", "huge"])
