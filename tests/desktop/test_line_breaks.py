"""A single newline in an answer is a line break (poems, addresses, sign-offs); code blocks and
tables keep their own rules. Raw text in, rendered blocks out."""

from __future__ import annotations

from wren.desktop.chat.blocks import LINE_BREAK, hard_breaks
from wren.desktop.chat.body import MarkdownBody
from wren.desktop.chat.segments import CodeSegment, ProseSegment

POEM = "Roses are red,\nViolets are blue,\nSugar is sweet."
ADDRESS = "Send it to:\n\nAda Lovelace\n12 St James's Square\nLondon"
SIGN_OFF = "Thanks for your help.\n\nBest regards,\nSam"


def _prose(body: MarkdownBody) -> list[ProseSegment]:
    return [s for s in body.segments() if isinstance(s, ProseSegment)]


def _lines(segment: ProseSegment) -> list[str]:
    """Each visual line of the rendered document: blocks, and line breaks within a block."""
    doc, lines = segment.document(), []
    block = doc.begin()
    while block.isValid():
        lines.extend(block.text().split("\u2028"))
        block = block.next()
    return lines


def _streamed(text: str, qtbot) -> MarkdownBody:
    body = MarkdownBody()
    qtbot.addWidget(body)
    body.begin_stream()
    for i in range(0, len(text), 3):
        body.append(text[i : i + 3])
    body.finish()
    return body


def test_a_poem_keeps_its_lines(qtbot):
    for body in (MarkdownBody(POEM), _streamed(POEM, qtbot)):
        qtbot.addWidget(body)
        (prose,) = _prose(body)
        assert _lines(prose) == POEM.split("\n")
        assert prose.document().blockCount() == 1  # one paragraph, broken lines: no gaps


def test_an_address_and_a_sign_off_keep_their_lines(qtbot):
    for text in (ADDRESS, SIGN_OFF):
        body = MarkdownBody(text)
        qtbot.addWidget(body)
        (prose,) = _prose(body)
        shown = [line for line in _lines(prose) if line]
        assert shown == [line for line in text.split("\n") if line]


def test_code_blocks_and_tables_keep_their_own_rules(qtbot):
    text = (
        "Two lines\nof prose.\n\n"
        "| name | age |\n|------|-----|\n| Ada  | 36  |\n| Alan | 41  |\n\n"
        "```python\nx = 1\ny = 2\n```\n\n"
        "    indented code\n    second line\n"
    )
    body = MarkdownBody(text)
    qtbot.addWidget(body)
    (code,) = [s for s in body.segments() if isinstance(s, CodeSegment)]
    assert code.code == "x = 1\ny = 2"  # no break markers added inside code
    prose = _prose(body)
    assert _lines(prose[0])[:2] == ["Two lines", "of prose."]
    doc = prose[0].document()
    tables = [f for f in doc.rootFrame().childFrames() if f.__class__.__name__ == "QTextTable"]
    assert len(tables) == 1 and tables[0].rows() == 3 and tables[0].columns() == 2
    assert "indented code\nsecond line" in prose[1].toPlainText()  # still a code block, no trailing spaces


def test_hard_breaks_leaves_markdown_structure_alone():
    br = LINE_BREAK
    assert hard_breaks("one\ntwo\nthree") == f"one{br}two{br}three"
    assert hard_breaks("Intro:\n- one\n- two\n# Head\nText") == "Intro:\n- one\n- two\n# Head\nText"
    assert hard_breaks("Title\n---") == "Title\n---"  # a setext heading stays one
    assert hard_breaks("already  \nbroken\\\nhere") == "already  \nbroken\\\nhere"
    assert hard_breaks("a | b\n--|--\n1 | 2") == "a | b\n--|--\n1 | 2"
    assert hard_breaks("    code\n    more") == "    code\n    more"
    assert hard_breaks("last line stays\n") == "last line stays\n"


def test_lists_headings_and_emphasis_still_render(qtbot):
    body = MarkdownBody("Shopping:\n- eggs\n- milk\n\n**Bold start\nbold end**")
    qtbot.addWidget(body)
    (prose,) = _prose(body)
    doc = prose.document()
    assert sum(1 for b in _blocks(doc) if b.textList() is not None) == 2
    last = list(_blocks(doc))[-1]
    assert last.text() == f"Bold start{LINE_BREAK}bold end"
    assert all(f.charFormat().fontWeight() >= 600 for f in _fragments(last))


def _blocks(doc):
    block = doc.begin()
    while block.isValid():
        yield block
        block = block.next()


def _fragments(block):
    it = block.begin()
    while not it.atEnd():
        if it.fragment().isValid():
            yield it.fragment()
        it += 1
