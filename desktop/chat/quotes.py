"""Block quotes with a bar: Qt's Markdown import indents a quote but draws nothing beside it,
so a quoted line read like any indented one. The bar goes in the quote's left margin."""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainter, QPalette, QTextDocument, QTextFormat
from PySide6.QtWidgets import QTextEdit

BAR_WIDTH = 3.0
BAR_STEP = 12.0  # each level of nesting: the next bar this far right (when the quote has no margin)
BAR_GAP = 14.0  # the bar sits this far left of the quoted text


def quote_bars(doc: QTextDocument) -> list[QRectF]:
    """In document coordinates, a bar beside every block of a block quote, one per level."""
    layout = doc.documentLayout()
    bars: list[QRectF] = []
    block = doc.begin()
    while block.isValid():
        fmt = block.blockFormat()
        level = fmt.intProperty(QTextFormat.Property.BlockQuoteLevel)
        if level > 0:
            rect = layout.blockBoundingRect(block)
            # each level's bar a little left of where that level's text begins
            step = fmt.leftMargin() / level if fmt.leftMargin() > 0 else BAR_STEP
            for depth in range(level):
                left = doc.documentMargin() + step * (depth + 1) - BAR_GAP
                bars.append(QRectF(max(doc.documentMargin(), left), rect.top(), BAR_WIDTH, rect.height()))
        block = block.next()
    return bars


def paint_quote_bars(view: QTextEdit) -> None:
    """Draw the bars on `view`'s viewport (after the text: call at the end of paintEvent)."""
    bars = quote_bars(view.document())
    if not bars:
        return
    colour = view.palette().color(QPalette.ColorRole.Mid)
    dx, dy = -view.horizontalScrollBar().value(), -view.verticalScrollBar().value()
    painter = QPainter(view.viewport())
    try:
        for bar in bars:
            painter.fillRect(bar.translated(dx, dy), colour)
    finally:
        painter.end()
