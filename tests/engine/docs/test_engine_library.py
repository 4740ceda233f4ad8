"""The library through the Engine: passages reach the prompt as `document` parts of the
context report, the answer's [n] become Citation events (an invented number is dropped),
projects scope the search and add their instructions, and the watcher picks up added,
changed, renamed and deleted files while running and after a restart."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from wren.engine.context import PartKind, PartState
from wren.engine.events import Citation, Finished
from wren.engine.records import SendOptions


async def collect(stream):
    return [e async for e in stream]


def no_embedder():
    return None


def test_passages_in_the_prompt_and_cited(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kiln.md").write_text("# Kiln\n\n## Errors\n\nError E-3 means the thermocouple failed.\n")
    (folder / "cake.md").write_text("# Cake\n\nBake the lemon cake for forty minutes.\n")
    prompts = []

    def reply(prompt):
        prompts.append(prompt)
        return "The thermocouple failed [1]. Also see [7]."

    async def main():
        engine = make_engine(reply)
        engine.library.index.embedder = no_embedder
        await engine.library.add([str(folder)])
        await engine.library.sync()
        conv = await engine.conversations.create()
        events = await collect(engine.chat.send(conv.id, "What does error E-3 on the kiln mean?"))
        answer = (await engine.conversations.messages(conv.id))[-1]
        report = await engine.conversations.context_report(answer.id)
        off = await collect(engine.chat.send(conv.id, "What does error E-3 on the kiln mean?",
                                             SendOptions(documents=False)))
        await engine.close()
        return events, report, off

    events, report, off = asyncio.run(main())
    assert "thermocouple failed" in prompts[0] and "[1] kiln.md (Kiln › Errors, line 5)" in prompts[0]
    cited = [e for e in events if isinstance(e, Citation)]
    assert [(c.number, Path(c.path).name, c.where) for c in cited] == [(1, "kiln.md", "Kiln › Errors, line 5")]
    assert "thermocouple" in cited[0].passage
    assert events.index(cited[0]) < next(n for n, e in enumerate(events) if isinstance(e, Finished))
    documents = [p for p in report.parts if p.kind is PartKind.DOCUMENT]
    assert documents and documents[0].state is PartState.INCLUDED and "kiln.md" in documents[0].text
    assert not any(isinstance(e, Citation) for e in off)  # --no-docs: nothing to cite
    assert "kiln.md" not in prompts[-1] and "thermocouple failed." not in prompts[-1]


def test_documents_over_the_budget_are_dropped_with_the_reason(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(6):
        (folder / f"f{n}.txt").write_text(" ".join(["ceramic glaze firing notes"] * 40) + f" part{n}\n")

    async def main():
        engine = make_engine("ok")
        engine.library.index.embedder = no_embedder
        await engine.library.add([str(folder)])
        await engine.library.sync()
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "ceramic glaze firing"))
        answer = (await engine.conversations.messages(conv.id))[-1]
        report = await engine.conversations.context_report(answer.id)
        await engine.close()
        return report

    report = asyncio.run(main())
    parts = [p for p in report.parts if p.kind is PartKind.DOCUMENT]
    assert len(parts) == 6
    dropped = [p for p in parts if p.state is PartState.DROPPED]
    assert dropped and all("over the document budget" in p.note for p in dropped)
    assert any(p.state is PartState.INCLUDED for p in parts)


def test_a_project_searches_its_own_documents_and_adds_instructions(make_engine, tmp_path: Path):
    mine, other = tmp_path / "mine", tmp_path / "other"
    for folder, word in ((mine, "stoneware"), (other, "porcelain")):
        folder.mkdir()
        (folder / "notes.txt").write_text(f"The {word} clay shrinks twelve percent.\n")
    prompts = []

    async def main():
        engine = make_engine(lambda p: prompts.append(p) or "ok")
        engine.library.index.embedder = no_embedder
        added = await engine.library.add([str(mine), str(other)])
        await engine.library.sync()
        await engine.projects.create("studio", "Answer in one sentence.")
        await engine.projects.add_sources("studio", [added[0]["id"]])
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "How much does the clay shrink?", SendOptions(project="studio")))
        # The chat is in the project now: the next Send searches it without being told.
        await collect(engine.chat.send(conv.id, "How much does the clay shrink again?"))
        projects = await engine.projects.list()
        await engine.close()
        return projects, conv.id

    projects, conv_id = asyncio.run(main())
    for prompt in prompts:
        assert "stoneware" in prompt and "porcelain" not in prompt and "Answer in one sentence." in prompt
    assert projects[0]["chats"] == [conv_id]


def _wait(predicate, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "the watcher did not pick the change up"
        time.sleep(0.05)


def test_watching_picks_up_changes_while_running_and_after_a_restart(make_engine, tmp_path: Path, monkeypatch):
    from wren.engine.library import service

    monkeypatch.setattr(service, "WATCH_SECONDS", 0.1)
    folder = tmp_path / "watched"
    folder.mkdir()
    (folder / "a.md").write_text("Aardvarks dig at night.\n")
    db_path = tmp_path / "watch.db"

    async def names(engine, query):
        return [Path(p.path).name for p in await engine.library.search(query)]

    async def until(engine, query, expected):
        deadline = time.monotonic() + 20
        while await names(engine, query) != expected:
            assert time.monotonic() < deadline, f"{query!r}: still {await names(engine, query)}, not {expected}"
            await asyncio.sleep(0.05)

    async def running():
        engine = make_engine("ok", db_path=db_path)
        engine.library.index.embedder = no_embedder
        await engine.library.add([str(folder)], watch=True)
        await engine.library.start()
        await until(engine, "aardvarks", ["a.md"])
        (folder / "b.md").write_text("Badgers sleep by day.\n")  # added
        await until(engine, "badgers", ["b.md"])
        (folder / "a.md").write_text("Aardwolves eat termites.\n")  # changed
        await until(engine, "aardwolves", ["a.md"])
        assert await names(engine, "aardvarks") == []
        (folder / "b.md").rename(folder / "c.md")  # renamed
        await until(engine, "badgers", ["c.md"])
        (folder / "a.md").unlink()  # deleted
        await until(engine, "aardwolves", [])
        await engine.close()

    async def restarted():
        engine = make_engine("ok", db_path=db_path)
        engine.library.index.embedder = no_embedder
        await engine.library.start()  # a start rescans
        await until(engine, "cranes", ["d.md"])
        assert await names(engine, "badgers") == []
        await engine.close()

    asyncio.run(running())
    (folder / "d.md").write_text("Cranes dance in spring.\n")  # while Wren was closed
    (folder / "c.md").unlink()
    asyncio.run(restarted())


def test_removing_a_file_takes_its_passages_out_of_past_answers_too(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "secret.md").write_text("The vault code word is Quuxplumbicorn and it changes monthly.\n")
    db_path = tmp_path / "purge.db"

    async def main():
        engine = make_engine("It is in the vault [1].", db_path=db_path)
        engine.library.index.embedder = no_embedder
        await engine.library.add([str(folder)])
        await engine.library.sync()
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "What is the vault code word?"))
        answer = (await engine.conversations.messages(conv.id))[-1]
        before = await engine.conversations.context_report(answer.id)
        raw_before = _raw(db_path)
        await engine.library.remove(str(folder))
        after = await engine.conversations.context_report(answer.id)
        await engine.close()
        return before, after, raw_before

    before, after, raw_before = asyncio.run(main())
    assert b"Quuxplumbicorn" in raw_before  # the report held it: the check below can fail
    assert "Quuxplumbicorn" in before.rendered_prompt
    raw = _raw(db_path)
    assert b"Quuxplumbicorn" not in raw and b"quuxplumbicorn" not in raw
    part = next(p for p in after.parts if p.kind is PartKind.DOCUMENT)
    assert "passage removed from the library" in part.text and "secret.md" in part.text


def _raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def test_wren_context_shows_document_parts(make_engine, tmp_path: Path, capsys):
    from wren.engine.terminal.main import main

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bees.md").write_text("# Bees\n\nA hive keeps about forty thousand bees in summer.\n")

    async def run():
        engine = make_engine("About forty thousand [1].")
        engine.library.index.embedder = no_embedder
        await engine.library.add([str(folder)])
        await engine.library.sync()
        conv = await engine.conversations.create()
        await collect(engine.chat.send(conv.id, "How many bees live in a hive?"))
        await engine.close()
        return conv.id

    conv_id = asyncio.run(run())
    assert main(["context", str(conv_id), "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)["parts"]
    (document,) = [p for p in parts if p["kind"] == "document"]
    assert document["state"] == "included" and document["text"].startswith("[1] bees.md (Bees, line 3)\n")
    assert main(["context", str(conv_id)]) == 0
    assert "included   document" in capsys.readouterr().out
