"""The composer's tool controls: a "Tools" button whose menu ticks the tools this chat may
use (kept per chat, sent as SendOptions.tools), and "Attach file" with a removable chip
per attached file (SendOptions.attachments; their text goes into the prompt, and the
read_attachment tool reads only these).

Two layers, said in the menu: Settings → Tools switches a tool on or off everywhere; this menu
picks, among those on, the ones this chat uses. A new chat starts from the saved default
("Use these for new chats" here sets it). The menu also says when the loaded model does not
call tools at all."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QToolButton,
    QWidget,
)

from wren.engine.tools.registry import ToolInfo


class TickMenu(QMenu):
    """A menu whose checkable entries tick without closing it (Space, Enter or a click), so
    several tools can be chosen in one visit; other entries behave as usual."""

    def _tick(self, action: QAction | None) -> bool:
        if action is None or not action.isCheckable() or not action.isEnabled():
            return False
        action.trigger()  # toggles it and says so (toggled), as a click would
        return True

    def mouseReleaseEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.LeftButton and self._tick(self.actionAt(event.position().toPoint())):
            return
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key.Key_Space, Qt.Key.Key_Return, Qt.Key.Key_Enter) and self._tick(self.activeAction()):
            return
        super().keyPressEvent(event)


class ToolsButton(QToolButton):
    """Shows how many tools the chat may use; its menu has one checkbox per enabled tool."""

    changed = Signal(list)  # the names now chosen, in the menu's order
    default_chosen = Signal(list)  # "Use these for new chats": the names new chats start with
    # The window should load the tools: False when first shown (no MCP server is started),
    # True when the menu opens (the chat's MCP servers start, so their tools can be listed).
    refresh_requested = Signal(bool)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("toolsButton")
        self.setAutoRaise(True)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = TickMenu(self)
        self.menu_.setObjectName("toolsMenu")
        self.menu_.setAccessibleName("Tools this chat may use")
        self.menu_.aboutToShow.connect(lambda: self.refresh_requested.emit(True))
        self.setMenu(self.menu_)
        self.tools: list[ToolInfo] = []
        self._chosen: list[str] = []
        self._default: list[str] = []  # what a new chat starts with (setting tools.default)
        self._support: tuple[bool, str] | None = None  # (the model calls tools, why), once known
        self.loaded = False
        self._asked = False
        self._show()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._asked:
            self._asked = True
            QTimer.singleShot(0, self, lambda: self.refresh_requested.emit(False))

    def set_tools(self, tools: list[ToolInfo], chosen: list[str]) -> None:
        """Every tool and this chat's choice; switched-off tools are not offered."""
        tools = [t for t in tools if t.enabled]
        known = {t.name for t in tools}
        chosen = [n for n in chosen if n in known]
        if self.loaded and [t.name for t in tools] == [t.name for t in self.tools] and chosen == self._chosen:
            return  # the same: an open menu is not rebuilt under the user's keys
        self.tools, self._chosen, self.loaded = tools, chosen, True
        self._rebuild()

    def set_default(self, names: list[str]) -> None:
        """The tools a new chat starts with (shown in the menu, with a way to change it)."""
        if list(names) != self._default:
            self._default = list(names)
            self._rebuild()

    def set_support(self, calls_tools: bool | None, reason: str = "") -> None:
        """Whether the loaded model calls tools (None: no model is loaded yet)."""
        support = None if calls_tools is None else (bool(calls_tools), reason)
        if support != self._support:
            self._support = support
            self._rebuild()

    @property
    def model_calls_tools(self) -> bool | None:
        return None if self._support is None else self._support[0]

    def _note(self, text: str, name: str) -> QAction:
        note = self.menu_.addAction(text)
        note.setObjectName(name)
        note.setEnabled(False)
        return note

    def _rebuild(self) -> None:
        self.menu_.clear()
        if self._support is not None and not self._support[0]:
            self._note(f"⚠ {self._support[1]}", "toolSupportNote")
            self.menu_.addSeparator()
        if not self.tools:
            self._note("No tools are switched on (Settings → Tools)", "noToolsNote")
        for tool in self.tools:
            action = QAction(tool.name, self.menu_)
            action.setObjectName(f"toolAction_{tool.name}")
            action.setCheckable(True)
            action.setChecked(tool.name in self._chosen)
            where = "built in" if tool.source == "builtin" else tool.source.removeprefix("mcp:") + " (MCP)"
            approval = "; asks before each call" if tool.needs_approval else ""
            action.setToolTip(f"{tool.description} — {where}{approval}")
            action.setStatusTip(action.toolTip())
            action.toggled.connect(lambda on, name=tool.name: self.set_chosen(name, on))
            self.menu_.addAction(action)
        self.menu_.addSeparator()
        known = {t.name for t in self.tools}
        starts = ", ".join(n for n in self._default if n in known) or "no tools"
        self._note(f"New chats start with: {starts}", "newChatToolsNote")
        use = self.menu_.addAction("Use these for new chats")
        use.setObjectName("useForNewChatsAction")
        use.setToolTip("New chats will start with the tools ticked here (this chat keeps its own choice)")
        use.triggered.connect(lambda: self.default_chosen.emit(self.chosen()))
        self._note("Settings → Tools switches tools on or off for every chat", "toolLayersNote")
        self.menu_.setToolTipsVisible(True)
        self._show()

    def chosen(self) -> list[str]:
        return list(self._chosen)

    def actions_by_name(self) -> dict[str, QAction]:
        return {a.text(): a for a in self.menu_.actions() if a.isCheckable()}

    def action_named(self, object_name: str) -> QAction | None:
        return next((a for a in self.menu_.actions() if a.objectName() == object_name), None)

    def set_chosen(self, name: str, on: bool) -> None:
        was = list(self._chosen)
        if on and name not in self._chosen:
            self._chosen.append(name)
        elif not on and name in self._chosen:
            self._chosen.remove(name)
        order = [t.name for t in self.tools]
        self._chosen.sort(key=lambda n: order.index(n) if n in order else len(order))
        action = self.actions_by_name().get(name)
        if action is not None and action.isChecked() != on:
            action.setChecked(on)
        self._show()
        if self._chosen != was:
            self.changed.emit(self.chosen())

    def _show(self) -> None:
        count = len(self._chosen)
        unsupported = self._support is not None and not self._support[0]
        self.setText(f"Tools · {count}" if count else "Tools · off")
        names = ", ".join(self._chosen) or "none"
        self.setAccessibleName(f"Tools this chat may use: {names}")
        warning = f" {self._support[1]}." if unsupported and self._support is not None else ""
        self.setToolTip(f"Tools this chat may use: {names}. Click to change.{warning}")


class FileChip(QFrame):
    """One attached file; its × removes it."""

    removed = Signal(object)

    def __init__(self, path: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("fileChip")
        self.path = path
        self.setStyleSheet("#fileChip { border: 1px solid palette(mid); border-radius: 8px; }")
        self.label = QLabel(Path(path).name)
        self.label.setToolTip(path)
        self.remove_button = QToolButton()
        self.remove_button.setText("×")
        self.remove_button.setObjectName("removeFileButton")
        self.remove_button.setAccessibleName(f"Remove the attached file {Path(path).name}")
        self.remove_button.setToolTip("Remove this file from the message")
        self.remove_button.setAutoRaise(True)
        self.remove_button.clicked.connect(lambda: self.removed.emit(self))
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 0, 0, 0)
        row.setSpacing(2)
        row.addWidget(self.label)
        row.addWidget(self.remove_button)
        self.problem = ""

    def set_problem(self, problem: str) -> None:
        """Mark the file as one Wren will not be able to read, and why (its tooltip, and what
        a screen reader says of it)."""
        self.problem = problem
        name = Path(self.path).name
        self.label.setText(f"⚠ {name} — cannot be read")
        self.label.setToolTip(f"{problem}\n{self.path}")
        self.setAccessibleName(f"{name}: cannot be read")
        self.setAccessibleDescription(problem)
        self.setStyleSheet("#fileChip { border: 2px solid #d64545; border-radius: 8px; }")


class AttachmentBar(QWidget):
    """"Attach file…" and the chips of the files attached to the next message."""

    changed = Signal()
    added = Signal(str)  # a file's path, just attached (checked then: ConversationController)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("attachmentBar")
        self.attach_button = QToolButton()
        self.attach_button.setText("Attach file…")
        self.attach_button.setObjectName("attachFileButton")
        self.attach_button.setAccessibleName("Attach a file")
        self.attach_button.setToolTip("Attach a file Wren's read_attachment tool may read (text, code, CSV, PDF)")
        self.attach_button.setAutoRaise(True)
        self.attach_button.clicked.connect(self.pick)
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.setSpacing(4)
        self._row.addWidget(self.attach_button)

    def pick(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files")
        for path in paths:
            self.add(path)

    def add(self, path: str) -> FileChip | None:
        path = str(Path(path).expanduser().resolve())
        if path in self.files():
            return None
        chip = FileChip(path)
        chip.removed.connect(self._remove)
        self._row.addWidget(chip)
        self.changed.emit()
        self.added.emit(path)
        return chip

    def chips(self) -> list[FileChip]:
        items = (item.widget() for i in range(self._row.count()) if (item := self._row.itemAt(i)) is not None)
        return [w for w in items if isinstance(w, FileChip)]

    def files(self) -> list[str]:
        return [chip.path for chip in self.chips()]

    def take(self) -> list[str]:
        """The files for the message being sent; the bar is empty afterwards."""
        files = self.files()
        for chip in self.chips():
            self._remove(chip, quiet=True)
        if files:
            self.changed.emit()
        return files

    def flag(self, path: str, problem: str) -> None:
        """The attached file `path` will not be read: its chip says so, and why."""
        for chip in self.chips():
            if chip.path == path:
                chip.set_problem(problem)

    def put(self, paths: list[str]) -> None:
        """These files attached instead of any there (a chat's draft, back)."""
        self.take()
        for path in paths:
            self.add(path)

    def _remove(self, chip: FileChip, quiet: bool = False) -> None:
        had_focus = chip.remove_button.hasFocus()
        self._row.removeWidget(chip)
        chip.hide()
        chip.deleteLater()
        if had_focus:
            self.attach_button.setFocus()
        if not quiet:
            self.changed.emit()
