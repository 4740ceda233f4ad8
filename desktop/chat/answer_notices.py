"""The notes an answer kept about itself (meta["notices"], the engine's AnswerNotice), shown
under its text with a warning sign."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel


def answer_notices(meta: dict | None) -> list[str]:
    """The texts of the notices an answer kept (meta["notices"]: the engine's AnswerNotice)."""
    value = (meta or {}).get("notices")
    items = value if isinstance(value, list) else []
    return [str(n["text"]) for n in items if isinstance(n, dict) and isinstance(n.get("text"), str)]


class NoticesLabel(QLabel):
    """Hidden while the answer has no notices."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("answerNotices")
        self.setAccessibleName("Notes about this answer")
        self.setWordWrap(True)
        self.hide()

    def show_meta(self, meta: dict | None) -> None:
        texts = answer_notices(meta)
        self.setText("\n".join(f"⚠ {t}" for t in texts))
        self.setVisible(bool(texts))
