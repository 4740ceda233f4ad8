"""The composer's live token count: debounced, computed off the GUI thread, never stale."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from PySide6.QtCore import QObject, QTimer, Signal

from ..bridge import Tasks
from .composer import Composer

DEBOUNCE_MS = 350

Counter = Callable[[str], Awaitable[int]]


class TokenCounter(QObject):
    """Counts the draft after typing pauses; a result for an older draft is dropped."""

    counted = Signal(int)

    def __init__(self, composer: Composer, tasks: Tasks, parent: QObject | None = None):
        super().__init__(parent)
        self._composer = composer
        self._tasks = tasks
        self._count: Counter | None = None
        self._limit = 0
        self._used = 0
        self._edit_base = 0  # while a message is edited: what the chat takes before it
        self._generation = 0
        self.last: int | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._start)
        # Cheap to receive; the text is read only once typing pauses.
        composer.changed.connect(self._changed)

    def set_model(self, count: Counter | None, context_length: int) -> None:
        self._count = count
        self._limit = context_length
        self._changed()

    def set_used(self, tokens: int) -> None:
        """Tokens the conversation already takes in the context window."""
        self._used = tokens
        self._show()

    def set_edit_base(self, tokens: int) -> None:
        """Tokens the chat takes before the message being edited: the edited text replaces
        that message and what followed it, so it is counted on top of these, not of the whole
        chat."""
        self._edit_base = tokens
        self._show()

    def _changed(self) -> None:
        self._generation += 1
        self._timer.start()

    def _start(self) -> None:
        if self._count is None:
            self.last = None
            self._show()
            return
        generation = self._generation
        text = self._composer.text()
        if not text:
            self._finish(generation, 0)
            return
        self._tasks.run(self._run(generation, text), what="counting tokens")

    async def _run(self, generation: int, text: str) -> None:
        assert self._count is not None
        # The engine counts big drafts without holding the GIL, so one exact count of the
        # whole draft keeps the window responsive.
        total = await self._count(text)
        self._finish(generation, total)

    def _finish(self, generation: int, count: int) -> None:
        if generation != self._generation:
            return  # the draft changed while counting; a newer count is on its way
        self.last = count
        self._show()
        self.counted.emit(count)

    def _show(self) -> None:
        if self._count is None or not self._limit:
            self._composer.set_token_text("")
            return
        draft = self.last or 0
        total = (self._edit_base if self._composer.editing_id is not None else self._used) + draft
        text = f"{total:,} / {self._limit:,} tokens"
        if draft:
            text = f"{draft:,} in this message · {text}"
        self._composer.set_token_text(text, over=total > self._limit)
