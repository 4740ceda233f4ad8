"""Ghost text in the composer: after a pause in typing, the engine proposes how the draft
might go on (`engine.chat.suggest_continuation`), shown grey after the cursor. Right or End takes
it all, Ctrl+Right a word at a time, any other key dismisses it (Tab too: it moves focus, as
everywhere else, so leaving the box never inserts text); the next keystroke cancels a
suggestion still being written, and one made for another draft is never shown."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from PySide6.QtCore import QObject, QRect, Qt, QTimer, Signal
from PySide6.QtGui import QFontMetrics, QPainter, QPalette

from wren.engine.api import Engine

from ..bridge import Tasks

PAUSE_MS = 550  # typing pauses this long before a suggestion is asked for: after pre-warming (500) starts
_WORD = re.compile(r"\s*\S+")


def next_word(ghost: str) -> str:
    """The part of `ghost` that Ctrl+Right takes: any spaces, then one word."""
    match = _WORD.match(ghost)
    return match.group(0) if match else ghost


def ghost_lines(text: str, first_width: int, width: int, metrics: QFontMetrics) -> list[str]:
    """`text` broken at spaces into lines: the first fits `first_width` (what is left of the
    cursor's line), the others `width`. A word too long for an empty line gets a line alone."""
    lines: list[str] = []
    line, room = "", max(0, first_width)
    for word in re.findall(r"\s*\S+|\s+$", text):
        candidate = line + word
        if metrics.horizontalAdvance(candidate) <= room or (not line and not lines and room >= width):
            line = candidate
            continue
        lines.append(line)
        line, room = word.lstrip(), width
    lines.append(line)
    return lines


def paint_ghost(edit, text: str) -> None:
    """Draw `text` grey after `edit`'s cursor (on its viewport), wrapped like the editor."""
    viewport = edit.viewport()
    painter = QPainter(viewport)
    try:
        colour = edit.palette().color(QPalette.ColorRole.PlaceholderText)
        painter.setPen(colour)
        painter.setFont(edit.font())
        metrics = QFontMetrics(edit.font())
        cursor = edit.cursorRect()
        margin = int(edit.document().documentMargin())
        right = viewport.width() - margin
        lines = ghost_lines(text, right - cursor.right(), right - margin, metrics)
        height = metrics.lineSpacing()
        top = cursor.top()
        for number, line in enumerate(lines):
            left = cursor.right() if number == 0 else margin
            painter.drawText(QRect(left, top + number * height, right - left, height),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), line)
    finally:
        painter.end()


class GhostController(QObject):
    """Asks for a suggestion after each pause and puts it in the composer's editor."""

    shown = Signal(str)  # a suggestion is now on screen

    def __init__(self, engine: Engine, composer, tasks: Tasks, conversation: Callable[[], int | None],
                 temporary: Callable[[], bool] = lambda: False, parent: QObject | None = None):
        super().__init__(parent)
        self._engine = engine
        self._composer = composer
        self._edit = composer.edit
        self._tasks = tasks
        self._conversation = conversation
        self._temporary = temporary
        self._task: asyncio.Task | None = None
        self.requests = 0  # suggestions asked for (for tests and the stall benchmark)
        self.cancelled = 0  # of those, ended by a keystroke
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(PAUSE_MS)
        self._timer.timeout.connect(self._start)
        composer.changed.connect(self._changed)

    def set_pause(self, ms: int) -> None:
        self._timer.setInterval(ms)

    def _changed(self) -> None:
        if self._edit.ghost_visible():
            return  # a word of the suggestion was taken: the rest stays
        self._edit.clear_ghost()
        self.cancel()
        self._timer.start()

    def _task_running(self) -> bool:
        return self._task is not None and not self._task.done()

    def cancel(self) -> None:
        self._timer.stop()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            self.cancelled += 1

    def _start(self) -> None:
        composer, edit = self._composer, self._edit
        if (not composer.ready or composer._streaming or composer.editing_id is not None
                or self._engine.models.current is None or not edit.cursor_at_end()):
            return
        draft = edit.toPlainText()
        if not draft.strip():
            return
        self.requests += 1
        self._task = self._tasks.run(self._run(draft), what="suggesting how the message goes on")

    async def _run(self, draft: str) -> None:
        suggestion = await self._engine.chat.suggest_continuation(
            draft, self._conversation(), temporary=self._temporary())
        if self._edit.set_ghost(str(suggestion), suggestion.draft):
            self.shown.emit(str(suggestion))
