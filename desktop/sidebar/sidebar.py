"""The sidebar: new chat, search, and the conversation list grouped by day."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QEvent, QPoint, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QFont, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QStyledItemDelegate,
    QVBoxLayout,
    QWidget,
)

from wren.engine.records import ConversationInfo

from ..confirm import ask_first
from ..memory.notes import quoted
from ..window.elided import elide
from .grouping import group_by_day
from .snippets import SNIPPET_ROLE, Hit, SnippetDelegate

ID_ROLE = Qt.ItemDataRole.UserRole
INFO_ROLE = Qt.ItemDataRole.UserRole + 1
HEADER_ROLE = Qt.ItemDataRole.UserRole + 2  # a group's name ("Today", "Terminal"), not a chat
SEARCH_DEBOUNCE_MS = 200
UNDO_SECONDS = 10
UNTITLED = "New chat"
MIN_WIDTH = 180  # narrower, and the chat names say too little to choose by


class _FitDelegate(QStyledItemDelegate):
    """Rows never wider than the list: a long title is cut with "…" instead of adding a
    horizontal scroll bar (the whole title is in the row's tooltip)."""

    def __init__(self, view: QListWidget):
        super().__init__(view)
        self.view = view

    def sizeHint(self, option, index) -> QSize:
        hint = super().sizeHint(option, index)
        view = self.view
        return QSize(min(hint.width(), max(1, view.viewport().width() - 2 * view.spacing())), hint.height())

    def initStyleOption(self, option, index) -> None:
        super().initStyleOption(option, index)
        if index.data(HEADER_ROLE):
            # A group's name has no item flags, so it is never selected or stopped at, and
            # Qt draws such an item disabled: light grey, 1.6:1. It is read as text.
            palette = option.palette
            palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text,
                             palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Text))


class ConversationList(QListWidget):
    """Arrow keys and Tab only move through the list; Enter, Space or a click opens a chat."""

    rename_key = Signal()
    delete_key = Signal()
    open_key = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setWordWrap(False)
        self.setResizeMode(QListView.ResizeMode.Adjust)  # rows re-fit when the sidebar is resized
        self.setItemDelegate(SnippetDelegate(_FitDelegate(self)))  # a search result's snippet under its title
        # the chat whose row was current before a right-click made the clicked row current
        # (a one-item tuple: (None,) when no row was); None when no right-click is pending
        self.before_menu: tuple[int | None] | None = None

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.RightButton:  # Qt makes the pressed row current
            item = self.currentItem()
            self.before_menu = (item.data(ID_ROLE) if item is not None else None,)
        super().mousePressEvent(event)

    def current_before_menu(self) -> int | None:
        """The chat whose row the menu being opened should leave current when it closes:
        the one before a right-click, else (the menu key) the current one."""
        before, self.before_menu = self.before_menu, None
        if before is not None:
            return before[0]
        item = self.currentItem()
        return item.data(ID_ROLE) if item is not None else None

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key.Key_F2 and self.state() != QAbstractItemView.State.EditingState:
            self.rename_key.emit()
        elif event.key() == Qt.Key.Key_Delete and self.state() != QAbstractItemView.State.EditingState:
            self.delete_key.emit()
        elif event.key() == Qt.Key.Key_Space and self.state() != QAbstractItemView.State.EditingState:
            self.open_key.emit()
        else:
            super().keyPressEvent(event)


class Sidebar(QWidget):
    new_chat_requested = Signal()
    conversation_selected = Signal(int)
    rename_requested = Signal(int, str)
    pin_requested = Signal(int, bool)
    delete_requested = Signal(int)
    delete_permanently_requested = Signal(int)  # no undo: its text leaves the disk at once
    undo_delete_requested = Signal(int)
    export_requested = Signal(int, str)  # id, "markdown" | "json"
    search_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.setMinimumWidth(MIN_WIDTH)
        self.new_chat_button = QPushButton("New chat")
        self.new_chat_button.setObjectName("newChatButton")
        self.new_chat_button.setAccessibleName("New chat")
        self.new_chat_button.setToolTip("Start a new chat (Ctrl+N)")
        self.search_box = QLineEdit()
        self.search_box.setObjectName("searchBox")
        self.search_box.setAccessibleName("Search chats")
        self.search_box.setPlaceholderText("Search chats (Ctrl+K)")
        self.search_box.setClearButtonEnabled(True)
        self.list = ConversationList()
        self.list.setObjectName("conversationList")
        self.list.setAccessibleName("Conversations")
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.list.setUniformItemSizes(False)
        self.empty_label = QLabel()
        self.empty_label.setObjectName("sidebarEmptyLabel")
        self.empty_label.setWordWrap(True)
        self.empty_label.hide()

        self.undo_bar = QFrame()
        self.undo_bar.setObjectName("undoBar")
        self.undo_label = QLabel()
        self.undo_label.setWordWrap(True)
        self.undo_button = QPushButton("Undo")
        self.undo_button.setObjectName("undoDeleteButton")
        self.undo_button.setAccessibleName("Undo delete")
        bar = QHBoxLayout(self.undo_bar)
        bar.setContentsMargins(8, 4, 8, 4)
        bar.addWidget(self.undo_label, 1)
        bar.addWidget(self.undo_button)
        self.undo_bar.hide()
        self._undo_id: int | None = None
        self._undo_timer = QTimer(self, singleShot=True, interval=UNDO_SECONDS * 1000)
        self._undo_timer.timeout.connect(self.undo_bar.hide)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.setSpacing(6)
        layout.addWidget(self.new_chat_button)
        layout.addWidget(self.search_box)
        layout.addWidget(self.empty_label)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.undo_bar)

        self.menu: QMenu | None = None  # the chat's right-click menu, while it is open
        self.confirm_box: QMessageBox | None = None  # "Delete permanently?", while it asks
        self._populating = False
        self._listed_query = ""  # the search the list shows the results of
        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DEBOUNCE_MS)
        self._search_timer.timeout.connect(lambda: self.search_changed.emit(self.query()))
        self.search_box.textChanged.connect(lambda _t: self._search_timer.start())
        self.search_box.returnPressed.connect(self._search_now)
        self.new_chat_button.clicked.connect(self.new_chat_requested)
        # Moving through the list (Tab into it, arrow keys) does not switch chats; choosing does.
        self.list.itemClicked.connect(self._open_item)
        self.list.itemActivated.connect(self._open_item)  # Enter, Return, double click
        self.list.open_key.connect(lambda: self._open_item(self.list.currentItem()))
        self.search_box.installEventFilter(self)
        self.list.itemChanged.connect(self._item_edited)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.rename_key.connect(lambda: self.start_rename())
        self.list.delete_key.connect(self._delete_current)
        self.undo_button.clicked.connect(self._undo)

    # -- state in -------------------------------------------------------------------

    def query(self) -> str:
        return self.search_box.text().strip()

    def set_conversations(self, conversations: list[ConversationInfo], current_id: int | None) -> None:
        self._listed_query = self.query()
        self._populating = True
        try:
            self.list.clear()
            # Set apart from the chats by weight alone: smaller and greyed it was hard to read.
            header_font = QFont(self.list.font())
            header_font.setWeight(QFont.Weight.DemiBold)
            for group in group_by_day(conversations):
                header = QListWidgetItem(group.label)
                header.setFlags(Qt.ItemFlag.NoItemFlags)
                header.setFont(header_font)
                header.setData(HEADER_ROLE, True)
                header.setData(Qt.ItemDataRole.AccessibleTextRole, f"{group.label}:")
                self.list.addItem(header)
                for conv in group.conversations:
                    self.list.addItem(self._item(conv))
            self.select(current_id)
        finally:
            self._populating = False
        if not conversations:
            self.empty_label.setText("No chat matches your search." if self.query() else "No chats yet.")
        self.empty_label.setVisible(not conversations)

    def shows(self, conversations: list[ConversationInfo]) -> bool:
        """Whether the list already shows exactly these chats, in these groups (a day's group
        is named again after midnight)."""
        shown = [item.data(INFO_ROLE) if item.data(ID_ROLE) is not None else item.text()
                 for item in (self.list.item(i) for i in range(self.list.count()))]
        wanted: list[object] = []
        for group in group_by_day(conversations):
            wanted += [group.label, *group.conversations]
        return shown == wanted

    def editing(self) -> bool:
        """A chat's name is being edited in the list (listing again would drop the edit)."""
        return self.list.state() == QAbstractItemView.State.EditingState

    def relist(self, conversations: list[ConversationInfo], current_id: int | None) -> None:
        """List again for chats made or changed elsewhere (`wren ask`, `wren chat`), keeping
        the user's place: the list scrolled as far, the keyboard on the same row."""
        scrolled = self.list.verticalScrollBar().value()
        row = self.list.currentItem()
        keyboard = row.data(ID_ROLE) if row is not None else None
        self.set_conversations(conversations, current_id)
        if keyboard is not None and keyboard != current_id and self._find(keyboard) is not None:
            self.select(keyboard)  # moved there with the arrow keys, not opened
        # Rows are laid out later; laid out now, so the scroll bar's range is the new one.
        self.list.executeDelayedItemsLayout()
        self.list.verticalScrollBar().setValue(scrolled)

    def select(self, conversation_id: int | None) -> None:
        was, self._populating = self._populating, True
        try:
            item = self._find(conversation_id)
            self.list.setCurrentItem(item) if item is not None else self.list.setCurrentRow(-1)
            if item is None:
                self.list.clearSelection()
        finally:
            self._populating = was

    def show_hits(self, hits: dict[int, Hit]) -> None:
        """Under each listed result, where it matched the search (its snippet, the match marked)."""
        for item in self._conversation_items():
            hit = hits.get(item.data(ID_ROLE))
            item.setData(SNIPPET_ROLE, hit)
            if hit is not None:
                item.setToolTip(f"{item.data(INFO_ROLE).title or UNTITLED}\n{hit.snippet}")
                item.setData(Qt.ItemDataRole.AccessibleDescriptionRole, hit.snippet)

    def hit_for(self, conversation_id: int) -> Hit | None:
        item = self._find(conversation_id)
        hit = item.data(SNIPPET_ROLE) if item is not None else None
        return hit if isinstance(hit, Hit) else None

    def clear_search(self) -> None:
        """The filter off again (a result was opened): every chat listed at once."""
        if not self.search_box.text():
            return
        # Not blockSignals: that also kept the box from hiding its own clear button, left
        # showing over the empty box. The debounced search its change starts is stopped.
        self.search_box.clear()
        self._search_timer.stop()
        self.search_changed.emit("")

    def conversation_ids(self) -> list[int]:
        return [i.data(ID_ROLE) for i in self._conversation_items()]

    def start_rename(self, conversation_id: int | None = None) -> None:
        item = self._find(conversation_id) if conversation_id is not None else self.list.currentItem()
        if item is None or item.data(ID_ROLE) is None:
            return
        self._populating = True
        item.setText(item.data(INFO_ROLE).title)
        self._populating = False
        self.list.editItem(item)

    def rename_shown(self, conversation_id: int, title: str) -> bool:
        """Show a chat's new title in place (a title written while its answer streams),
        without listing again; False when the chat is not in the list."""
        item = self._find(conversation_id)
        if item is None:
            return False
        conv = replace(item.data(INFO_ROLE), title=title)
        was, self._populating = self._populating, True
        try:
            item.setData(INFO_ROLE, conv)
            item.setText(title or UNTITLED)
            item.setToolTip(title or UNTITLED)
            if conv.pinned:
                item.setData(Qt.ItemDataRole.AccessibleTextRole, f"{title or UNTITLED} (pinned)")
        finally:
            self._populating = was
        return True

    def show_undo(self, conv: ConversationInfo) -> None:
        self._undo_id = conv.id
        self.undo_label.setText(f"Deleted {quoted(elide(conv.title or UNTITLED, 40))}.")
        self.undo_bar.show()
        self._undo_timer.start()

    # -- internals ------------------------------------------------------------------

    def _item(self, conv: ConversationInfo) -> QListWidgetItem:
        item = QListWidgetItem(conv.title or UNTITLED)
        item.setData(ID_ROLE, conv.id)
        item.setData(INFO_ROLE, conv)
        item.setFlags(Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsEditable)
        item.setToolTip(conv.title or UNTITLED)
        if conv.pinned:
            item.setData(Qt.ItemDataRole.AccessibleTextRole, f"{conv.title or UNTITLED} (pinned)")
        return item

    def _conversation_items(self) -> list[QListWidgetItem]:
        items = (self.list.item(i) for i in range(self.list.count()))
        return [i for i in items if i.data(ID_ROLE) is not None]

    def _find(self, conversation_id: int | None) -> QListWidgetItem | None:
        if conversation_id is None:
            return None
        return next((i for i in self._conversation_items() if i.data(ID_ROLE) == conversation_id), None)

    def _open_item(self, item: QListWidgetItem | None) -> None:
        if not self._populating and item is not None and item.data(ID_ROLE) is not None:
            self.conversation_selected.emit(item.data(ID_ROLE))

    def eventFilter(self, watched, event) -> bool:
        """From the search box, Down (or Up) goes to the results, where Enter opens one."""
        if (watched is self.search_box and event.type() == QEvent.Type.KeyPress
                and event.key() in (Qt.Key.Key_Down, Qt.Key.Key_Up) and self._conversation_items()):
            self.focus_results()
            return True
        return super().eventFilter(watched, event)

    def focus_results(self) -> None:
        """Focus the chat list at the current chat, or at the first result."""
        items = self._conversation_items()
        if not items:
            return
        current = self.list.currentItem()
        if current is None or current.data(ID_ROLE) is None:
            was, self._populating = self._populating, True
            self.list.setCurrentItem(items[0])
            self._populating = was
        self.list.setFocus(Qt.FocusReason.TabFocusReason)

    def _item_edited(self, item: QListWidgetItem) -> None:
        if self._populating or item.data(ID_ROLE) is None:
            return
        conv: ConversationInfo = item.data(INFO_ROLE)
        title = item.text().strip()
        if title and title != conv.title:
            self.rename_requested.emit(conv.id, title)
        else:
            self._populating = True
            item.setText(conv.title or UNTITLED)
            self._populating = False

    def _search_now(self) -> None:
        """Enter in the search box: search now; with the results already shown, open the first."""
        if not self._search_timer.isActive() and self._listed_query == self.query() and self.query():
            items = self._conversation_items()
            if items:
                self._open_item(items[0])
            return
        self._search_timer.stop()
        self.search_changed.emit(self.query())

    def _delete_current(self) -> None:
        item = self.list.currentItem()
        if item is not None and item.data(ID_ROLE) is not None:
            self.delete_requested.emit(item.data(ID_ROLE))

    def _undo(self) -> None:
        self._undo_timer.stop()
        self.undo_bar.hide()
        if self._undo_id is not None:
            self.undo_delete_requested.emit(self._undo_id)
            self._undo_id = None

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None or item.data(ID_ROLE) is None:
            return
        conv: ConversationInfo = item.data(INFO_ROLE)
        menu = QMenu(self)
        rename = QAction("Rename", menu, shortcut=QKeySequence("F2"))
        rename.triggered.connect(lambda: self.start_rename(conv.id))
        pin = QAction("Unpin" if conv.pinned else "Pin", menu)
        pin.triggered.connect(lambda: self.pin_requested.emit(conv.id, not conv.pinned))
        export_md = QAction("Export as Markdown…", menu)
        export_md.triggered.connect(lambda: self.export_requested.emit(conv.id, "markdown"))
        export_json = QAction("Export as JSON…", menu)
        export_json.triggered.connect(lambda: self.export_requested.emit(conv.id, "json"))
        delete = QAction("Delete (can be undone)", menu, shortcut=QKeySequence(QKeySequence.StandardKey.Delete))
        delete.setToolTip(f"Undo brings it back for {UNDO_SECONDS} seconds; then its text is removed for good")
        delete.triggered.connect(lambda: self.delete_requested.emit(conv.id))
        forget = QAction("Delete permanently", menu)
        forget.setToolTip("Delete at once, with no undo: the chat's text is removed from disk")
        forget.triggered.connect(lambda: self.confirm_forget(conv))
        for action in (rename, pin, export_md, export_json):
            menu.addAction(action)
        menu.addSeparator()
        menu.addAction(delete)
        menu.addAction(forget)
        menu.setToolTipsVisible(True)  # the difference between the two, on hover
        # The right-click made its row current; closed, the menu gives the highlight back to
        # the row that had it (the open chat), so Delete after it does not delete the other.
        before = self.list.current_before_menu()
        menu.aboutToHide.connect(lambda: self.select(before))
        menu.popup(self.list.viewport().mapToGlobal(pos))
        self.menu = menu

    def confirm_forget(self, conv: ConversationInfo) -> QMessageBox:
        """"Delete permanently" asks first: it sits one row below the delete that can be undone,
        and a slip there lost a chat at once."""
        self.confirm_box = ask_first(
            self, "Delete permanently?",
            f"“{elide(conv.title or UNTITLED, 80)}” and every branch of it will be removed from this computer "
            "at once. This cannot be undone.",
            yes="Delete permanently", name="deletePermanentlyConfirm",
            on_yes=lambda: self.delete_permanently_requested.emit(conv.id))
        return self.confirm_box
