"""The refinements of the match by meaning (engine/library/matched.py, LibraryService.attribute),
each on a constructed case through a real Send: a passage is compared with its file's name
and heading path before it; an answer that matches nothing clearly as a whole is tried
sentence by sentence; a slight quote of one file gives way to a clear match with another.

The embedder here is a bag of words (each word a hashed axis, common words left out), so
each case's cosines follow from its words alone and the real sentence model's quirks do
not decide it; the parts under test are Wren's rules, not the model."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wren.engine.events import Citation, CitedBy
from wren.engine.library.cite import _COMMON as COMMON  # the quote rule's common words
from wren.engine.library.cite import STRONG_QUOTE, slight_quote, without_echo
from wren.engine.library.matched import Nearness, first_match, sentences, titled
from wren.engine.library.retrieve import Passage
from wren.engine.records import SendOptions


class WordsEmbedder:
    """Unit vectors of hashed word counts: the cosine of two texts is their shared words'."""

    name = "words-test"
    dims = 1024

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                if word not in COMMON:
                    out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dims] += 1.0
            norm = np.linalg.norm(out[row])
            if norm:
                out[row] /= norm
        return out


WORDS = WordsEmbedder()


def ask(make_engine, tmp_path: Path, files: dict[str, str], question: str, reply) -> list[Citation]:
    folder = tmp_path / "docs"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)

    async def main():
        engine = make_engine(reply, db_path=tmp_path / "wren.db")
        engine.library.index.embedder = lambda: WORDS
        try:
            await engine.library.add([str(folder)])
            await engine.library.sync()
            conv = await engine.conversations.create()
            events = [e async for e in engine.chat.send(conv.id, question, SendOptions(documents=True))]
            assert len(engine.library.given(conv.id)) == len(files)  # every file's passage was offered
            return [e for e in events if isinstance(e, Citation)]
        finally:
            await engine.close()

    return asyncio.run(main())


def cited(citations: list[Citation]) -> list[tuple[str, CitedBy]]:
    return [(Path(c.path).name, c.cited_by) for c in citations]


def test_the_file_name_ties_an_answer_to_a_passage_that_does_not_say_its_topic(make_engine, tmp_path: Path):
    # Both passages speak of water and its warmth; only the file's name says sourdough, as
    # the answer does. Without the name the two are equally near and neither is cited.
    files = {"sourdough_recipe.txt": "Mix the water warm, at 26 degrees, then rest the mix.\n",
             "yeast_bread.txt": "Mix the water lukewarm, then rest the mix an hour.\n"}
    found = ask(make_engine, tmp_path, files, "What water do I use?",
                "For sourdough recipe, mix water warm then rest.")
    assert cited(found) == [("sourdough_recipe.txt", CitedBy.MATCHED)]


def test_an_answer_with_a_long_opening_cites_by_its_sentence_of_fact(make_engine, tmp_path: Path):
    # The opening shares nothing with either file and dilutes the whole answer below the
    # threshold; its last sentence alone matches the bread file clearly.
    files = {"bread.txt": "Oven heat, oven racks and oven timing: bake the rye loaf for fifty minutes.\n",
             "kiln.txt": "Oven heat, oven racks and oven timing: fire the glaze at cone six.\n"}
    opening = ("Timings vary a great deal with altitude, humidity, shelf height, fan settings and the tin you "
               "use, so watch it closely.")
    found = ask(make_engine, tmp_path, files, "How long in the oven?", f"{opening} Rye loaf, fifty minutes.")
    assert cited(found) == [("bread.txt", CitedBy.MATCHED)]


def test_a_slight_quote_gives_way_to_a_clear_match_with_another_file(make_engine, tmp_path: Path):
    files = {"backup_job.txt": "The nightly backup job runs at two, and snapshots are kept fourteen days.\n",
             "leave_policy.txt": "Report sick leave to your manager on the first day of absence.\n"}
    # "on the first day of" is the leave policy's run of words, and nothing more of it
    found = ask(make_engine, tmp_path, files, "Which day does the backup run, the first?",
                "Backup job runs nightly at two, snapshots kept, on the first day of each month.")
    assert cited(found) == [("backup_job.txt", CitedBy.MATCHED)]


def test_a_strong_quote_keeps_its_file(make_engine, tmp_path: Path):
    files = {"backup_job.txt": "The nightly backup job runs at two, and snapshots are kept fourteen days.\n",
             "leave_policy.txt": "Report sick leave to your manager on the first day of absence.\n"}
    found = ask(make_engine, tmp_path, files, "Which day does the backup run, the first?",
                "Report sick leave to your manager on the first day; backup happens nightly.")
    assert cited(found) == [("leave_policy.txt", CitedBy.QUOTED)]


def passage(path: str, text: str, heading: tuple[str, ...] = ()) -> Passage:
    return Passage(1, path, {"heading": list(heading)} if heading else {"page": 2}, text, 0.0, 10)


def test_titled_text_names_the_file_and_heading_once():
    assert titled(passage("/d/annual_report-2024.pdf", "Revenue grew.")) == "annual report 2024\nRevenue grew."
    assert titled(passage("/d/tenancy.docx", "Two months.", ("Tenancy", "Ending"))) == \
        "tenancy › Tenancy › Ending\nTwo months."
    # a Markdown chunk already opens with its heading path: not written twice
    assert titled(passage("/d/kiln.md", "Kiln › Errors\nE-3 means...", ("Kiln", "Errors"))) == \
        "kiln\nKiln › Errors\nE-3 means..."


def test_sentences_keep_pieces_of_four_words_or_more_in_order():
    answer = "Here is how:\n\n1. Bake it for forty minutes. Then let it cool down! Done.\n- Serve it cold with cream"
    # "Here is how:" and "Done." say too little; a list's "1." splits off as a sentence would
    assert sentences(answer) == ["Bake it for forty minutes.", "Then let it cool down!", "- Serve it cold with cream"]


def test_the_first_piece_that_matches_clearly_decides():
    blurred = [Nearness(1, "a.md", 0.5), Nearness(2, "b.md", 0.48)]
    clear = [Nearness(2, "b.md", 0.7), Nearness(1, "a.md", 0.3)]
    later = [Nearness(1, "a.md", 0.9), Nearness(2, "b.md", 0.1)]
    assert first_match([blurred, clear, later]) == 2
    assert first_match([blurred]) is None and first_match([]) is None


def test_a_quote_is_slight_below_strong_quote_runs():
    text = "Report sick leave to your manager on the first day of absence."
    quote = Citation(1, "/d/leave.txt", {}, "", text, 1, CitedBy.QUOTED)
    assert slight_quote("It runs on the first day of each month.", "", [quote])  # 2 runs of 4 words
    long = "Report it to your manager on the first day of absence."
    assert STRONG_QUOTE == 3 and not slight_quote(long, "", [quote])
    assert not slight_quote("See leave.txt: on the first day of it.", "", [quote])  # names the file
    assert not slight_quote("on the first day of", "", [Citation(1, "/d/leave.txt", {}, "", text, 1)])  # a marker


class CountingWords(WordsEmbedder):
    def __init__(self):
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed(texts)


def test_a_passage_is_embedded_as_titled_text_once_until_the_library_changes(make_engine, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bread.txt").write_text("Bake the rye loaf for fifty minutes.\n")
    counting = CountingWords()

    async def main():
        engine = make_engine("unused")
        engine.library.index.embedder = lambda: counting
        try:
            await engine.library.add([str(folder)])
            await engine.library.sync()
            passages = await engine.library.search("rye loaf", 5)
            held = {p.chunk_id for p in passages}
            seen = []
            for answer in ("Rye loaf, fifty minutes.", "The rye bakes fifty minutes.", "Fifty minutes for rye."):
                counting.texts.clear()
                cited = await engine.library.attribute(answer, "How long?", passages, held)
                seen.append((list(counting.texts), [c.cited_by for c in cited]))
                if answer.startswith("The"):
                    (folder / "bread.txt").write_text("Bake the rye loaf for fifty-five minutes.\n")
                    await engine.library.sync()  # the library changed: its passages are embedded anew
                    passages = await engine.library.search("rye loaf", 5)
                    held = {p.chunk_id for p in passages}
            return seen
        finally:
            await engine.close()

    first, second, third = asyncio.run(main())
    assert first == (["Rye loaf, fifty minutes.", "bread\nBake the rye loaf for fifty minutes."], [CitedBy.MATCHED])
    assert second == (["The rye bakes fifty minutes."], [CitedBy.MATCHED])
    assert third == (["Fifty minutes for rye.", "bread\nBake the rye loaf for fifty-five minutes."], [CitedBy.MATCHED])


def test_echoed_passage_labels_cite_nothing_but_a_list_of_references_does(make_engine, tmp_path: Path):
    files = {"bread.txt": "Oven heat, oven racks and oven timing: bake the rye loaf for fifty minutes.\n",
             "kiln.txt": "Oven heat, oven racks and oven timing: fire the glaze at cone six.\n"}

    def echoing(prose: str):
        def reply(prompt: str) -> str:  # the prose, then the prompt's labels with made-up places
            labels = re.findall(r"^\[(\d+)\] (\S+)", prompt, flags=re.MULTILINE)
            return prose + "\n\n" + "\n".join(f"[{n}] {name} (page {n})" for n, name in labels)
        return reply

    echoed = ask(make_engine, tmp_path / "a", files, "How long in the oven?", echoing("Rye loaf, fifty minutes."))
    assert cited(echoed) == [("bread.txt", CitedBy.MATCHED)]  # not both files by their echoed [n]
    listed = ask(make_engine, tmp_path / "b", files, "How long in the oven?", echoing("Rye loaf, fifty minutes [1]."))
    assert [by for _, by in cited(listed)] == [CitedBy.MARKER, CitedBy.MARKER]


def test_without_echo_takes_only_label_shaped_lines_of_the_prompts_files():
    passages = [passage("/d/annual_report.pdf", "Outlook."), passage("/d/employees.csv", "name: Ana")]
    answer = "Plans:\n[1] annual_report.pdf (page 9)\n[2] employees.csv\n[3] other.md (x)\nSee [2] employees.csv too"
    assert without_echo(answer, passages) == answer  # "See [2] …" cites in the prose: all stays
    # with no marker left in the prose the label lines go
    assert without_echo("Plans:\n[1] annual_report.pdf (page 9)\n[2] employees.csv", passages) == "Plans:"
    # a [n] in the prose: the lines are its references and stay
    kept = "Outlook is good [1].\n[1] annual_report.pdf (page 4)"
    assert without_echo(kept, passages) == kept
