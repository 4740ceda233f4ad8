"""`wren models` lists a provider's model as running remotely, not on this machine's backend."""

from __future__ import annotations

import asyncio
import json

from wren.engine.terminal.main import main


def test_a_remote_model_is_listed_as_remote(make_engine, capsys):
    async def add() -> None:
        engine = make_engine()
        await engine.providers.add("lab", "http://127.0.0.1:9/v1", models=("qwen3-32b",))
        await engine.close()

    asyncio.run(add())
    assert main(["models", "list", "--json"]) == 0
    listed = {m["name"]: m for m in map(json.loads, capsys.readouterr().out.splitlines())}
    assert listed["lab/qwen3-32b"]["backend"] == "remote" and listed["lab/qwen3-32b"]["path"] is None
    assert main(["models"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("lab/qwen3-32b"))
    assert line.endswith("remote (http://127.0.0.1:9/v1)") and "torch" not in line


def test_a_model_that_cannot_load_is_listed_with_why(make_engine, capsys, tmp_path):
    from tests.fixtures.tiny import make_tiny_model_dir

    folder = make_tiny_model_dir(tmp_path / "mine")
    engine = make_engine()
    engine.registry.register_folder(folder, name="mine")
    asyncio.run(engine.close())
    folder.rename(tmp_path / "moved")
    assert main(["models", "list", "--json"]) == 0
    listed = {m["name"]: m for m in map(json.loads, capsys.readouterr().out.splitlines())}
    assert listed["mine"]["problem"] == f"the folder it was added from, {folder}, is gone (moved or deleted)"
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = lines[next(i for i, x in enumerate(lines) if x.startswith("mine ")) + 1]
    assert said.strip() == (f"cannot load: the folder it was added from, {folder}, is gone (moved or deleted); "
                            "`wren models rm mine` takes it off the list")


def test_removing_a_providers_model_points_to_the_provider(make_engine, capsys):
    """`wren models rm lab/qwen3-32b` said only that no such model is installed."""
    async def add() -> None:
        engine = make_engine()
        await engine.providers.add("lab", "http://127.0.0.1:9/v1", models=("qwen3-32b",))
        await engine.close()

    asyncio.run(add())
    assert main(["models", "rm", "lab/qwen3-32b"]) == 2
    assert "“lab/qwen3-32b” is a model of the provider lab, on its server, not installed here; " \
           "`wren providers rm lab` removes the provider" in capsys.readouterr().err
