"""A message a search result was opened at: the words searched for, marked in its text."""

from __future__ import annotations

import re
from collections.abc import Sequence

from PySide6.QtGui import QColor, QPalette, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit, QWidget


def mark_terms(widget: QWidget, terms: Sequence[str]) -> int:
    """Mark every occurrence of `terms` in the text views inside `widget` (none: unmark);
    how many were marked."""
    pattern = re.compile("|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)), re.IGNORECASE) if terms else None
    marked = 0
    for view in widget.findChildren(QTextEdit):
        selections = []
        if pattern is not None:
            fmt = QTextCharFormat()
            colour = QColor(view.palette().color(QPalette.ColorRole.Highlight))
            colour.setAlpha(110)
            fmt.setBackground(colour)
            text = view.toPlainText()
            for match in pattern.finditer(text):
                cursor = QTextCursor(view.document())
                cursor.setPosition(match.start())
                cursor.setPosition(match.end(), QTextCursor.MoveMode.KeepAnchor)
                selection = QTextEdit.ExtraSelection()
                selection.cursor, selection.format = cursor, fmt  # type: ignore[misc]
                selections.append(selection)
        view.setExtraSelections(selections)
        marked += len(selections)
    return marked
