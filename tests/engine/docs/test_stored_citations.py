"""An answer's citations are kept with it: read back with the chat's messages after the
engine restarts, gone with the chat when it is deleted for good (no byte of the passage
left in the database file or its WAL), and scrubbed when their file leaves the library."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wren.engine.events import Citation


async def collect(stream):
    return [e async for e in stream]


def no_embedder():
    return None


def _raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


async def _answer(make_engine, folder: Path, db_path: Path, reply: str):
    engine = make_engine(reply, db_path=db_path)
    engine.library.index.embedder = no_embedder
    await engine.library.add([str(folder)])
    await engine.library.sync()
    conv = await engine.conversations.create()
    events = await collect(engine.chat.send(conv.id, "What does error E-3 on the kiln mean?"))
    return engine, conv, [e for e in events if isinstance(e, Citation)]


def test_sources_are_there_after_a_restart(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kiln.md").write_text("# Kiln\n\n## Errors\n\nError E-3 means the thermocouple failed.\n")
    db_path = tmp_path / "cited.db"

    async def first():
        engine, conv, streamed = await _answer(make_engine, folder, db_path, "The thermocouple failed [1]. See [7].")
        await engine.close()
        return conv.id, streamed

    async def restarted(conv_id):
        engine = make_engine("ok", db_path=db_path)
        shown = await engine.conversations.messages(conv_id)
        await engine.close()
        return shown

    conv_id, streamed = asyncio.run(first())
    question, answer = asyncio.run(restarted(conv_id))
    assert not question.citations
    assert [(c.number, Path(c.path).name, c.where) for c in answer.citations] == [(1, "kiln.md", "Kiln › Errors, line 5")]
    assert answer.citations == tuple(streamed)  # as streamed: file, place, passage, chunk; [7] named nothing
    assert "thermocouple failed" in answer.citations[0].passage


def test_deleting_the_chat_deletes_its_cited_passages(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    doc = folder / "kiln.md"
    doc.write_text("# Kiln\n\n## Errors\n\nError E-3 means the Zorblaxian thermocouple failed.\n")
    db_path = tmp_path / "purged.db"

    async def main():
        engine, conv, streamed = await _answer(make_engine, folder, db_path, "It failed [1].")
        # the file changes: the old passage stays only with the answer that cited it
        doc.write_text("# Kiln\n\n## Errors\n\nError E-3 means the heating element failed.\n")
        await engine.library.sync()
        kept = (await engine.conversations.messages(conv.id))[-1].citations
        await engine.close()
        engine = make_engine("ok", db_path=db_path)
        raw_before = _raw(db_path)
        await engine.conversations.delete(conv.id, permanently=True)
        await engine.close()
        return streamed, kept, raw_before

    streamed, kept, raw_before = asyncio.run(main())
    assert streamed and "Zorblaxian" in kept[0].passage
    assert b"Zorblaxian" in raw_before  # so the check below can fail
    raw = _raw(db_path)
    assert b"Zorblaxian" not in raw and b"zorblaxian" not in raw


def test_removing_the_file_scrubs_the_passage_an_answer_cited(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kiln.md").write_text("Error E-3 means the Quibblewort sensor failed.\n")
    db_path = tmp_path / "scrubbed.db"

    async def main():
        engine, conv, streamed = await _answer(make_engine, folder, db_path, "The sensor failed [1].")
        await engine.library.remove(str(folder))
        kept = (await engine.conversations.messages(conv.id))[-1].citations
        await engine.close()
        return streamed, kept

    streamed, kept = asyncio.run(main())
    assert "Quibblewort" in streamed[0].passage
    assert [Path(c.path).name for c in kept] == ["kiln.md"]  # the answer still says what it cited
    assert "Quibblewort" not in kept[0].passage and "removed from the library" in kept[0].passage
    raw = _raw(db_path)
    assert b"Quibblewort" not in raw and b"quibblewort" not in raw


def test_a_marker_naming_no_passage_is_dropped_from_the_stored_answer(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kiln.md").write_text("# Kiln\n\n## Errors\n\nError E-3 means the thermocouple failed.\n")

    async def main():
        engine, conv, _ = await _answer(make_engine, folder, tmp_path / "m.db",
                                        "The thermocouple failed [1]. See also [7].\n\n`probe[7]`")
        shown = await engine.conversations.messages(conv.id)
        await engine.close()
        return shown[-1]

    answer = asyncio.run(main())
    assert answer.content == "The thermocouple failed [1]. See also.\n\n`probe[7]`"
    assert [c.number for c in answer.citations] == [1]
