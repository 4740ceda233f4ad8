"""`wren ask` in this process, answered by the scripted backend: escapes on a terminal,
--file, standard input with words, and which conversations it keeps."""

from __future__ import annotations

import io
import json
import sqlite3
import sys

import pytest

from tests.engine.cli.conftest import FakeTerminal, set_reply
from wren.engine.terminal.main import main

ESC = "\x1b"
HOSTILE = f"safe {ESC}[31mred{ESC}[0m {ESC}]0;pwned\x07{ESC}]52;c;aGk=\x07bell\x07 \x9b2J{ESC}[2Jend"


def _conversations(capsys) -> list[dict]:
    capsys.readouterr()
    assert main(["conversations", "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _question(capsys, conv_id: int) -> str:
    assert main(["conversations", "export", str(conv_id), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["messages"][0]["content"]


# -- terminal escapes ----------------------------------------------------------------------

def test_answer_on_a_terminal_has_no_control_characters(scripted, monkeypatch):
    set_reply(scripted, HOSTILE)
    tty = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", tty)
    assert main(["ask", "hello"]) == 0
    shown = tty.getvalue()
    assert shown == "safe red bell end\n"
    assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in shown)


def test_answer_to_a_pipe_is_left_as_it_came(scripted, capsys):
    set_reply(scripted, HOSTILE)
    assert main(["ask", "hello"]) == 0
    assert capsys.readouterr().out == HOSTILE + "\n"


def test_json_on_a_terminal_escapes_c1_controls_too(scripted, monkeypatch):
    set_reply(scripted, "a\x9b2Jb\x1b[0m")
    tty = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", tty)
    assert main(["ask", "--json", "hello"]) == 0
    text = tty.getvalue()
    assert "\x9b" not in text and ESC not in text
    deltas = "".join(e["text"] for e in map(json.loads, text.splitlines()) if e["type"] == "delta")
    assert deltas == "a\x9b2Jb\x1b[0m"  # the data is whole: only its spelling is ASCII


def test_titles_and_exports_on_a_terminal_are_cleaned(scripted, capsys, monkeypatch):
    set_reply(scripted, f"answer {ESC}]0;pwned\x07text")
    assert main(["ask", "a question"]) == 0
    (row,) = _conversations(capsys)
    # A title with escapes, as an older Wren or another program may have written it.
    con = sqlite3.connect(scripted_db())
    with con:
        con.execute("UPDATE conversation SET title = ? WHERE id = ?", (f"title {ESC}[2J\x9b5m with escapes", row["id"]))
    con.close()
    tty = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", tty)
    assert main(["conversations", "list"]) == 0
    assert main(["conversations", "show", str(row["id"])]) == 0
    listed = tty.getvalue()
    assert ESC not in listed and "\x9b" not in listed
    assert "title  with escapes" in listed and "answer text" in listed


# -- --file, standard input and words -------------------------------------------------------

def test_file_then_stdin_then_words(scripted, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # short names: the tiny model reads few tokens
    notes = tmp_path / "notes.md"
    notes.write_text("first line\nsome ```code``` inside\n", encoding="utf-8")
    other = tmp_path / "other.txt"
    other.write_text("second file", encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"piped text\n"), encoding="utf-8"))
    assert main(["ask", "--file", "notes.md", "--file", "other.txt", "summarize", "these"]) == 0
    (row,) = _conversations(capsys)
    assert row["title"] == "summarize these"
    assert _question(capsys, row["id"]) == (
        "File notes.md:\n````\nfirst line\nsome ```code``` inside\n````\n\n"
        "File other.txt:\n```\nsecond file\n```\n\n"
        "piped text\n\n"
        "summarize these"
    )


def test_a_file_alone_is_a_question(scripted, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.txt").write_text("what is in here?", encoding="utf-8")
    assert main(["ask", "--file", "q.txt"]) == 0
    (row,) = _conversations(capsys)
    assert row["title"] == "q.txt"
    assert _question(capsys, row["id"]) == "File q.txt:\n```\nwhat is in here?\n```"


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "missing.txt", "no such file"),
    (lambda d: d, "is a folder"),
    (lambda d: _write(d / "image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4), "not a text file"),
    (lambda d: _write(d / "latin1.txt", "caf\xe9 na\xefve \xe0 la cr\xe8me ".encode("latin-1") * 20), "not a text file"),
    (lambda d: _write(d / "huge.log", b"x" * 1_000_001), "takes up to 1.0 MB"),
])
def test_file_errors_are_clear_and_nothing_is_kept(scripted, capsys, tmp_path, make, message):
    path = make(tmp_path)
    assert main(["ask", "--file", str(path), "explain"]) == 2
    err = capsys.readouterr().err
    assert f"--file {path}" in err and message in err
    assert _conversations(capsys) == []
    assert scripted.loaded == []  # refused before the model loaded


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_a_stray_bad_byte_in_a_text_file_is_replaced(scripted, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.txt").write_bytes(b"plain text " * 10 + b"\xff" + b" more text")
    assert main(["ask", "--file", "m.txt", "ok?"]) == 0
    (row,) = _conversations(capsys)
    assert "\ufffd more text" in _question(capsys, row["id"])


# -- what is kept -----------------------------------------------------------------------------

def _dump(db) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def test_cli_conversations_are_marked_for_the_terminal_group(scripted, capsys):
    from wren.desktop.sidebar.grouping import TERMINAL, group_by_day
    from wren.engine.records import ConversationInfo
    from wren.engine.store import Store

    assert main(["ask", "from", "the", "terminal"]) == 0
    (row,) = _conversations(capsys)
    assert row["terminal"] is True
    store = Store(scripted_db())
    try:
        window = store.create_conversation(title="from the window")
        convs: list[ConversationInfo] = store.list_conversations()
    finally:
        store.close()
    groups = group_by_day(convs)
    assert [g.label for g in groups][-1] == TERMINAL
    assert [c.title for c in groups[-1].conversations] == ["from the terminal"]
    assert all(window.id != c.id for c in groups[-1].conversations)


def scripted_db():
    from wren.engine import paths

    return paths.database_path()


def test_no_save_leaves_nothing_in_the_database(scripted, capsys):
    assert main(["ask", "keep", "this"]) == 0  # something to compare against
    capsys.readouterr()
    set_reply(scripted, "a private answer")
    before = _dump(scripted_db())
    assert main(["ask", "--no-save", "a private question"]) == 0
    assert capsys.readouterr().out == "a private answer\n"
    after = _dump(scripted_db())
    assert after == before
    assert not any("private" in line for line in after)
    on_disk = b"".join(p.read_bytes() for p in scripted_db().parent.rglob("*") if p.is_file())
    assert b"private" not in on_disk  # nor in a journal, a log or anywhere else in the data folder


def test_the_setting_keeps_nothing_and_save_overrides_it(scripted, capsys):
    from wren.engine.store import Store
    from wren.engine.terminal.main import SAVE_SETTING

    store = Store(scripted_db())
    store.set_setting(SAVE_SETTING, False)
    store.close()
    before = _dump(scripted_db())
    assert main(["ask", "not kept"]) == 0
    assert _dump(scripted_db()) == before
    assert main(["ask", "--save", "kept"]) == 0
    assert [row["title"] for row in _conversations(capsys)] == ["kept"]


def test_engine_notices_go_to_standard_error(capsys):
    """A notice from the engine (a damaged model file) is printed on stderr, never mixed
    into the answer on stdout."""
    from wren.engine.records import EngineNotice
    from wren.engine.terminal.main import _print_notices

    class Finished:
        def notices(self):
            return [EngineNotice("model_damaged", "model.gguf is damaged: re-import it", "/m/model.gguf")]

    _print_notices(Finished())
    out, err = capsys.readouterr()
    assert out == "" and "wren: model.gguf is damaged: re-import it" in err


def test_an_answer_cut_at_its_length_limit_says_so_and_how_to_go_on(scripted, capsys):
    """It ended mid-sentence with exit 0 and nothing said: it looked like a finished answer."""
    set_reply(scripted, "one two three four five six seven eight nine ten eleven twelve")
    assert main(["ask", "--max-tokens", "3", "count"]) == 0
    said = capsys.readouterr()
    (row,) = _conversations(capsys)
    assert main(["conversations", "export", str(row["id"]), "--format", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)["messages"][1]
    assert f"wren: note: the answer reached its length limit (max_tokens); `wren continue {answer['id']}` goes on" \
        in said.err
    assert main(["ask", "hello"]) == 0  # a whole answer: no note
    assert "length limit" not in capsys.readouterr().err


def test_an_answer_that_failed_before_any_of_it_came_leaves_standard_output_empty(scripted, capsys):
    """A blank line there read as an empty answer (a remote provider that could not be reached)."""
    def broken(_prompt):
        raise RuntimeError("the model ran out of memory")

    set_reply(scripted, broken)
    assert main(["ask", "hello"]) == 1
    said = capsys.readouterr()
    assert said.out == "" and "wren: " in said.err
