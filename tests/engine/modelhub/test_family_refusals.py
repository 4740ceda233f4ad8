"""A model of a family Wren does not run is refused where it comes in (a model folder, a
GGUF file, a config for the torch model), naming what it is and the families Wren runs,
which come from the registry (engine/inference/families)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGUFWriter

from wren.engine.errors import UnsupportedArchitecture
from wren.engine.inference import families
from wren.engine.inference.models.llama import ModelArgs
from wren.engine.modelhub.gguf_import import check_runnable
from wren.engine.modelhub.registry import inspect_folder


def _supported(message: str, names: tuple[str, ...]) -> bool:
    return ", ".join(names) in message


def _folder(tmp_path, model_type):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"")
    return folder


# (no model_type at all is a config.json that lacks it: tests/engine/modelhub/test_folder_checks.py)
@pytest.mark.parametrize("model_type", ["gemma2", ["qwen2"], {"name": "llama"}])
def test_a_folder_of_another_family_is_refused_by_name(tmp_path, model_type):
    # An unhashable model_type ([..], {..}) raised TypeError before the registry.
    with pytest.raises(UnsupportedArchitecture) as err:
        inspect_folder(_folder(tmp_path, model_type))
    message = str(err.value)
    assert f"holds a {model_type!r} model" in message
    assert _supported(message, families.model_types()), message


def test_a_gguf_of_another_architecture_is_refused_by_name(tmp_path):
    path = tmp_path / "gemma2.gguf"
    writer = GGUFWriter(str(path), "gemma2")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedArchitecture) as err:
        check_runnable(path)
    message = str(err.value)
    assert "is a 'gemma2' model" in message
    assert _supported(message, families.architectures()), message


def test_a_config_of_another_family_is_refused_by_the_torch_model():
    with pytest.raises(UnsupportedArchitecture) as err:
        ModelArgs.from_hf_config({"model_type": "gemma2", "vocab_size": 8})
    assert "'gemma2' is not supported" in str(err.value)
    assert _supported(str(err.value), families.model_types())
