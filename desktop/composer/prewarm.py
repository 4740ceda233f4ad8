"""Pre-warming while the user types: after a pause, the engine prefills the prompt the
draft would make, so the first token comes soon after Send."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from wren.engine.api import Engine
from wren.engine.context.assemble import ContextOverflow

from ..bridge import Tasks
from .composer import Composer

PAUSE_MS = 500  # typing pauses this long before the draft is worth prefilling
MAX_DRAFT_CHARS = 100_000  # a larger draft (a pasted file) is not pre-warmed: Send checks it


class Prewarmer(QObject):
    overflow = Signal(str)  # the draft cannot fit the model's window: the engine's reason
    warming = Signal(int)  # the engine took the draft to prefill: its prompt's tokens (engine.chat.prepared() waits for it)

    def __init__(self, engine: Engine, composer: Composer, tasks: Tasks,
                 conversation: Callable[[], int | None], parent: QObject | None = None):
        super().__init__(parent)
        self._engine = engine
        self._composer = composer
        self._tasks = tasks
        self._conversation = conversation
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(PAUSE_MS)
        self._timer.timeout.connect(self._start)
        composer.changed.connect(self._timer.start)

    def _start(self) -> None:
        conversation_id = self._conversation()
        text = self._composer.text()
        if self._engine.models.current is None or not text.strip() or len(text) > MAX_DRAFT_CHARS:
            return  # (a new chat, conversation None, is warmed too)
        self._tasks.run(self._run(conversation_id, text), what="pre-warming")

    async def _run(self, conversation_id: int | None, text: str) -> None:
        try:
            tokens = await self._engine.chat.prepare(conversation_id, text)
        except ContextOverflow as exc:
            self.overflow.emit(str(exc))
            return
        if tokens is not None:
            self.warming.emit(tokens)
