"""The sidebar's Projects section: each project with its chats under it, "+" for a new one.

Enter or a double-click on a project starts a new chat in it (the chat joins the project
with its first message, and searches the project's documents); on a chat, opens it."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from wren.engine.records import ConversationInfo

PROJECT_ROLE = Qt.ItemDataRole.UserRole  # the project's name
CHAT_ROLE = Qt.ItemDataRole.UserRole + 1  # a chat's id
UNTITLED = "New chat"
ROWS_SHOWN = 6  # the section's height in rows before it scrolls


class ProjectsSection(QWidget):
    new_chat_requested = Signal(str)  # project name
    chat_requested = Signal(int)
    create_requested = Signal(str)  # a new project's name

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("projectsSection")
        heading = QLabel("Projects")
        heading.setObjectName("projectsHeading")
        self.add_button = QToolButton()
        self.add_button.setText("+")
        self.add_button.setObjectName("newProjectButton")
        self.add_button.setAccessibleName("New project")
        self.add_button.setToolTip("A new project: its chats, documents and instructions together")
        self.add_button.setAutoRaise(True)
        self.add_button.clicked.connect(self.ask_name)
        self.tree = QTreeWidget()
        self.tree.setObjectName("projectsTree")
        self.tree.setAccessibleName("Projects")
        self.tree.setHeaderHidden(True)
        self.tree.setRootIsDecorated(True)
        self.tree.itemActivated.connect(self._activated)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(heading, 1)
        row.addWidget(self.add_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(row)
        layout.addWidget(self.tree)
        self.set_projects([], {})

    def ask_name(self) -> None:
        name, ok = QInputDialog.getText(self, "New project", "The project's name:")
        if ok and name.strip():
            self.create_requested.emit(name.strip())

    def set_projects(self, projects: list[dict[str, Any]], chats: dict[int, ConversationInfo]) -> None:
        """`projects` as engine.projects.list() gives them; `chats`: titles by id (a chat
        deleted since is left out)."""
        open_names = {item.data(0, PROJECT_ROLE) for item in self._items() if item.isExpanded()}
        self.tree.clear()
        for project in projects:
            item = QTreeWidgetItem([project["name"]])
            item.setData(0, PROJECT_ROLE, project["name"])
            item.setToolTip(0, f"{project['name']}: Enter starts a new chat in it")
            for cid in project.get("chats") or []:
                info = chats.get(cid)
                if info is None:
                    continue
                child = QTreeWidgetItem([info.title or UNTITLED])
                child.setData(0, CHAT_ROLE, cid)
                child.setData(0, PROJECT_ROLE, project["name"])
                item.addChild(child)
            self.tree.addTopLevelItem(item)
            item.setExpanded(project["name"] in open_names)
        rows = max(1, min(ROWS_SHOWN, len(projects)))
        self.tree.setFixedHeight(rows * max(self.tree.sizeHintForRow(0), 20) + 6)
        self.tree.setVisible(bool(projects))

    def _items(self) -> list[QTreeWidgetItem]:
        found = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [item for item in found if item is not None]

    def project_names(self) -> list[str]:
        return [item.text(0) for item in self._items()]

    def chats_of(self, name: str) -> list[int]:
        for item in self._items():
            if item.text(0) == name:
                children = (item.child(n) for n in range(item.childCount()))
                return [child.data(0, CHAT_ROLE) for child in children if child is not None]
        return []

    def _activated(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        cid = item.data(0, CHAT_ROLE)
        if cid is not None:
            self.chat_requested.emit(int(cid))
        else:
            self.new_chat_requested.emit(item.data(0, PROJECT_ROLE))
