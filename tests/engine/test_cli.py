"""`wren` in-process against the tiny model on the torch backend."""

from __future__ import annotations

import json

import pytest

from wren.engine.terminal.main import main


@pytest.fixture
def tiny_installed(wren_home, tiny_model_dir):
    from wren.engine.modelhub.registry import ModelRegistry

    ModelRegistry(wren_home / "models").register_folder(tiny_model_dir, name="tiny")
    return "tiny"


def test_ask_json_prints_one_typed_object_per_event(tiny_installed, capsys):
    code = main(["ask", "--model", "tiny", "--backend", "torch-cpu", "--seed", "3",
                 "--temperature", "0.9", "--max-tokens", "12", "--json", "hello there"])
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    types = [line["type"] for line in lines]
    assert types[0] == "started" and types[-1] == "finished"
    assert "usage" in types and all("type" in line for line in lines)
    usage = next(line for line in lines if line["type"] == "usage")
    assert usage["completion_tokens"] <= 12


def test_ask_is_reproducible_with_a_seed(tiny_installed, capsys):
    args = ["ask", "--model", "tiny", "--backend", "torch-cpu", "--seed", "7", "--temperature", "1.0",
            "--max-tokens", "16", "same question"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first


def test_conversations_list_show_export(tiny_installed, capsys):
    assert main(["ask", "--model", "tiny", "--max-tokens", "4", "a question to keep"]) == 0
    capsys.readouterr()
    assert main(["conversations", "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["conversations", "show", str(row["id"])]) == 0
    assert "a question to keep" in capsys.readouterr().out
    assert main(["conversations", "export", str(row["id"]), "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["messages"][0]["content"] == "a question to keep"


def test_models_lists_registered_models(tiny_installed, capsys, monkeypatch):
    from wren.engine.modelhub.registry import ModelRegistry

    monkeypatch.setattr(ModelRegistry, "ensure_starter", lambda self, progress=None: None)
    assert main(["models", "--json"]) == 0
    names = [json.loads(line)["name"] for line in capsys.readouterr().out.splitlines()]
    assert "tiny" in names


def test_bad_input_is_a_clear_error(tiny_installed, capsys):
    assert main(["ask", "--model", "no-such-model", "hi"]) == 2
    assert "no-such-model" in capsys.readouterr().err
    assert main(["ask", "--model", "tiny", "--temperature", "-3", "hi"]) == 2
    assert "temperature must be between 0 and 5" in capsys.readouterr().err
    assert main(["ask", "--model", "tiny", "   "]) == 2
    assert "empty" in capsys.readouterr().err
    assert main(["conversations", "show", "12345"]) == 2
    assert "no conversation with id 12345" in capsys.readouterr().err
