"""A question before something that cannot be undone: a warning box whose default is Cancel
and whose Yes says what it does, opened without a nested event loop."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QMessageBox, QWidget


def ask_first(parent: QWidget | None, title: str, text: str, *, yes: str, name: str,
              on_yes: Callable[[], object]) -> QMessageBox:
    """Open the box (open(), not exec(): a nested loop would hold up every coroutine); `on_yes`
    runs if the user chose `yes`. Enter and Esc both keep things as they are."""
    box = QMessageBox(QMessageBox.Icon.Warning, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, parent)
    box.setObjectName(name)
    confirm = box.button(QMessageBox.StandardButton.Yes)
    confirm.setText(yes)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)

    def answered(_result: int) -> None:
        if box.clickedButton() is confirm:
            on_yes()

    box.finished.connect(answered)
    box.open()
    return box
