"""The files a message came with, shown under it: one chip per file name (the full path in its
tooltip). The names come from the stored message (its meta "attachments"), so they stay after
a restart; a message shown before it is stored gets the composer's list."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

META_KEY = "attachments"  # the user message's meta: the paths of the files sent with it


def attached_paths(meta: dict | None) -> list[str]:
    """The paths a stored message names as attached (anything else in the field is ignored)."""
    value = (meta or {}).get(META_KEY)
    return [p for p in value if isinstance(p, str) and p] if isinstance(value, list) else []


class AttachedFiles(QWidget):
    """A row of file chips; hidden while the message has no files."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("attachedFiles")
        self._paths: list[str] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.setSpacing(4)
        self._row.addStretch(1)
        self.hide()

    def paths(self) -> list[str]:
        return list(self._paths)

    def names(self) -> list[str]:
        return [Path(p).name for p in self._paths]

    def set_paths(self, paths: Sequence[str]) -> None:
        paths = [str(p) for p in paths]
        if paths == self._paths:
            return
        self._paths = paths
        while self._row.count() > 1:  # the chips; the stretch stays last
            item = self._row.takeAt(0)
            if item is not None and (chip := item.widget()) is not None:
                chip.deleteLater()
        for n, path in enumerate(paths):
            self._row.insertWidget(n, _chip(path))
        names = ", ".join(self.names())
        self.setAccessibleName(f"Attached: {names}" if paths else "")
        self.setVisible(bool(paths))


def _chip(path: str) -> QLabel:
    # The name alone, as the composer's chip shows it: a paperclip emoji drew as an empty
    # box where the system font has no emoji (the offscreen and many Linux fonts).
    chip = QLabel(Path(path).name)
    chip.setObjectName("attachedFileChip")
    chip.setToolTip(f"Attached: {path}")
    chip.setAccessibleName(f"Attached file {Path(path).name}")
    chip.setStyleSheet("#attachedFileChip { border: 1px solid palette(mid); border-radius: 8px; padding: 1px 6px; }")
    return chip
