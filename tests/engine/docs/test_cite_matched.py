"""An answer that cites no passage by number and quotes none cites the passage nearest its
meaning (engine/library/matched.py), with the real embedder and the library's stored
vectors: only when that passage is near enough and clearly nearer than any other file's,
never without passages in the prompt, and marked as matched by Wren, in the event, its JSON
and the stored citation."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from wren.engine.events import Citation, CitedBy, event_from_dict, event_to_dict
from wren.engine.library.matched import MARGIN, THRESHOLD, Nearness, best_match
from wren.engine.memory.embed import embeddings_available
from wren.engine.records import SendOptions

needs_embedder = pytest.mark.skipif(not embeddings_available(), reason="the embedder package is not installed")

FILES = {
    "kiln.md": "# Kiln\n\n## Errors\n\nError E-3 means the thermocouple failed and must be replaced.\n",
    "cake.txt": "Bake the lemon cake for forty minutes at 180 degrees.\n",
    "commute.md": "# Commuting\n\nThe company pays half of a monthly public transport pass.\n",
}
QUESTION = "What does E-3 on the kiln mean?"
# No [n], no four words in a row of any passage, no file name: only its meaning ties it to kiln.md.
PARAPHRASE = "The kiln's E-3 code says its temperature sensor broke; swap it for a new one."


def _library(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text)
    return folder


async def _ask(make_engine, folder: Path, reply: str, question: str = QUESTION, documents: bool | None = None):
    engine = make_engine(reply)
    await engine.library.add([str(folder)])
    await engine.library.sync()
    conv = await engine.conversations.create()
    events = [e async for e in engine.chat.send(conv.id, question, SendOptions(documents=documents))]
    kept = (await engine.conversations.messages(conv.id))[-1].citations
    return engine, conv, [e for e in events if isinstance(e, Citation)], kept


@needs_embedder
def test_an_answer_in_other_words_cites_the_passage_it_means(make_engine, tmp_path: Path):
    async def main():
        engine, conv, cited, kept = await _ask(make_engine, _library(tmp_path), PARAPHRASE)
        given = engine.library.given(conv.id)
        # a passage the prompt did not hold (dropped for room) is never a candidate
        unheld = await engine.library.nearness(PARAPHRASE, given, set())
        await engine.close()
        return cited, kept, given, unheld

    cited, kept, given, unheld = asyncio.run(main())
    assert given and unheld == []
    assert [(Path(c.path).name, c.cited_by) for c in cited] == [("kiln.md", CitedBy.MATCHED)]
    assert "thermocouple failed" in cited[0].passage
    assert kept == tuple(cited)  # stored as matched, read back the same
    assert event_from_dict(event_to_dict(cited[0])) == cited[0]
    assert event_to_dict(cited[0])["cited_by"] == "matched"


@needs_embedder
def test_an_answer_as_near_two_files_cites_neither(make_engine, tmp_path: Path):
    question = "What does E-3 on the kiln mean, and how long does the lemon cake bake?"
    two_topics = "The kiln's error means a sensor broke, and the lemon cake should bake for a while."

    async def main():
        engine, conv, cited, _ = await _ask(make_engine, _library(tmp_path), two_topics, question)
        held = {p.chunk_id for p in engine.library.given(conv.id)}
        near = await engine.library.nearness(two_topics, engine.library.given(conv.id), held)
        await engine.close()
        return cited, near

    cited, near = asyncio.run(main())
    assert cited == []
    names = [Path(n.path).name for n in near]
    assert names[:2] in (["kiln.md", "cake.txt"], ["cake.txt", "kiln.md"])
    assert near[0].cosine >= THRESHOLD and near[0].cosine - near[1].cosine < MARGIN  # abstained for the margin alone
    assert best_match(near, margin=0.0) == near[0].number


@needs_embedder
def test_no_passages_in_the_prompt_no_citation(make_engine, tmp_path: Path):
    async def main():
        engine, _, off, _ = await _ask(make_engine, _library(tmp_path), PARAPHRASE, documents=False)
        await engine.close()
        empty = make_engine(PARAPHRASE, db_path=tmp_path / "empty.db")  # a library with nothing in it
        conv = await empty.conversations.create()
        events = [e async for e in empty.chat.send(conv.id, QUESTION)]
        await empty.close()
        return off, [e for e in events if isinstance(e, Citation)]

    off, empty = asyncio.run(main())
    assert off == [] and empty == []


@needs_embedder
def test_markers_and_quotes_come_first_and_say_so(make_engine, tmp_path: Path):
    async def main():
        folder = _library(tmp_path)
        engine, _, marked, kept = await _ask(make_engine, folder, "The sensor broke [1].")
        await engine.close()
        engine, _, quoted, _ = await _ask(make_engine, folder, "It means the thermocouple failed and must be swapped.")
        await engine.close()
        return marked, kept, quoted

    marked, kept, quoted = asyncio.run(main())
    assert [c.cited_by for c in marked] == [CitedBy.MARKER] and kept == tuple(marked)
    assert [(Path(c.path).name, c.cited_by) for c in quoted] == [("kiln.md", CitedBy.QUOTED)]


def test_the_rule_on_constructed_cosines():
    def near(*rows):
        return [Nearness(n, path, cosine) for n, path, cosine in rows]

    clear = near((2, "a.md", THRESHOLD + 0.2), (1, "b.md", THRESHOLD + 0.2 - MARGIN - 0.01))
    assert best_match(clear) == 2
    assert best_match(near((2, "a.md", THRESHOLD + 0.2), (1, "b.md", THRESHOLD + 0.2 - MARGIN + 0.01))) is None
    assert best_match(near((3, "a.md", THRESHOLD - 0.01))) is None  # not near enough, even alone
    same_file = near((1, "a.md", THRESHOLD + 0.1), (2, "a.md", THRESHOLD + 0.09), (3, "b.md", THRESHOLD - 0.2))
    assert best_match(same_file) == 1  # a second passage of the cited file is no rival
    assert best_match([]) is None
