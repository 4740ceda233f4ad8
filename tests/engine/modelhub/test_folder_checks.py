"""A model folder is checked when it comes in, by the torch loader's own reading of
config.json (ModelArgs.from_hf_config): a folder the model cannot run from is refused with
one message naming every missing file and every missing or invalid field, and nothing is
installed. Real folders (tests/fixtures/tiny.py) and the real `wren models` command."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.tiny import make_tiny_model_dir, tiny_config
from wren.engine.errors import ModelFileError
from wren.engine.inference.models.args import ModelArgs
from wren.engine.modelhub import ModelRegistry

SHAPE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


@pytest.fixture
def registry(tmp_path) -> ModelRegistry:
    return ModelRegistry(tmp_path / "models")


def _with_config(folder, config) -> None:
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


def test_a_config_without_the_model_shape_is_refused_naming_every_field(registry, tmp_path):
    folder = make_tiny_model_dir(tmp_path / "brokencfg")
    _with_config(folder, {"model_type": "llama"})
    with pytest.raises(ModelFileError) as err:
        registry.register_folder(folder)
    message = str(err.value)
    assert str(folder) in message and "llama" in message
    assert all(key in message for key in SHAPE), message
    assert registry.list() == [] and list(registry.root.iterdir()) == []


def test_the_import_refuses_what_the_loader_refuses_in_the_same_words(registry, tmp_path):
    torch_backend = pytest.importorskip("wren.engine.inference.backends.torch")
    folder = make_tiny_model_dir(tmp_path / "brokencfg")
    _with_config(folder, {"model_type": "llama", "vocab_size": 400, "hidden_size": 64})
    with pytest.raises(ModelFileError) as loaded:
        torch_backend.TorchBackend("cpu").load(folder)
    with pytest.raises(ModelFileError) as imported:
        registry.register_folder(folder)
    assert str(loaded.value) in str(imported.value)
    assert "intermediate_size, num_hidden_layers, num_attention_heads" in str(loaded.value)


def test_invalid_values_are_named_with_the_missing_ones(registry, tmp_path):
    folder = make_tiny_model_dir(tmp_path / "odd")
    config = tiny_config("llama", vocab_size=400) | {"vocab_size": "400", "hidden_size": 0, "rms_norm_eps": "small",
                                                     "rope_scaling": [1, 2]}
    del config["num_attention_heads"]
    _with_config(folder, config)
    with pytest.raises(ModelFileError) as err:
        registry.register_folder(folder)
    message = str(err.value)
    for named in ("lacks num_attention_heads", "vocab_size is '400'", "hidden_size is 0", "rms_norm_eps is 'small'",
                  "rope_scaling is [1, 2]"):
        assert named in message, message
    assert registry.list() == []


def test_every_missing_file_is_named_at_once(registry, tmp_path):
    folder = make_tiny_model_dir(tmp_path / "bare")
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (folder / name).unlink()
    with pytest.raises(ModelFileError, match=r"it has no config\.json, tokenizer\.json or \.safetensors weights$"):
        registry.register_folder(folder)
    _with_config(folder, {"model_type": "llama"})
    with pytest.raises(ModelFileError) as err:
        registry.register_folder(folder)
    message = str(err.value)  # the missing files and the config's gaps, in one message
    assert "it has no tokenizer.json or .safetensors weights" in message and "num_hidden_layers" in message
    assert registry.list() == []


@pytest.mark.parametrize(("config", "said"), [
    ([], "config.json holds a list, not the model's settings"),
    ("llama", "config.json holds a string, not the model's settings"),
    ({}, "lacks model_type, vocab_size"),
    (tiny_config("llama", vocab_size=400) | {"model_type": None}, "lacks model_type"),
])
def test_a_config_that_names_no_model_says_what_is_wrong(registry, tmp_path, config, said):
    folder = make_tiny_model_dir(tmp_path / "unnamed")
    _with_config(folder, config)
    with pytest.raises(ModelFileError) as err:
        registry.register_folder(folder)
    assert said in str(err.value) and "None" not in str(err.value), str(err.value)


def test_a_family_s_own_keys_are_named_too():
    config = tiny_config("qwen3", vocab_size=400) | {"model_type": "qwen3_moe"}
    with pytest.raises(ModelFileError, match="qwen3_moe model .* lacks num_experts, num_experts_per_tok, "
                                             "moe_intermediate_size$"):
        ModelArgs.from_hf_config(config)


def test_wren_models_import_refuses_it_and_lists_nothing(tmp_path, capsys, monkeypatch):
    from wren.engine.terminal.main import main

    monkeypatch.setattr(ModelRegistry, "ensure_starter", lambda self, progress=None: None)
    folder = make_tiny_model_dir(tmp_path / "brokencfg")
    _with_config(folder, {"model_type": "llama"})
    assert main(["models", "import", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wren: ") and err.count("\n") == 1 and all(key in err for key in SHAPE), err
    assert main(["models", "list", "--json"]) == 0
    assert capsys.readouterr().out.strip() == ""
    # the folder as it should be still imports
    _with_config(folder, tiny_config("llama", vocab_size=400))
    assert main(["models", "import", str(folder)]) == 0
    assert "Installed brokencfg (llama" in capsys.readouterr().out
