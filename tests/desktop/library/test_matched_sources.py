"""An answer's sources say how each was made: a passage the model cited by its [n] looks as
it always did; one Wren tied to the answer itself (the answer quoted it without a marker)
carries a quiet "matched" tag with a tooltip and an accessible description. Checked on
citations read back from the store, over a real engine and real files."""

from __future__ import annotations

from pathlib import Path

from wren.desktop.library.sources import MATCHED_NOTE, SourcesList
from wren.engine.events import Citation, CitedBy

KILN = "# Kiln\n\n## Errors\n\nError E-3 means the thermocouple failed.\n"
MARKED = "What does error E-3 on the kiln mean?"
QUOTED = "Why did my kiln stop with E-3?"


def reply(prompt: str) -> str:
    """The model's answer to whichever question the prompt asks last: by marker, or a quote."""
    if prompt.rfind(QUOTED) > prompt.rfind(MARKED):
        return "Error E-3 means the thermocouple failed."
    return "The thermocouple failed [1]."


def test_stored_sources_tag_the_passage_wren_matched_and_not_the_cited_one(open_window, qtbot, arun, send,
                                                                            tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kiln.md").write_text(KILN)
    window = open_window(reply)
    window.engine.library.index.embedder = lambda: None  # words-only search, no sentence model
    arun(window.engine.library.add([str(docs)]))
    arun(window.engine.library.sync())
    send(window, MARKED)
    send(window, QUOTED)
    cid = window.conversations.current_id
    window.conversations.new_chat()
    arun(window.conversations.open(cid))  # read back: the citations are the stored ones
    marked, quoted = [w for w in window.chat.message_widgets() if w.message_id is not None][-3::2]
    for answer in (marked, quoted):
        qtbot.waitUntil(lambda a=answer: a.sources is not None, timeout=5000)
    assert [c.cited_by for c in marked.info.citations] == [CitedBy.MARKER]
    assert [c.cited_by for c in quoted.info.citations] == [CitedBy.QUOTED]

    assert marked.sources.tags == {}
    plain = marked.sources.buttons[0]
    assert plain.text() == "[1] kiln.md — Kiln › Errors, line 5"
    assert plain.accessibleDescription() == "" and "matched" not in plain.toolTip()

    tag = quoted.sources.tags[0]
    button = quoted.sources.buttons[0]
    assert button.text() == "[1] kiln.md — Kiln › Errors, line 5"  # the source reads as before
    assert tag.text() == "matched" and tag.isVisible()
    assert tag.toolTip() == MATCHED_NOTE == "Wren matched this passage to the answer; the model did not cite it"
    assert tag.accessibleDescription() == MATCHED_NOTE and button.accessibleDescription() == MATCHED_NOTE
    button.click()  # the tag takes nothing from the source: it still opens the passage
    assert "thermocouple failed" in window.library.sources.viewer.text.toPlainText()


def test_a_meaning_match_is_tagged_and_markers_keep_their_order(qtbot):
    by_meaning = Citation(2, "/docs/kiln.md", {}, "Kiln", "Fire it slowly.", 4, CitedBy.MATCHED)
    marker = Citation(1, "/docs/cake.txt", {}, "", "Bake for forty minutes.", 3)
    panel = SourcesList((marker, by_meaning))
    qtbot.addWidget(panel)
    panel.show()
    assert [b.text() for b in panel.buttons] == ["[1] cake.txt", "[2] kiln.md — Kiln"]
    assert list(panel.tags) == [1] and panel.tags[1].toolTip() == MATCHED_NOTE
    with qtbot.waitSignal(panel.opened) as opened:
        panel.buttons[1].click()
    assert opened.args[0] is by_meaning
