"""Settings → Personalization: custom instructions ("about me", "how to respond"), which every
prompt carries, and how much of the context window is kept for the answer."""

from __future__ import annotations

from PySide6.QtWidgets import QFormLayout, QLabel, QPlainTextEdit, QSpinBox, QVBoxLayout, QWidget

from wren.engine.api import Engine
from wren.engine.context.settings import ContextSettings, Instructions


def _box(name: str, accessible: str, placeholder: str) -> QPlainTextEdit:
    box = QPlainTextEdit()
    box.setObjectName(name)
    box.setAccessibleName(accessible)
    box.setPlaceholderText(placeholder)
    box.setTabChangesFocus(True)
    return box


class PersonalPage(QWidget):
    def __init__(self, engine: Engine, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("personalPage")
        self.engine = engine
        self._instructions = Instructions()
        self._context = ContextSettings()
        self.about_me = _box("aboutMeEdit", "What Wren should know about you",
                             "e.g. I'm a nurse in Porto; I read English and Portuguese.")
        self.how_to_respond = _box("howToRespondEdit", "How Wren should respond",
                                   "e.g. Be brief. Use metric units. Show code in Python.")
        self.reserve = QSpinBox(minimum=0, maximum=1_000_000, singleStep=128)
        self.reserve.setObjectName("answerReserveSpin")
        self.reserve.setAccessibleName("Tokens kept for the answer")
        self.reserve.setSpecialValueText("automatic (a quarter of the window)")
        self.reserve.setSuffix(" tokens")
        note = QLabel("Wren puts these into every chat's prompt (temporary chats too); they are never cut "
                      "to make room. Memories are separate: see the Memory tab.")
        note.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Room kept for the answer", self.reserve)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addWidget(QLabel("What should Wren know about you?"))
        layout.addWidget(self.about_me, 1)
        layout.addWidget(QLabel("How should Wren respond?"))
        layout.addWidget(self.how_to_respond, 1)
        layout.addLayout(form)

    async def load(self) -> None:
        self._instructions = await self.engine.settings.instructions()
        self._context = await self.engine.settings.context()
        self.about_me.setPlainText(self._instructions.about_me)
        self.how_to_respond.setPlainText(self._instructions.how_to_respond)
        self.reserve.setValue(self._context.answer_reserve or 0)

    async def save(self) -> None:
        """Raises InvalidRequest (too long, bad number) before writing anything it refuses."""
        about, how = self.about_me.toPlainText().strip(), self.how_to_respond.toPlainText().strip()
        if (about, how) != (self._instructions.about_me, self._instructions.how_to_respond):
            self._instructions = await self.engine.settings.set_instructions(about, how)
        reserve = self.reserve.value() or None
        if reserve != self._context.answer_reserve:
            self._context = await self.engine.settings.set_context(answer_reserve=reserve)
