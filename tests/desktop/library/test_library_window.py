"""The library in the window, over a real engine and real files: the Library page adds a
folder and shows its files, the indexing's end and a skipped file with its reason; removing
and searching; an answer citing [1] shows its source under it, and clicking the source (or
Enter on it) opens the passage; sources of an answer read back after a restart; a chat
started in a project belongs to it."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

KILN = "# Kiln\n\n## Errors\n\nError E-3 means the thermocouple failed.\n"


def no_embedder():
    return None  # words-only search: no sentence model loads in these tests


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kiln.md").write_text(KILN)
    (folder / "cake.txt").write_text("Bake the lemon cake for forty minutes.\n")
    (folder / "blob.txt").write_bytes(b"\x00\x01\x02binary\x00" * 50)
    return folder


def texts(widget) -> list[str]:
    return [widget.item(i).text() for i in range(widget.count())]


def library_window(open_window, reply="Hello from Wren."):
    window = open_window(reply)
    window.engine.library.index.embedder = no_embedder
    return window


def open_page(window, qtbot):
    dialog = window.library.open()
    qtbot.waitUntil(dialog.isVisible, timeout=5000)
    return dialog.page


def test_the_page_adds_a_folder_and_shows_its_files_and_the_skipped_one(open_window, qtbot, docs):
    window = library_window(open_window)
    page = open_page(window, qtbot)
    assert texts(page.sources) == ["Nothing yet: add files or a folder."]
    qtbot.waitUntil(lambda: page.progress_label.text() == "Nothing to read yet: add files or a folder.", timeout=5000)
    assert page.progress_bar.isHidden()  # no full bar over an empty library
    page.add([str(docs)])
    qtbot.waitUntil(lambda: any("2 indexed" in t and "1 skipped" in t for t in texts(page.sources)), timeout=20000)
    assert str(docs) in texts(page.sources)[0]
    qtbot.waitUntil(lambda: page.progress_label.text() == "Up to date", timeout=10000)
    assert page.progress_bar.isHidden()  # shown while reading only
    skipped = texts(page.skipped)
    assert len(skipped) == 1 and skipped[0].startswith("blob.txt — ") and "binary" in skipped[0]
    assert page.skipped_label.text() == "Skipped files (1)"


def test_a_bad_path_is_said_and_removing_empties_the_library(open_window, qtbot, arun, docs):
    window = library_window(open_window)
    page = open_page(window, qtbot)
    page.add([str(docs / "missing.md")])
    qtbot.waitUntil(lambda: page.error_label.isVisible(), timeout=5000)
    assert "missing.md" in page.error_label.text() and "nothing was added" in page.error_label.text()
    page.add([str(docs)])
    qtbot.waitUntil(lambda: "2 indexed" in texts(page.sources)[0], timeout=20000)
    page.sources.setCurrentRow(0)
    qtbot.mouseClick(page.remove_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: texts(page.sources) == ["Nothing yet: add files or a folder."], timeout=10000)
    assert arun(window.engine.library.list()) == []


def test_dropping_a_folder_on_the_page_adds_it(open_window, qtbot, arun, docs):
    window = library_window(open_window)
    page = open_page(window, qtbot)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(docs))])
    drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    page.dropEvent(drop)  # Qt delivers a Drop only within a real drag; the handler is what is tested
    assert drop.isAccepted()
    qtbot.waitUntil(lambda: str(docs.resolve()) in texts(page.sources)[0], timeout=10000)
    assert [s["path"] for s in arun(window.engine.library.list())] == [str(docs.resolve())]


def answered_with_sources(open_window, qtbot, arun, send, docs):
    window = library_window(open_window, "The thermocouple failed [1]. See also [7].")
    arun(window.engine.library.add([str(docs)]))
    arun(window.engine.library.sync())
    send(window, "What does error E-3 on the kiln mean?")
    answer = window.chat.last_answer()
    qtbot.waitUntil(lambda: answer.sources is not None, timeout=5000)
    return window, answer


def test_an_answer_lists_the_passage_it_cited_and_a_click_opens_it(open_window, qtbot, arun, send, docs):
    window, answer = answered_with_sources(open_window, qtbot, arun, send, docs)
    # [1] stays; [7] named no passage of the prompt, so the stored answer drops it and the view shows that
    qtbot.waitUntil(lambda: window.chat.last_answer().text() == "The thermocouple failed [1]. See also.",
                    timeout=5000)
    answer = window.chat.last_answer()
    buttons = answer.sources.buttons
    assert [b.text() for b in buttons] == ["[1] kiln.md — Kiln › Errors, line 5"]  # [7] named no passage
    qtbot.mouseClick(buttons[0], Qt.MouseButton.LeftButton)
    viewer = window.library.sources.viewer
    qtbot.waitUntil(viewer.isVisible, timeout=5000)
    assert "thermocouple failed" in viewer.text.toPlainText()
    assert viewer.where_label.text() == "Kiln › Errors, line 5"
    assert viewer.path_label.text() == str(docs.resolve() / "kiln.md")
    assert viewer.open_button.isEnabled()
    # another chat and back: the sources are still under the answer
    cid = window.conversations.current_id
    window.conversations.new_chat()
    arun(window.conversations.open(cid))
    again = window.chat.last_answer()
    assert again.sources is not None and again.sources.buttons[0].text().startswith("[1] kiln.md")


def test_sources_show_under_an_answer_after_a_restart(open_window, qtbot, arun, send, docs, tmp_path):
    db_path = tmp_path / "restart.db"
    window = open_window("The thermocouple failed [1]. See also [7].", db_path=db_path)
    window.engine.library.index.embedder = no_embedder
    arun(window.engine.library.add([str(docs)]))
    arun(window.engine.library.sync())
    send(window, "What does error E-3 on the kiln mean?")
    cid = window.conversations.current_id
    arun(window.conversations.close())
    arun(window.engine.close())
    window.engine._closed_by_test = True
    window.close()
    again = open_window("ok", db_path=db_path)  # a new engine and window over the same file
    arun(again.conversations.open(cid))
    answer = again.chat.last_answer()
    qtbot.waitUntil(lambda: answer.sources is not None, timeout=5000)
    assert [b.text() for b in answer.sources.buttons] == ["[1] kiln.md — Kiln › Errors, line 5"]
    assert answer.text() == "The thermocouple failed [1]. See also."
    answer.sources.buttons[0].click()
    assert "thermocouple failed" in again.library.sources.viewer.text.toPlainText()


def test_enter_on_a_source_opens_the_passage(open_window, qtbot, arun, send, docs):
    window, answer = answered_with_sources(open_window, qtbot, arun, send, docs)
    button = answer.sources.buttons[0]
    button.setFocus()
    qtbot.keyClick(button, Qt.Key.Key_Return)
    viewer = window.library.sources.viewer
    assert viewer is not None and viewer.citation.number == 1 and "thermocouple" in viewer.text.toPlainText()


def test_a_missing_file_cannot_be_opened_but_its_passage_shows(open_window, qtbot, arun, send, docs):
    window, answer = answered_with_sources(open_window, qtbot, arun, send, docs)
    (docs / "kiln.md").unlink()
    answer.sources.buttons[0].click()
    viewer = window.library.sources.viewer
    assert not viewer.open_button.isEnabled() and not viewer.missing.isHidden()
    assert "thermocouple failed" in viewer.text.toPlainText()


def test_a_chat_started_in_a_project_belongs_to_it(open_window, qtbot, arun, send):
    window = library_window(open_window)
    section = window.library.projects
    assert section.tree.isHidden()
    arun(window.library.create_project("Kiln repairs"))
    assert section.project_names() == ["Kiln repairs"] and section.tree.isVisibleTo(window)
    assert window.conversations.project == "Kiln repairs"
    send(window, "How hot does cone 6 fire?")
    inside = window.conversations.current_id
    qtbot.waitUntil(lambda: section.chats_of("Kiln repairs") == [inside], timeout=5000)
    projects = arun(window.engine.projects.list())
    assert projects[0]["chats"] == [inside]
    window.new_chat_action.trigger()  # an ordinary new chat stays outside
    assert window.conversations.project is None
    send(window, "Something else")
    outside = window.conversations.current_id
    assert outside != inside
    window.library.refresh_projects()
    qtbot.waitUntil(lambda: arun(window.engine.projects.list())[0]["chats"] == [inside], timeout=5000)
    # Enter on the project's chat opens it
    item = section.tree.topLevelItem(0).child(0)
    section.tree.itemActivated.emit(item, 0)
    qtbot.waitUntil(lambda: window.conversations.current_id == inside, timeout=5000)



def test_a_source_says_passage_or_passages():
    from wren.desktop.library.page import describe_source

    one = {"path": "/notes/a.md", "kind": "file", "files": {"indexed": 1}, "chunks": 1}
    assert describe_source(one) == "/notes/a.md  (file: 1 indexed; 1 passage)"
    assert describe_source({**one, "chunks": 3}).endswith("; 3 passages)")
