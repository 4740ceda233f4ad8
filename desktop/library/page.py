"""The Library page: the files and folders Wren answers from, their indexing progress, the
files it skipped and why, and a search over the passages.

Every engine call is async (engine.library runs its blocking work off the event loop) and
runs on the window's Tasks; while the page is shown it reads the status every POLL_MS, so
the progress follows the background indexing without the GUI thread waiting on it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine
from wren.engine.events import Citation

from ..bridge import Tasks

POLL_MS = 500
SEARCH_LIMIT = 10
ID_ROLE = Qt.ItemDataRole.UserRole
PHASES = {"idle": "Up to date", "scanning": "Looking for files", "indexing": "Reading files",
          "embedding": "Preparing the search"}


def describe_source(source: dict[str, Any]) -> str:
    files = source.get("files") or {}
    parts = [f"{files.get('indexed', 0)} indexed"]
    for state in ("pending", "skipped", "failed"):
        if files.get(state):
            parts.append(f"{files[state]} {state}")
    chunks = source.get("chunks", 0)
    kind = "folder" if source.get("kind") == "folder" else "file"
    return f"{source['path']}  ({kind}: {', '.join(parts)}; {chunks} passage{'' if chunks == 1 else 's'})"


def describe_progress(progress: dict[str, Any]) -> str:
    phase = progress.get("phase", "idle")
    words = PHASES.get(phase, phase.capitalize())
    if phase != "idle" and progress.get("total"):
        words += f" — {progress.get('done', 0)} of {progress['total']}"
    current = progress.get("current")
    if phase != "idle" and current:
        words += f": {Path(current).name}"
    return words


def local_paths(mime) -> list[str]:
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()] if mime.hasUrls() else []


class LibraryPage(QWidget):
    changed = Signal()  # sources were added or removed
    passage_requested = Signal(object)  # Citation-like: a search result to open

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("libraryPage")
        self.engine = engine
        self.tasks = tasks
        self.setAcceptDrops(True)
        self._build()
        self._polling = False
        self.timer = QTimer(self, interval=POLL_MS)
        self.timer.timeout.connect(self._poll)

    def _build(self) -> None:
        heading = QLabel("Your documents")
        heading.setObjectName("libraryHeading")
        note = QLabel("Wren answers from these files and folders, on this computer only. Folders are "
                      "watched: added, changed and deleted files are picked up. Drop files or folders here.")
        note.setObjectName("libraryNote")
        note.setWordWrap(True)
        self.sources = QListWidget()
        self.sources.setObjectName("librarySources")
        self.sources.setAccessibleName("Library sources")
        self.add_files_button = QPushButton("Add files…")
        self.add_folder_button = QPushButton("Add folder…")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setToolTip("Remove the chosen source: its text leaves Wren's database")
        self.remove_button.setEnabled(False)
        self.add_files_button.clicked.connect(self.choose_files)
        self.add_folder_button.clicked.connect(self.choose_folder)
        self.remove_button.clicked.connect(self.remove_selected)
        self.sources.currentItemChanged.connect(lambda item, _old: self.remove_button.setEnabled(item is not None))
        buttons = QHBoxLayout()
        for b in (self.add_files_button, self.add_folder_button, self.remove_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        self.progress_label = QLabel("")
        self.progress_label.setObjectName("libraryProgress")
        self.progress_bar = QProgressBar()
        self.progress_bar.setObjectName("libraryProgressBar")
        self.progress_bar.setAccessibleName("Indexing progress")
        self.progress_bar.setTextVisible(False)
        self.skipped_label = QLabel("Skipped files")
        self.skipped = QListWidget()
        self.skipped.setObjectName("librarySkipped")
        self.skipped.setAccessibleName("Skipped files and why")
        self.search_box = SearchBox()
        self.search_box.setObjectName("librarySearch")
        self.search_box.setPlaceholderText("Search your documents…")
        self.search_box.setAccessibleName("Search your documents")
        self.search_box.returnPressed.connect(lambda: self.tasks.run(self.search(self.search_box.text()),
                                                                     what="searching the library"))
        self.results = KeepsEnter()
        self.results.setObjectName("librarySearchResults")
        self.results.setAccessibleName("Passages found")
        self.results.setWordWrap(True)
        self.results.itemActivated.connect(self._open_result)
        self.error_label = QLabel("")
        self.error_label.setObjectName("libraryError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        layout = QVBoxLayout(self)
        for top in (heading, note, self.sources):
            layout.addWidget(top)
        layout.addLayout(buttons)
        for w in (self.error_label, self.progress_label, self.progress_bar, self.skipped_label, self.skipped,
                  self.search_box, self.results):
            layout.addWidget(w)

    # -- loading and progress ------------------------------------------------------------

    async def load(self) -> None:
        await self.engine.library.start()  # watching (a no-op when it runs already)
        await self.refresh()

    async def refresh(self) -> None:
        sources = await self.engine.library.list()
        status = await self.engine.library.status()
        self.show_sources(sources)
        self.show_status(status)

    def show_sources(self, sources: Sequence[dict[str, Any]]) -> None:
        chosen = self.sources.currentItem().data(ID_ROLE) if self.sources.currentItem() else None
        self.sources.clear()
        for source in sources:
            item = QListWidgetItem(describe_source(source))
            item.setData(ID_ROLE, source["id"])
            item.setToolTip(source["path"])
            self.sources.addItem(item)
            if source["id"] == chosen:
                self.sources.setCurrentItem(item)
        if not sources:
            self.sources.addItem(QListWidgetItem("Nothing yet: add files or a folder."))
            self.sources.item(0).setFlags(Qt.ItemFlag.NoItemFlags)

    def show_status(self, status: dict[str, Any]) -> None:
        progress = status.get("progress") or {}
        self.progress_label.setText(describe_progress(progress))
        total, done = int(progress.get("total") or 0), int(progress.get("done") or 0)
        busy = progress.get("phase", "idle") != "idle"
        files = sum(n for state, n in (status.get("counts") or {}).items() if state not in ("chunks", "vectors"))
        if not busy and not files:  # "Up to date" over a full bar, with nothing in the library
            self.progress_label.setText("Nothing to read yet: add files or a folder.")
        self.progress_bar.setRange(0, max(total, 1))
        self.progress_bar.setValue(min(done, total) if busy else max(total, 1))
        self.progress_bar.setVisible(busy)  # idle, a full bar says nothing the label does not
        self.skipped.clear()
        for entry in status.get("skipped") or []:
            item = QListWidgetItem(f"{Path(entry['path']).name} — {entry['reason'] or entry['state']}")
            item.setToolTip(entry["path"])
            self.skipped.addItem(item)
        more = int(status.get("skipped_total") or 0)
        self.skipped_label.setText(f"Skipped files ({more})" if more else "Skipped files: none")

    def _poll(self) -> None:
        if self._polling or not self.isVisible():
            return
        self._polling = True

        async def once() -> None:
            try:
                await self.refresh()
            finally:
                self._polling = False

        self.tasks.run(once(), what="reading the library's progress")

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.timer.start()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self.timer.stop()

    # -- adding and removing -------------------------------------------------------------

    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add files to the library", str(Path.home()))
        if paths:
            self.add(paths)

    def choose_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Add a folder to the library", str(Path.home()))
        if path:
            self.add([path])

    def add(self, paths: Sequence[str]):
        return self.tasks.run(self._add(list(paths)), what="adding to the library")

    async def _add(self, paths: list[str]) -> None:
        self.error_label.hide()
        try:
            await self.engine.library.add(paths, watch=True)
        except Exception as exc:  # a path gone or unreadable: say which, nothing was added
            self.error_label.setText(str(exc))
            self.error_label.show()
            return
        await self.engine.library.start()
        self.changed.emit()
        await self.refresh()

    def remove_selected(self):
        item = self.sources.currentItem()
        if item is None or item.data(ID_ROLE) is None:
            return None
        return self.tasks.run(self._remove(int(item.data(ID_ROLE))), what="removing from the library")

    async def _remove(self, source_id: int) -> None:
        await self.engine.library.remove(str(source_id))
        self.changed.emit()
        await self.refresh()

    def dragEnterEvent(self, event) -> None:
        if local_paths(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        paths = local_paths(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.add(paths)

    # -- search ----------------------------------------------------------------------------

    async def search(self, query: str) -> None:
        self.results.clear()
        if not query.strip():
            return
        passages = await self.engine.library.search(query, SEARCH_LIMIT)
        for n, passage in enumerate(passages, 1):
            snippet = " ".join(passage.text.split())
            item = QListWidgetItem(f"{Path(passage.path).name} — {passage.where}\n{snippet[:240]}")
            item.setToolTip(passage.path)
            item.setData(ID_ROLE, Citation(n, passage.path, passage.location, passage.where, passage.text,
                                           passage.chunk_id))
            self.results.addItem(item)
        if not passages:
            self.results.addItem(QListWidgetItem("No passage matches."))

    def _open_result(self, item: QListWidgetItem) -> None:
        citation = item.data(ID_ROLE)
        if citation is not None:
            self.passage_requested.emit(citation)


def _keep_enter(event) -> None:
    if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
        event.accept()


class SearchBox(QLineEdit):
    """The search's line: Enter searches and goes no further (in the dialog it also pressed
    the default button, Add folder…, and opened the folder chooser over the results)."""

    def keyPressEvent(self, event) -> None:
        super().keyPressEvent(event)
        _keep_enter(event)


class KeepsEnter(QListWidget):
    """The results: Enter opens the current passage and goes no further (see SearchBox)."""

    def keyPressEvent(self, event) -> None:
        super().keyPressEvent(event)
        _keep_enter(event)


class LibraryDialog(QDialog):
    """The Library page in its own window; closing only hides it (indexing goes on)."""

    def __init__(self, engine: Engine, tasks: Tasks, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("libraryDialog")
        self.setWindowTitle("Library — Wren")
        self.setAccessibleName("Library")
        self.page = LibraryPage(engine, tasks)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.hide)
        layout = QVBoxLayout(self)
        layout.addWidget(self.page, 1)
        layout.addWidget(buttons)
        self.resize(720, 640)

    async def show_page(self) -> None:
        await self.page.load()
        self.show()
        self.raise_()
        self.activateWindow()
        self.page.add_folder_button.setFocus()
