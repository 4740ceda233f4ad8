"""Search results with a snippet: under each chat's title, the words around the first match
in its messages, the match highlighted (the sidebar's list draws them)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QAbstractTextDocumentLayout, QPalette, QTextDocument
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from wren.engine.records import MessageInfo

SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 2  # a Hit: the list draws it under the title
_WORD = re.compile(r"\w+", re.UNICODE)  # the words the store's full-text search matches
CONTEXT_CHARS = 36  # shown on each side of the match


@dataclass(frozen=True)
class Hit:
    """Where a chat matched a search: the message (None for its title alone) and a snippet."""

    message_id: int | None
    snippet: str  # plain text, the match among it
    terms: tuple[str, ...]

    def html(self, mark: str) -> str:
        """The snippet with every term marked (`mark`: the highlight's colour)."""
        return highlight_html(self.snippet, self.terms, mark)


def search_terms(query: str) -> tuple[str, ...]:
    """The words of a search, as the store matches them (every word, in any order)."""
    return tuple(dict.fromkeys(w.lower() for w in _WORD.findall(query)))


def _pattern(terms: tuple[str, ...]) -> re.Pattern[str] | None:
    if not terms:
        return None
    return re.compile("|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)), re.IGNORECASE)


def find_hit(messages: list[MessageInfo], query: str) -> Hit | None:
    """The first message holding every word of `query`, and the words around its first match."""
    terms = search_terms(query)
    pattern = _pattern(terms)
    if pattern is None:
        return None
    for message in messages:
        text = message.content
        lowered = text.lower()
        if all(t in lowered for t in terms):
            match = pattern.search(text)
            assert match is not None
            return Hit(message.id, snippet_around(text, match.start(), match.end()), terms)
    return None


def snippet_around(text: str, start: int, end: int, context: int = CONTEXT_CHARS) -> str:
    """One line: `context` characters either side of text[start:end], cut at word ends, "…" where cut."""
    left = max(0, start - context)
    right = min(len(text), end + context)
    if left > 0:
        space = text.find(" ", left, start)
        left = space + 1 if space != -1 else left
    if right < len(text):
        space = text.rfind(" ", end, right)
        right = space if space != -1 else right
    body = " ".join(text[left:right].split())
    return ("…" if left > 0 else "") + body + ("…" if right < len(text) else "")


def highlight_html(text: str, terms: tuple[str, ...], mark: str) -> str:
    pattern = _pattern(terms)
    if pattern is None:
        return html.escape(text)
    out, at = [], 0
    for match in pattern.finditer(text):
        out.append(html.escape(text[at:match.start()]))
        out.append(f'<span style="background-color:{mark}; font-weight:600">{html.escape(match.group())}</span>')
        at = match.end()
    out.append(html.escape(text[at:]))
    return "".join(out)


def mark_colour(palette: QPalette) -> str:
    """The highlight behind a match: the selection colour, a third of it over the base."""
    mark, base = palette.color(QPalette.ColorRole.Highlight), palette.color(QPalette.ColorRole.Base)
    mix = [round(m / 3 + b * 2 / 3) for m, b in ((mark.red(), base.red()), (mark.green(), base.green()),
                                                 (mark.blue(), base.blue()))]
    return "#{:02x}{:02x}{:02x}".format(*mix)


class SnippetDelegate(QStyledItemDelegate):
    """A result row: its title (cut with "…"), and under it the snippet with the match
    highlighted; a row with no snippet is drawn as usual by `plain`."""

    def __init__(self, plain: QStyledItemDelegate):
        super().__init__(plain.parent())
        self.plain = plain

    def _document(self, hit: Hit, option: QStyleOptionViewItem, width: int) -> QTextDocument:
        doc = QTextDocument()
        doc.setDefaultFont(option.font)
        doc.setDocumentMargin(0)
        doc.setHtml(hit.html(mark_colour(QApplication.palette())))  # the list's own base is see-through
        doc.setTextWidth(width)
        return doc

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        hint = self.plain.sizeHint(option, index)
        if not isinstance(index.data(SNIPPET_ROLE), Hit):
            return hint
        return QSize(hint.width(), hint.height() + option.fontMetrics.lineSpacing() * 2 + 4)

    def paint(self, painter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        hit = index.data(SNIPPET_ROLE)
        if not isinstance(hit, Hit):
            self.plain.paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        title = opt.text
        opt.text = ""
        style = opt.widget.style() if opt.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        rect = opt.rect.adjusted(6, 2, -6, -2)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        painter.save()
        painter.setPen(opt.palette.color(role))
        line = opt.fontMetrics.lineSpacing()
        painter.drawText(QRectF(rect.left(), rect.top(), rect.width(), line), Qt.AlignmentFlag.AlignLeft,
                         opt.fontMetrics.elidedText(title, Qt.TextElideMode.ElideRight, rect.width()))
        doc = self._document(hit, opt, rect.width())
        painter.translate(QPointF(rect.left(), rect.top() + line + 2))
        painter.setClipRect(QRectF(0, 0, rect.width(), line * 2 + 2))
        context = QAbstractTextDocumentLayout.PaintContext()
        quiet = role if selected else QPalette.ColorRole.PlaceholderText  # the snippet under the title, quieter
        context.palette.setColor(QPalette.ColorRole.Text, opt.palette.color(quiet))
        doc.documentLayout().draw(painter, context)
        painter.restore()
