"""The library's place in the main window: File ▸ Library… and a header button for its page,
the sources under answers, and the sidebar's Projects section. Built by the window with one
call, so the window's own files only hand it over."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QBoxLayout, QMenu, QToolButton

from .page import LibraryDialog
from .projects import ProjectsSection
from .sources import AnswerSources

if TYPE_CHECKING:
    from ..window.main_window import MainWindow

SHORTCUT = "Ctrl+Shift+L"


class LibraryInWindow(QObject):
    def __init__(self, window: MainWindow):
        super().__init__(window)
        self.window = window
        self.engine = window.engine
        self.tasks = window.tasks
        self.dialog: LibraryDialog | None = None
        self.sources = AnswerSources(window.chat, self)
        window.conversations.cited.connect(self.sources.add)
        self._build_action()
        self._build_projects()

    def _build_action(self) -> None:
        w = self.window
        self.action = QAction("&Library…", w)
        self.action.setObjectName("libraryAction")
        self.action.setShortcut(QKeySequence(SHORTCUT))
        self.action.triggered.connect(self.open)
        w.addAction(self.action)
        file_menu = w.menuBar().actions()[0].menu()
        assert isinstance(file_menu, QMenu)
        file_menu.insertAction(w.models_action, self.action)
        self.button = QToolButton()
        self.button.setText("Library")
        self.button.setObjectName("libraryButton")
        self.button.setAccessibleName("Library")
        self.button.setToolTip(f"Your documents: files and folders Wren answers from ({SHORTCUT})")
        self.button.setAutoRaise(True)
        self.button.clicked.connect(self.open)
        row = w.header.layout()
        assert isinstance(row, QBoxLayout)
        row.insertWidget(row.indexOf(w.models_button), self.button)

    def _build_projects(self) -> None:
        w = self.window
        self.projects = ProjectsSection()
        column = w.sidebar.layout()
        assert isinstance(column, QBoxLayout)
        column.insertWidget(column.indexOf(w.sidebar.list), self.projects)
        self.projects.create_requested.connect(
            lambda name: self.tasks.run(self.create_project(name), what="making the project"))
        self.projects.new_chat_requested.connect(self.new_chat_in)
        self.projects.chat_requested.connect(
            lambda cid: self.tasks.run(w.conversations.open(cid), what="opening the chat"))
        w.conversations.listed.connect(self.refresh_projects)
        w.conversations.turn_finished.connect(lambda _f: self.refresh_projects())

    async def start(self) -> None:
        """Keep watching the library's folders from the window's start, if it has any."""
        if await self.engine.library.list():
            await self.engine.library.start()
        await self.load_projects()

    def open(self) -> LibraryDialog:
        if self.dialog is None:
            # the window's child: it goes with the window (its progress timer with it)
            self.dialog = LibraryDialog(self.engine, self.tasks, self.window)
            self.dialog.move(self.window.geometry().center() - self.dialog.rect().center())
            self.dialog.page.passage_requested.connect(self.sources.open)
        self.tasks.run(self.dialog.show_page(), what="opening the library")
        return self.dialog

    # -- projects ---------------------------------------------------------------------------

    def refresh_projects(self) -> None:
        self.tasks.run(self.load_projects(), what="listing the projects")

    async def load_projects(self) -> None:
        projects = await self.engine.projects.list()
        chats = {c.id: c for c in await self.engine.conversations.list()} if projects else {}
        self.projects.set_projects(projects, chats)

    async def create_project(self, name: str) -> None:
        await self.engine.projects.create(name)
        await self.load_projects()
        self.new_chat_in(name)

    def new_chat_in(self, name: str) -> None:
        """A new chat that joins project `name` with its first message."""
        c = self.window.conversations
        c.new_chat()
        c.project = name
        self.window.set_title(f"New chat in {name}")
        self.window.status.showMessage(f"A new chat in the project {name}: it searches the project's documents",
                                       10000)

    def close(self) -> None:
        if self.dialog is not None:
            self.dialog.hide()
