"""A damaged model file is found in the background after a load and reported as an engine
notice naming the file and suggesting a re-import; start-up reports the disk it freed."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path

from wren.engine.records import EngineNotice

REPO = Path(__file__).resolve().parents[3]


def _kit():
    spec = importlib.util.spec_from_file_location("wren_modelhub_kit2", REPO / "tests/engine/modelhub/conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_damaged_weights_raise_a_notice_after_load(make_engine, tmp_path):
    kit = _kit()
    spec = kit.TinySpec()
    source = kit.write_gguf(tmp_path / "tiny.gguf", spec, kit.hf_weights(spec))

    async def main():
        engine = make_engine("fine")
        info = await engine.models.import_model(source, name="imported")
        heard: list[EngineNotice] = []
        engine.on_notice(heard.append)
        await engine.models.load("imported")
        assert (await engine.models.weight_check()).ok is True
        gguf = info.path / "model.gguf"
        with open(gguf, "r+b") as fh:
            fh.seek(gguf.stat().st_size - 4096)
            fh.write(os.urandom(4096))
        await engine.models.load("imported")
        check = await engine.models.weight_check()
        await asyncio.sleep(0)  # the notice is delivered on the loop
        await engine.close()
        return gguf, check, heard, engine.notices()

    gguf, check, heard, notices = asyncio.run(main())
    assert check.ok is False
    assert [n.kind for n in notices] == ["model_damaged"] and heard == notices
    assert str(gguf) in notices[0].message and "Re-import" in notices[0].message
    assert notices[0].path == str(gguf)


def test_engine_open_sweeps_leftovers_and_says_how_much(wren_home):
    from wren.engine.api import Engine

    models = wren_home / "models"
    (models / ".partial-starter-deadbeef").mkdir(parents=True)
    (models / ".partial-starter-deadbeef" / "model.gguf").write_bytes(b"\0" * 2_000_000)

    async def main():
        engine = Engine.open(wren_home)
        try:
            return engine.leftovers, engine.notices()
        finally:
            await engine.close()

    leftovers, notices = asyncio.run(main())
    assert leftovers.removed == (".partial-starter-deadbeef",) and leftovers.bytes_freed == 2_000_000
    assert notices[0].kind == "disk_freed" and "freeing 2.0 MB" in notices[0].message  # 2,000,000 bytes
    assert not (models / ".partial-starter-deadbeef").exists()
