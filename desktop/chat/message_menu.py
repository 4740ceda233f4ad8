"""An answer's menu (the "⋯" button in its header): the actions used now and then, kept out
of the button row beside Copy and Regenerate. Replay lives here: it makes an identical copy,
so it is not a button next to Regenerate, which makes a different one."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QToolButton, QWidget

from wren.engine.records import MessageInfo, Role


def replay_state(info: MessageInfo | None) -> tuple[bool, str]:
    """Whether an answer can be replayed exactly, and the Replay action's tooltip saying so.
    A sampled answer needs the seed it used (recorded since every sampled answer keeps one);
    a greedy one (temperature 0) is the same every time without one."""
    if info is None or info.role is not Role.ASSISTANT:
        return False, ""
    sampling = info.sampling or {}
    seed, temperature = sampling.get("seed"), sampling.get("temperature")
    model = info.model or "its model"
    if isinstance(seed, int) and not isinstance(seed, bool):
        return True, (f"Write this answer again with {model}, the same settings and seed {seed}: "
                      "the same text, token for token (kept beside this one)")
    if sampling and temperature == 0:
        return True, (f"Write this answer again with {model} and the same settings (it always took "
                      "the likeliest token): the same text (kept beside this one)")
    return False, "This answer kept no seed (it was written before Wren recorded them), so it cannot be replayed"


class MessageMenuButton(QToolButton):
    """"⋯": a Tab stop whose menu opens with Space, Enter or Alt+Down, as a click opens it."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setText("⋯")
        self.setObjectName("messageMenuButton")
        self.setAccessibleName("More actions")
        self.setToolTip("More actions for this answer")
        self.setAutoRaise(True)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.menu_ = QMenu(self)
        self.menu_.setObjectName("messageMenu")
        self.menu_.setToolTipsVisible(True)  # why Replay is off, for an answer that kept no seed
        self.replay_action = QAction("Replay (same seed, same text)", self.menu_)
        self.replay_action.setObjectName("replayAction")
        self.menu_.addAction(self.replay_action)
        self.setMenu(self.menu_)

    def set_replay(self, enabled: bool, why: str) -> None:
        self.replay_action.setEnabled(enabled)
        self.replay_action.setToolTip(why)

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            self.showMenu()
            return
        super().keyPressEvent(event)
