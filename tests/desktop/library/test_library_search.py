"""The Library page's search, offscreen over a real library: typing a question and pressing
Enter lists the matching passages with their file and place, the best first; a query that
matches nothing says so; an empty one clears the list; Enter on a result opens its passage."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from tests.desktop.library.test_library_window import docs, library_window, open_page, texts  # noqa: F401


def search(qtbot, page, query: str) -> None:
    page.search_box.clear()
    qtbot.keyClicks(page.search_box, query)
    qtbot.keyClick(page.search_box, Qt.Key.Key_Return)


def test_searching_lists_passages_and_enter_opens_one(open_window, qtbot, arun, docs):  # noqa: F811
    window = library_window(open_window)
    arun(window.engine.library.add([str(docs)]))
    arun(window.engine.library.sync())
    page = open_page(window, qtbot)
    search(qtbot, page, "thermocouple error")
    qtbot.waitUntil(lambda: page.results.count() > 0, timeout=5000)
    first = texts(page.results)[0]
    assert first.startswith("kiln.md — Kiln › Errors, line 5\n") and "thermocouple failed" in first
    assert page.results.item(0).toolTip() == str(docs.resolve() / "kiln.md")
    assert not any("cake" in t for t in texts(page.results))  # only passages with the words
    page.results.setCurrentRow(0)
    page.results.setFocus()
    qtbot.keyClick(page.results, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.library.sources.viewer is not None, timeout=5000)
    viewer = window.library.sources.viewer
    assert "thermocouple failed" in viewer.text.toPlainText() and viewer.where_label.text() == "Kiln › Errors, line 5"

    search(qtbot, page, "zeppelin quartermaster")
    qtbot.waitUntil(lambda: texts(page.results) == ["No passage matches."], timeout=5000)
    assert page.results.item(0).data(Qt.ItemDataRole.UserRole) is None  # nothing to open
    search(qtbot, page, "   ")
    qtbot.waitUntil(lambda: page.results.count() == 0, timeout=5000)
    assert Path(viewer.citation.path).name == "kiln.md"
