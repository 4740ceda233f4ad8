"""Tokens you can see: a text drawn as the loaded model's tokens, each in its own box with
alternating backgrounds, its id on hover, spaces as ·, tabs as → and newlines as ↵ (the
line then breaks as the text does). Used in the composer's popover and the inspector."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontDatabase, QFontMetrics, QPainter, QPalette
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from wren.engine.api import Engine
from wren.engine.token_view import TokenPiece, visible

from ..bridge import Tasks

MAX_SHOWN = 4000  # tokens drawn at most; the count above still says how many there are
PAD = 3  # pixels around each token's text
GAP = 1  # between boxes


def label_for(piece: TokenPiece) -> str:
    """What a token's box shows: its text with whitespace made visible."""
    return visible(piece.text) if piece.text else "∅"


def tooltip_for(piece: TokenPiece) -> str:
    return f"id {piece.id} · characters {piece.start}–{piece.end} · {label_for(piece)!s}"


class TokenStrip(QWidget):
    """The tokens of one text, laid out like the text and wrapped to the width."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("tokenStrip")
        self.setAccessibleName("Tokens")
        self.setMouseTracking(True)
        self.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.pieces: list[TokenPiece] = []
        self._boxes: list[QRect] = []
        self._laid_width = -1

    def set_pieces(self, pieces: list[TokenPiece]) -> None:
        self.pieces = list(pieces[:MAX_SHOWN])
        self._laid_width = -1
        self.setAccessibleDescription(f"{len(pieces):,} tokens")
        self.updateGeometry()
        self.update()

    def _layout(self, width: int) -> list[QRect]:
        if width == self._laid_width:
            return self._boxes
        metrics = QFontMetrics(self.font())
        height = metrics.height() + 2 * PAD
        x = y = 0
        boxes = []
        for piece in self.pieces:
            w = metrics.horizontalAdvance(label_for(piece)) + 2 * PAD
            if x > 0 and x + w > width:
                x, y = 0, y + height + GAP
            boxes.append(QRect(x, y, w, height))
            x += w + GAP
            if "\n" in piece.text:
                x, y = 0, y + height + GAP  # the text breaks its line here: so does the view
        self._boxes, self._laid_width = boxes, width
        return boxes

    def boxes(self) -> list[QRect]:
        return self._layout(max(1, self.width()))

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        boxes = self._layout(max(1, width))
        return (boxes[-1].bottom() + 1) if boxes else QFontMetrics(self.font()).height()

    def sizeHint(self) -> QSize:
        return QSize(480, self.heightForWidth(480))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.setMinimumHeight(self.heightForWidth(self.width()))

    def piece_at(self, pos: QPoint) -> int | None:
        for index, box in enumerate(self.boxes()):
            if box.contains(pos):
                return index
        return None

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        palette = self.palette()
        text_colour = palette.color(QPalette.ColorRole.Text)
        shades = (palette.color(QPalette.ColorRole.AlternateBase), palette.color(QPalette.ColorRole.Midlight))
        if shades[0] == shades[1]:
            shades = (shades[0], QColor(shades[0]).darker(115))
        for index, (piece, box) in enumerate(zip(self.pieces, self.boxes())):
            if not box.intersects(event.rect()):
                continue
            painter.fillRect(box, shades[index % 2])
            painter.setPen(text_colour)
            painter.drawText(box, int(Qt.AlignmentFlag.AlignCenter), label_for(piece))
        painter.end()

    def event(self, event) -> bool:
        if event.type() == event.Type.ToolTip:
            index = self.piece_at(event.pos())
            if index is None:
                QToolTip.hideText()
                event.ignore()
            else:
                QToolTip.showText(event.globalPos(), tooltip_for(self.pieces[index]), self, self.boxes()[index])
            return True
        return super().event(event)


class TokenPanel(QWidget):
    """A count line over a scrolling TokenStrip; `show_text` fills it from the engine."""

    loaded = Signal(int)  # the token count

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.count_label = QLabel("")
        self.count_label.setObjectName("tokenViewCount")
        self.strip = TokenStrip()
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.strip)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.count_label)
        layout.addWidget(scroll, 1)

    async def show_text(self, engine: Engine, text: str) -> list[TokenPiece]:
        self.count_label.setText("Counting…")
        pieces = await engine.models.tokens(text)
        model = engine.models.current.name if engine.models.current else await engine.models.default()
        self.set_pieces(pieces, model)
        return pieces

    def set_pieces(self, pieces: list[TokenPiece], model: str = "") -> None:
        shown = "" if len(pieces) <= MAX_SHOWN else f" (the first {MAX_SHOWN:,} shown)"
        by = f" for {model}" if model else ""
        self.count_label.setText(f"{len(pieces):,} tokens{by}{shown} · hover a token for its id")
        self.strip.set_pieces(pieces)
        self.loaded.emit(len(pieces))


class TokenPopover(QFrame):
    """The composer's popover: the draft as tokens, under the Tokens button."""

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("tokenPopover")
        self.setAccessibleName("The draft as tokens")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._engine = engine
        self._tasks = tasks
        self.panel = TokenPanel()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.panel)
        self.resize(520, 260)

    def show_for(self, text: str, anchor: QWidget | None = None):
        """Show `text` as tokens next to `anchor`; returns the loading task."""
        if anchor is not None:
            spot = anchor.mapToGlobal(QPoint(0, 0))
            self.move(spot.x(), max(0, spot.y() - self.height() - 4))
        self.show()
        if not text:
            self.panel.set_pieces([])
            return None
        return self._tasks.run(self.panel.show_text(self._engine, text), what="cutting the draft into tokens")
