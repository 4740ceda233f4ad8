"""An answer that starts with a list, heading or quote is drawn as it would be further down:
the first item of a list keeps its number or bullet and its indent (it used to be a plain
paragraph, the list numbered from its second item), whether the answer is shown whole or
streams in token by token."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QTextFormat, QTextListFormat

from wren.desktop.chat.body import MarkdownBody
from wren.desktop.chat.segments import ProseSegment

DECIMAL, DISC, CIRCLE = QTextListFormat.Style.ListDecimal, QTextListFormat.Style.ListDisc, QTextListFormat.Style.ListCircle

# Markdown, then each block's text, list style, nesting and number as the list shows it.
LISTS = [
    ("1. **Bananas**\n2. **Orange**", [("Bananas", DECIMAL, 1, "1."), ("Orange", DECIMAL, 1, "2.")]),
    ("1. One\n2. Two\n3. Three", [("One", DECIMAL, 1, "1."), ("Two", DECIMAL, 1, "2."), ("Three", DECIMAL, 1, "3.")]),
    ("- a\n- b", [("a", DISC, 1, "."), ("b", DISC, 1, ".")]),
    ("* star\n* two", [("star", CIRCLE, 1, "."), ("two", CIRCLE, 1, ".")]),
    ("3. three\n4. four", [("three", DECIMAL, 1, "3."), ("four", DECIMAL, 1, "4.")]),
    ("1. a\n   - nested\n2. b", [("a", DECIMAL, 1, "1."), ("nested", DISC, 2, "."), ("b", DECIMAL, 1, "2.")]),
    ("- one item", [("one item", DISC, 1, ".")]),
    # loose: each item is a paragraph of its own, as the answer streams
    ("1. One\n\n2. Two\n\n3. Three", [("One", DECIMAL, 1, "1."), ("Two", DECIMAL, 1, "2."), ("Three", DECIMAL, 1, "3.")]),
    ("- a\n\n- b", [("a", DISC, 1, "."), ("b", DISC, 1, ".")]),
]


def list_blocks(doc) -> list[tuple[str, object, int, str]]:
    out = []
    block = doc.begin()
    while block.isValid():
        found = block.textList()
        assert found is not None, f"{block.text()!r} is not in a list"
        out.append((block.text(), found.format().style(), found.format().indent(), found.itemText(block)))
        block = block.next()
    return out


def prose_docs(body: MarkdownBody):
    return [seg.document() for seg in body.segments() if isinstance(seg, ProseSegment)]


def streamed(text: str, step: int) -> MarkdownBody:
    body = MarkdownBody()
    body.begin_stream()
    for at in range(0, len(text), step):
        body.append(text[at:at + step])
    body.finish()
    return body


@pytest.mark.parametrize(("markdown", "expected"), LISTS[:7])
def test_a_list_rendered_first_in_a_prose_segment_keeps_every_item(qtbot, markdown, expected):
    segment = ProseSegment()
    qtbot.addWidget(segment)
    segment.render_markdown(markdown, final=True)
    doc = segment.document()
    assert list_blocks(doc) == expected
    assert doc.toPlainText().split("\n") == [text for text, *_ in expected]


@pytest.mark.parametrize(("markdown", "expected"), LISTS)
@pytest.mark.parametrize("step", [0, 1, 3])  # 0: the finished answer in one go; else streamed, so many characters a token
def test_an_answer_that_starts_with_a_list_shows_it_whole(qtbot, markdown, expected, step):
    body = MarkdownBody(markdown) if step == 0 else streamed(markdown, step)
    qtbot.addWidget(body)
    (doc,) = prose_docs(body)
    assert list_blocks(doc) == expected
    assert doc.toPlainText().split("\n") == [text for text, *_ in expected]


def shape(doc) -> list[tuple]:
    """What each block is drawn as: text, heading, quote level and margin, rule, list."""
    out = []
    block = doc.begin()
    while block.isValid():
        fmt, found = block.blockFormat(), block.textList()
        out.append((
            block.text(), fmt.headingLevel(), fmt.intProperty(QTextFormat.Property.BlockQuoteLevel), fmt.leftMargin(),
            fmt.hasProperty(QTextFormat.Property.BlockTrailingHorizontalRulerWidth),
            None if found is None else (found.format().style(), found.format().indent(), found.itemText(block),
                                        found.count()),
        ))
        block = block.next()
    return out


@pytest.mark.parametrize("markdown", [
    *(markdown for markdown, _ in LISTS),
    "# A heading\n\nText under it.",
    "## Smaller\nright under",
    "> A quote\n> that goes on\n\nAfter it.",
    "> - a list\n> - in a quote",
    "1) with parentheses\n2) two",
    "- [ ] a task\n- [x] done",
    "---\n\nUnder a rule.",
    "1. Item\n   more of it\n2. Next",
])
@pytest.mark.parametrize("stream", [False, True])
def test_the_start_of_an_answer_is_drawn_as_anywhere_else(qtbot, markdown, stream):
    first = streamed(markdown, 2) if stream else MarkdownBody(markdown)
    later = streamed("Before.\n\n" + markdown, 2) if stream else MarkdownBody("Before.\n\n" + markdown)
    qtbot.addWidget(first)
    qtbot.addWidget(later)
    (start,), (after,) = prose_docs(first), prose_docs(later)
    assert shape(after)[0][0] == "Before."
    assert shape(start) == shape(after)[1:]
