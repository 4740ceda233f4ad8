"""Delete all my data, export everything, and files only the user can read."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import zipfile
from pathlib import Path

from wren.engine import paths

SECRET = "Xylophorbe"


def run(coro):
    return asyncio.run(coro)


async def drain(stream):
    return [event async for event in stream]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_erase_all_removes_conversations_memories_logs_and_caches_but_keeps_models(make_engine, shows, wren_home):
    from wren.engine.logs import log_event, setup_logging

    async def main():
        engine = make_engine("Sure.")
        models.extend(sorted(p.name for p in (wren_home / "models").iterdir()))
        conv = await engine.conversations.create(f"{SECRET} plans")
        await drain(engine.chat.send(conv.id, f"Plan the {SECRET} trip"))
        await engine.memories.add(f"My friend {SECRET} visits in May")
        await engine.settings.set("about_me", f"I am {SECRET}")
        before = shows(SECRET)
        report = await engine.privacy.erase_all()
        after = shows(SECRET)
        left = (await engine.conversations.list(), await engine.memories.list(),
                await engine.settings.get("about_me"))
        await engine.close()
        return before, report, after, left

    setup_logging()
    log_event("test.before_erase", conversation_id=1)
    cache = wren_home / "cache" / "torch-inductor"
    cache.mkdir(parents=True)
    (cache / "graph.bin").write_bytes(b"compiled")
    (wren_home / "chat_history").write_text(f"{SECRET}\n")
    crashes = wren_home / "crashes"
    crashes.mkdir()
    (crashes / "crash-20260101-000000-1.txt").write_text("Traceback (most recent call last): ...\n")
    live_fault_log = crashes / f"fault-{os.getpid()}.log"  # this process's own, still open
    live_fault_log.write_text("wren-fault-log 1\n")
    models: list[str] = []
    before, report, after, left = run(main())
    assert before and after == []
    assert left == ([], [], None)
    assert report.rows["conversation"] == 1 and report.rows["memory"] == 1 and report.models_kept
    assert not (wren_home / "cache").exists() and not (wren_home / "chat_history").exists()
    assert all(SECRET not in p.read_text(errors="replace") for p in (wren_home / "logs").rglob("*") if p.is_file())
    assert not any("test.before_erase" in p.read_text() for p in (wren_home / "logs").rglob("*") if p.is_file())
    assert sorted(p.name for p in (wren_home / "models").iterdir()) == models != []
    assert [p.name for p in crashes.iterdir()] == [live_fault_log.name]  # crash reports go too


def test_erase_all_with_models_empties_the_models_folder(make_engine, wren_home):
    async def main():
        engine = make_engine("Sure.")
        report = await engine.privacy.erase_all(keep_models=False)
        await engine.close()
        return report

    report = run(main())
    assert not report.models_kept
    assert list((wren_home / "models").iterdir()) == []


def test_export_all_writes_one_private_zip(make_engine, tmp_path):
    async def main():
        engine = make_engine("Paris.")
        conv = await engine.conversations.create("Capitals")
        await drain(engine.chat.send(conv.id, "Capital of France?"))
        await engine.memories.add("I prefer short answers")
        await engine.settings.set("about_me", "A geography teacher")
        await engine.settings.set("openai_api_key", "sk-never-exported")
        out = await engine.privacy.export_all(tmp_path / "exports" / "all.zip")
        await engine.close()
        return out

    out = run(main())
    assert out == tmp_path / "exports" / "all.zip"
    assert mode(out) == 0o600
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        md = [n for n in names if n.endswith(".md")]
        js = [n for n in names if n.startswith("conversations/") and n.endswith(".json")]
        assert len(md) == 1 and len(js) == 1
        chat = json.loads(zf.read(js[0]))
        assert [m["content"] for m in chat["messages"]] == ["Capital of France?", "Paris."]
        assert "## Wren" in zf.read(md[0]).decode()
        assert [m["text"] for m in json.loads(zf.read("memories.json"))] == ["I prefer short answers"]
        settings = json.loads(zf.read("settings.json"))
        assert settings["about_me"] == "A geography teacher" and "openai_api_key" not in settings
        assert not any("model" in n.split("/")[0] for n in names if n != "manifest.json")
        assert b"sk-never-exported" not in b"".join(zf.read(n) for n in names)


def test_export_refuses_a_path_that_is_not_a_zip(make_engine, tmp_path):
    import pytest

    from wren.engine.errors import InvalidRequest

    async def main():
        engine = make_engine()
        try:
            with pytest.raises(InvalidRequest, match="zip"):
                await engine.privacy.export_all(tmp_path / "notes.txt")
        finally:
            await engine.close()

    run(main())
    assert not (tmp_path / "notes.txt").exists()


def test_data_files_are_readable_by_the_user_alone(make_engine, wren_home, tmp_path, monkeypatch):
    from wren.engine.logs import close_logging, log_event, setup_logging

    fresh = tmp_path / "fresh-home"
    monkeypatch.setenv("WREN_HOME", str(fresh))
    assert mode(paths.data_dir()) == 0o700
    monkeypatch.setenv("WREN_HOME", str(wren_home))
    chosen = mode(wren_home)  # an existing folder the user named keeps its mode

    async def main():
        engine = make_engine("Hi.")
        conv = await engine.conversations.create()
        await drain(engine.chat.send(conv.id, "Hello"))
        wal = Path(f"{engine.store.path}-wal")
        modes = {"db": mode(Path(engine.store.path)), "wal": mode(wal) if wal.exists() else 0o600}
        modes["export"] = mode(await engine.privacy.export_all(tmp_path / "out.zip"))
        await engine.close()
        return modes

    setup_logging()
    log_event("test.permissions", conversation_id=1)
    try:
        modes = run(main())
    finally:
        close_logging()
    assert modes == {"db": 0o600, "wal": 0o600, "export": 0o600}
    assert mode(paths.data_dir()) == chosen
    assert mode(paths.logs_dir()) == 0o700 and mode(paths.models_dir()) == 0o700
    log_file = paths.logs_dir() / "wren.log"
    assert log_file.exists() and mode(log_file) == 0o600


def test_an_existing_database_is_made_private(wren_home):
    from wren.engine.store import Store

    db = wren_home / "wren.sqlite3"
    db.touch(mode=0o644)
    db.chmod(0o644)
    Store(db).close()
    assert mode(db) == 0o600
