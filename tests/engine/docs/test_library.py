"""The document library over a real database and real files: formats and their locations,
incremental indexing (unchanged, changed, moved, deleted), bad input, and removal that
leaves none of a file's text in the database files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.engine.docs.makers import write_docx, write_encrypted_pdf, write_epub, write_pdf
from wren.engine.errors import InvalidRequest, NotFound
from wren.engine.library.chunking import MAX_WORDS, chunks_of
from wren.engine.library.formats import Skipped, extract
from wren.engine.library.library import LibraryIndex
from wren.engine.library.scan import scan
from wren.engine.store import Store


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "wren.db")
    s.bind()
    yield s
    s.close()


def make_library(store: Store, **kwargs) -> LibraryIndex:
    return LibraryIndex(store.db, lambda fn: fn(store.db), kwargs.pop("embedder", lambda: None), **kwargs)


def states(library: LibraryIndex) -> dict[str, tuple[str, str]]:
    return {Path(r["path"]).name: (r["state"], r["reason"])
            for r in library.run_db(lambda db: db.execute_sql("SELECT path, state, reason FROM doc_file").fetchall())
            for r in [{"path": r[0], "state": r[1], "reason": r[2]}]}


# -- formats -------------------------------------------------------------------------------

def test_markdown_keeps_heading_path_and_lines(tmp_path: Path):
    f = tmp_path / "a.md"
    f.write_text("# Guide\n\nIntro line.\n\n## Setup\n\n### Linux\n\nRun make.\nThen run it.\n\n```\n# not a heading\n```\n")
    _, blocks = extract(f)
    assert [(b.text, b.location) for b in blocks] == [
        ("Intro line.", {"heading": ["Guide"], "lines": [3, 3]}),
        ("Run make.\nThen run it.", {"heading": ["Guide", "Setup", "Linux"], "lines": [9, 10]}),
        ("```\n# not a heading\n```", {"heading": ["Guide", "Setup", "Linux"], "lines": [12, 14]}),
    ]


def test_html_main_text_without_menus_scripts_or_footer():
    _, blocks = extract(Path("tests/data/docs/travel_policy.html"))
    text = " ".join(b.text for b in blocks)
    assert "55 euros" in text and "economy class" in text
    for furniture in ("Expense reports menu", "Cookie settings", "track every click", "Fernhill intranet",
                      "holiday calendar", "font-family"):
        assert furniture not in text
    assert blocks[0].location["heading"] == ["Travel policy", "Meals and lodging"]


def test_csv_rows_carry_their_header():
    _, blocks = extract(Path("tests/data/docs/employees.csv"))
    assert blocks[1].text == "name: Tomas Berg; role: Kiln technician; office: Lisbon; start year: 2021"
    assert blocks[1].location == {"rows": [3, 3]}


def test_pdf_pages_docx_headings_epub_chapters(tmp_path: Path):
    pdf = write_pdf(tmp_path / "r.pdf", ["first page words", "", "third page (with parens)"])
    assert [(b.text, b.location) for b in extract(pdf)[1]] == [
        ("first page words", {"page": 1}), ("third page (with parens)", {"page": 3})]
    docx = write_docx(tmp_path / "d.docx", [("Heading1", "Benefits"), ("", "Dental after 90 days."),
                                             ("Heading2", "Travel"), ("", "Half the pass.")])
    assert [(b.text, b.location["heading"]) for b in extract(docx)[1]] == [
        ("Dental after 90 days.", ["Benefits"]), ("Half the pass.", ["Benefits", "Travel"])]
    epub = write_epub(tmp_path / "b.epub", [("One", ["Alpha."]), ("Two", ["Beta."])])
    assert [(b.text, b.location["chapter"]) for b in extract(epub)[1]] == [("Alpha.", 1), ("Beta.", 2)]


def test_unreadable_files_are_skipped_with_a_reason(tmp_path: Path):
    scanned = write_pdf(tmp_path / "scan.pdf", ["", ""])
    with pytest.raises(Skipped, match="without text.*OCR"):
        extract(scanned)
    locked = write_encrypted_pdf(tmp_path / "locked.pdf", ["secret plans"])
    with pytest.raises(Skipped, match="encrypted"):
        extract(locked)
    binary = tmp_path / "blob.txt"
    binary.write_bytes(b"\x00\x01" * 100)
    with pytest.raises(Skipped, match="binary"):
        extract(binary)
    fake = tmp_path / "fake.docx"
    fake.write_bytes(b"\xd0\xcf\x11\xe0 an OLE container, as an encrypted DOCX is")
    with pytest.raises(Skipped, match="encrypted, or damaged"):
        extract(fake)


def test_pdf_bomb_costs_its_page_only(tmp_path: Path):
    bomb = write_pdf(tmp_path / "bomb.pdf", ["real text before", "x", "real text after"], bomb_page=1)
    began = time.monotonic()
    _, blocks = extract(bomb)
    assert [b.location["page"] for b in blocks] == [1, 3]
    assert time.monotonic() - began < 30


def test_chunks_follow_structure_and_stay_small():
    _, blocks = extract(Path("tests/data/docs/kiln_manual.md"))
    chunks = chunks_of(blocks)
    assert all(len(c.text.split()) <= MAX_WORDS + 12 for c in chunks)  # + the heading line
    install = next(c for c in chunks if "240 volt" in c.text)
    assert install.location["heading"] == ["Fernhill K-40 Kiln Manual", "Installation"]
    assert install.text.startswith("Fernhill K-40 Kiln Manual › Installation\n")
    assert "Vent the room" in install.text and install.location["lines"] == [7, 9]  # two paragraphs
    assert all(c.tokens > 0 for c in chunks)
    # Paragraphs of two sections never share a chunk.
    assert not any("E-3" in c.text and "Vacuum" in c.text for c in chunks)


def test_a_long_paragraph_is_cut_between_sentences():
    from wren.engine.library.formats import Block

    text = " ".join(f"Sentence number {n} says something." for n in range(200))
    chunks = chunks_of([Block(text, {"lines": [1, 1]})])
    assert len(chunks) > 1 and all(len(c.text.split()) <= MAX_WORDS for c in chunks)
    assert all(c.text.endswith("something.") for c in chunks)


# -- indexing ----------------------------------------------------------------------------

def test_incremental_unchanged_changed_moved_deleted(store, tmp_path: Path):
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nAlpha apricots grow here.\n")
    (folder / "b.txt").write_text("Bravo bananas ripen slowly.\n")
    library = make_library(store)
    library.add([folder])
    first = library.sync()
    assert (first.changed, first.unchanged) == (2, 0)
    again = library.sync()
    assert (again.changed, again.unchanged, again.total) == (0, 2, 0)  # not even hashed

    os.utime(folder / "b.txt", (time.time() + 5, time.time() + 5))  # touched, same content
    touched = library.sync()
    assert (touched.changed, touched.unchanged, touched.total) == (0, 2, 1)

    (folder / "a.md").write_text("# A\n\nAlpha apples now.\n")
    (folder / "b.txt").rename(folder / "renamed.txt")
    changed = library.sync()
    assert (changed.changed, changed.moved, changed.removed) == (1, 1, 0)
    assert [p.path for p in library.search("apples")] == [str((folder / "a.md").resolve())]
    assert library.search("apricots") == []
    assert [Path(p.path).name for p in library.search("bananas")] == ["renamed.txt"]

    (folder / "renamed.txt").unlink()
    gone = library.sync()
    assert gone.removed == 1 and library.search("bananas") == []


def test_bad_input_gets_entries_and_the_rest_indexes(store, tmp_path: Path):
    folder = tmp_path / "lib"
    (folder / "deep").mkdir(parents=True)
    (folder / "good.md").write_text("Good text about otters.\n")
    huge = folder / "huge.txt"
    with open(huge, "wb") as f:  # a sparse 2 GB file: nothing is read from it
        f.truncate(2 * 2**30)
    (folder / "deep" / "loop").symlink_to(folder, target_is_directory=True)
    (folder / "self").symlink_to(folder / "self")
    write_pdf(folder / "scan.pdf", [""])
    write_pdf(folder / "bomb.pdf", ["x"], bomb_page=0)
    (folder / "prog.bin").write_bytes(bytes(range(256)) * 40)
    library = make_library(store)
    library.add([folder])
    began = time.monotonic()
    library.sync()
    assert time.monotonic() - began < 60
    found = states(library)
    assert found["good.md"] == ("indexed", "")
    assert found["huge.txt"][0] == "skipped" and "too large (2,048 MB" in found["huge.txt"][1]
    assert found["loop"][0] == "skipped" and "already indexed" in found["loop"][1]
    assert found["self"][0] == "skipped" and "symbolic link" in found["self"][1]
    assert found["scan.pdf"][0] == "skipped" and "OCR" in found["scan.pdf"][1]
    assert found["bomb.pdf"][0] == "skipped"
    assert found["prog.bin"] == ("skipped", "a binary file (not text)")
    status = library.status()
    assert status["counts"]["indexed"] == 1 and status["skipped_total"] == 6


def test_a_file_vanishing_mid_index_leaves_no_row(store, tmp_path: Path):
    folder = tmp_path / "lib"
    folder.mkdir()
    for name in ("a.txt", "b.txt"):
        (folder / name).write_text(f"{name} words\n")
    library = make_library(store)
    library.add([folder])
    # The pass checks for answers before each file: delete b.txt after the walk saw it.
    calls = []

    def busy() -> bool:
        calls.append(1)
        if len(calls) == 1:
            (folder / "b.txt").unlink()
        return False

    library.indexer.busy = busy
    progress = library.sync()
    assert progress.done == 2 and set(states(library)) == {"a.txt"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_no_permission_is_an_entry(store, tmp_path: Path):
    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "secret.txt").write_text("hidden\n")
    (folder / "secret.txt").chmod(0)
    library = make_library(store)
    library.add([folder])
    library.sync()
    assert states(library)["secret.txt"] == ("skipped", "no permission to read it")


def test_too_many_files_says_so(tmp_path: Path):
    for n in range(30):
        (tmp_path / f"{n:02}.txt").write_text("x")
    found = scan(str(tmp_path), max_files=20)
    assert len(found.files) == 20 and not found.complete
    assert "more than 20 files" in found.problems[str(tmp_path)]


def test_adding_a_missing_path_adds_nothing(store, tmp_path: Path):
    library = make_library(store)
    with pytest.raises(NotFound, match="no such file or folder; nothing was added"):
        library.add([tmp_path / "here.md", tmp_path / "missing"])
    assert library.sources() == []


# -- removal ---------------------------------------------------------------------------------

def _raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def test_rm_leaves_no_text_in_the_database_files(store, tmp_path: Path):
    db_path = Path(store.path)
    keep, drop = tmp_path / "keep", tmp_path / "drop"
    keep.mkdir()
    drop.mkdir()
    (keep / "k.md").write_text("Quokkas keep their burrows tidy.\n")
    (drop / "d.md").write_text("Zanzibarquux marmalade is the secret ingredient.\n")
    library = make_library(store)
    library.add([keep, drop])
    library.sync()
    assert b"Zanzibarquux" in _raw(db_path)  # the check below can fail
    library.vectors.save("test-model", [1, 2], __import__("numpy").ones((2, 4), "float32"))
    gone = library.remove(str(drop))
    assert gone == {"removed": [str(drop.resolve())], "files": 1}
    raw = _raw(db_path)
    assert b"Zanzibarquux" not in raw and b"zanzibarquux" not in raw
    assert b"Quokkas" in raw
    counts = library.status()["counts"]
    assert (counts["chunks"], counts["vectors"]) == (1, 1)
    with pytest.raises(NotFound):
        library.remove(str(drop))
    with pytest.raises(InvalidRequest, match="part of the library folder"):
        library.remove(str(keep / "k.md"))


def test_indexing_waits_while_an_answer_streams(store, tmp_path: Path):
    import threading

    folder = tmp_path / "lib"
    folder.mkdir()
    (folder / "a.txt").write_text("Alpha.\n")
    answering = threading.Event()
    answering.set()
    library = make_library(store, busy=answering.is_set)
    library.add([folder])
    worker = threading.Thread(target=library.sync)
    worker.start()
    time.sleep(1.0)
    assert library.progress.phase == "indexing" and library.progress.done == 0  # held back
    answering.clear()  # the answer ended
    worker.join(10)
    assert not worker.is_alive() and library.progress.changed == 1
