"""The Wren window: sidebar, chat, composer, status bar, menus and keyboard shortcuts."""

from __future__ import annotations

import asyncio
import base64
import logging
import sys
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QMainWindow,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from wren.engine.api import Engine

from ..a11y import announce
from ..bridge import Tasks
from ..chat.tokens import TokenPopover
from ..chat.view import ChatView
from ..composer.composer import Composer
from ..composer.counter import TokenCounter
from ..composer.ghost import GhostController
from ..composer.prewarm import Prewarmer
from ..library.window import LibraryInWindow
from ..models.dialog import ModelsDialog
from ..safety.gate import SendGate
from ..sidebar.sidebar import Sidebar
from ..voice.controls import VoiceControls
from ..voice.models_section import VoiceModelsSection
from ..wheel import install_wheel_guard
from .chat_settings import open_chat_settings
from .context import ContextController
from .conversation import ConversationController
from .elided import elide
from .header import ChatHeader
from .keyboard import ComposerKeys, ShortcutsDialog, chat_after
from .models import ModelController
from .search import ChatSearch
from .sidebar_fit import DEFAULT_WIDTH as SIDEBAR_WIDTH
from .sidebar_fit import SidebarFit
from .status import WrenStatusBar

log = logging.getLogger(__name__)

TEMPORARY_TITLE = "Temporary chat"
LAYOUT_KEY = "desktop.window_layout"  # size, position, splitter and maximized state, for the next start
LAYOUT_SAVE_MS = 1000  # saved this long after the last move or resize, and again on close
# The chat list is read again this often while the window shows, and when it is activated:
# chats made by `wren ask` or `wren chat` reach the window no other way. A read that finds
# nothing new leaves the list alone.
CHAT_LIST_POLL_MS = 5000
WINDOW_TITLE_CHARS = 60  # a window title is cut here: task bars and window lists show little more


class MainWindow(QMainWindow):
    hidden_to_tray = Signal()
    settings_requested = Signal()
    quit_requested = Signal()
    memory_requested = Signal(int)  # show this memory in Settings → Memory
    welcome_requested = Signal()  # Help → Welcome (the app shows it)

    def __init__(self, engine: Engine, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("Wren")
        self.setAccessibleName("Wren")
        self.engine = engine
        self.tasks = Tasks(self)
        self.keep_running_in_tray = False  # set by the app when a tray icon exists
        self.models_dialog: ModelsDialog | None = None

        self.sidebar = Sidebar()
        self.chat = ChatView()
        self.composer = Composer()
        self.status = WrenStatusBar()
        self.setStatusBar(self.status)
        self.status.follow_offline_lock(engine.network.lock_state, self.tasks)  # the offline lock's mark
        self.counter = TokenCounter(self.composer, self.tasks, self)
        self.gate = SendGate(engine, self.composer, self.tasks, self)
        self._build_header()
        self._build_layout()
        self.sidebar_fit = SidebarFit(self.splitter, self.sidebar, self.title_label, self)  # narrow: the title first

        self.conversations = ConversationController(
            engine, chat=self.chat, composer=self.composer, tools=self.composer.tools_button,
            attachments=self.composer.attachment_bar, sidebar=self.sidebar, status=self.status,
            counter=self.counter, frame=self, tasks=self.tasks, parent=self,
        )
        self.prewarm = Prewarmer(engine, self.composer, self.tasks, lambda: self.conversations.current_id, self)
        self.prewarm.overflow.connect(lambda text: self.status.showMessage(text, 10000))
        self.ghost = GhostController(engine, self.composer, self.tasks, lambda: self.conversations.current_id,
                                     lambda: bool(self.conversations.temporary), self)
        self.token_popover = TokenPopover(engine, self.tasks, self)
        self.chat_settings_dialog = None
        self.chat_settings_button.clicked.connect(
            lambda: self.tasks.run(self.open_chat_settings(), what="opening the chat settings"))
        self.models = ModelController(
            engine, picker=self.model_picker, composer=self.composer, status=self.status,
            counter=self.counter, tasks=self.tasks, parent=self,
        )
        # the Tools menu says whether the model now loaded calls tools
        self.models.loaded.connect(lambda _status: self.conversations.load_tools())
        self.context = ContextController(
            engine, chat=self.chat, status=self.status, tasks=self.tasks,
            current_chat=lambda: self.conversations.current_id, parent=self,
        )
        self.context.memory_requested.connect(self.memory_requested)
        self.conversations.opened.connect(
            lambda _cid: self.tasks.run(self.context.mark_gone(), what="checking memories"))
        self._build_actions()
        self.library = LibraryInWindow(self)  # File ▸ Library…, answers' sources, the sidebar's projects
        self.voice = VoiceControls(self, engine.voice)  # the microphone, read-aloud, the Voice menu
        self.conversations.announce.connect(lambda text, assertive: announce(self, text, assertive=assertive))
        self._connect()
        self.keys = ComposerKeys(self, self.composer.edit)
        install_wheel_guard(self.keys.app)  # every dialog the window opens is covered too
        self.tasks.error.connect(lambda text: self.status.showMessage(text, 10000))
        self.resize(1100, 760)
        self._layout_restored = False
        self._layout_timer = QTimer(self, singleShot=True, interval=LAYOUT_SAVE_MS)
        self._layout_timer.timeout.connect(self._save_layout_soon)
        self.splitter.splitterMoved.connect(lambda *_: self._layout_timer.start())
        # Tab goes sidebar → header → chat (its messages top to bottom) → composer.
        self._tab_timer = QTimer(self, singleShot=True, interval=0)
        self._tab_timer.timeout.connect(self.order_tab_stops)
        self.chat.messages_changed.connect(self._tab_timer.start)
        self.order_tab_stops()
        self._list_poll = QTimer(self, interval=CHAT_LIST_POLL_MS)  # started by start(), stopped on close
        self._list_poll.timeout.connect(self.list_chats_again)
        self._list_reading: asyncio.Task | None = None

    # -- layout ---------------------------------------------------------------------

    def _build_header(self) -> None:
        self.header = header = ChatHeader()  # desktop/window/header.py
        self.title_label, self.model_picker = header.title_label, header.model_picker
        self.temporary_button, self.models_button = header.temporary_button, header.models_button
        self.chat_settings_button, self.settings_button = header.chat_settings_button, header.settings_button
        self.temporary_banner = header.temporary_banner

    def _build_layout(self) -> None:
        pane = QWidget()
        pane.setObjectName("chatPane")
        column = QVBoxLayout(pane)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.header)
        column.addWidget(self.temporary_banner)
        column.addWidget(self.chat, 1)
        column.addWidget(self.composer)
        self.splitter = splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.setObjectName("mainSplitter")
        splitter.addWidget(self.sidebar)
        splitter.addWidget(pane)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([SIDEBAR_WIDTH, 840])
        splitter.setChildrenCollapsible(False)
        self.setCentralWidget(splitter)

    def _action(self, text: str, slot, shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None, *,
                name: str) -> QAction:
        action = QAction(text, self)
        action.setObjectName(name)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        self.addAction(action)  # shortcuts work even where the menu bar is hidden
        return action

    def _build_actions(self) -> None:
        self.new_chat_action = self._action("&New chat", self.conversations.new_chat, "Ctrl+N", name="newChatAction")
        self.new_temporary_action = self._action(
            "New &temporary chat", self.conversations.new_temporary_chat, "Ctrl+Shift+N", name="newTemporaryChatAction"
        )
        self.search_action = self._action("&Search chats", self.focus_search, "Ctrl+K", name="searchAction")
        self.settings_action = self._action("&Settings…", self.settings_requested.emit, "Ctrl+,", name="settingsAction")
        self.settings_action.setMenuRole(QAction.MenuRole.PreferencesRole)
        self.models_action = self._action("&Models…", self.open_models, "Ctrl+Shift+M", name="modelsAction")
        self.stop_action = self._action("S&top answer", self.escape, "Esc", name="stopAction")
        self.regenerate_action = self._action("&Regenerate last answer", self.regenerate_last, "Ctrl+R", name="regenerateAction")
        self.copy_last_action = self._action("&Copy last answer", self.copy_last_answer, "Ctrl+Shift+C", name="copyLastAction")
        self.export_md_action = self._action("Export as &Markdown…", lambda: self.export_current("markdown"), name="exportMarkdownAction")
        self.export_json_action = self._action("Export as &JSON…", lambda: self.export_current("json"), name="exportJsonAction")
        self.tokens_action = self._action("Show the draft as &tokens", self.show_draft_tokens, "Ctrl+Shift+K",
                                          name="tokensAction")
        self.quit_action = self._action("&Quit Wren", self.quit_requested.emit, QKeySequence.StandardKey.Quit, name="quitAction")
        self.quit_action.setMenuRole(QAction.MenuRole.QuitRole)
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        for a in (self.new_chat_action, self.new_temporary_action, self.export_md_action, self.export_json_action, self.models_action, self.settings_action):
            file_menu.addAction(a)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        edit_menu = bar.addMenu("&Edit")
        edit_menu.addAction(self.copy_last_action)
        edit_menu.addAction(self.search_action)
        chat_menu = bar.addMenu("&Chat")
        chat_menu.addAction(self.stop_action)
        chat_menu.addAction(self.regenerate_action)
        chat_menu.addAction(self.tokens_action)
        chat_menu.addAction(self.conversations.probabilities_action)
        # Next and previous chat as in browsers' tabs and Telegram Desktop: Ctrl+Tab and
        # Ctrl+Page Down, with Shift or Page Up for the other way. On macOS Qt's "Ctrl" is
        # Command, and Command+Tab belongs to the system: there it is the Control key (Meta).
        tab = "Meta+" if sys.platform == "darwin" else "Ctrl+"
        self.next_chat_action = self._action("&Next chat", lambda: self.step_chat(1), name="nextChatAction")
        self.next_chat_action.setShortcuts([QKeySequence(f"{tab}Tab"), QKeySequence("Ctrl+PgDown")])
        self.previous_chat_action = self._action("&Previous chat", lambda: self.step_chat(-1), name="previousChatAction")
        self.previous_chat_action.setShortcuts([QKeySequence(f"{tab}Shift+Tab"), QKeySequence("Ctrl+PgUp")])
        # Shift+Esc as in ChatGPT (Esc alone stops an answer), Ctrl+L as a second one.
        self.composer_action = self._action("&Go to the message box", self.focus_composer, name="composerAction")
        self.composer_action.setShortcuts([QKeySequence("Shift+Esc"), QKeySequence("Ctrl+L")])
        for a in (self.next_chat_action, self.previous_chat_action, self.composer_action):
            chat_menu.addAction(a)
        self.welcome_action = self._action("&Welcome to Wren", self.welcome_requested.emit, name="welcomeAction")
        self.shortcuts_action = self._action("&Keyboard shortcuts", self.show_shortcuts, "Ctrl+/", name="shortcutsAction")
        help_menu = bar.addMenu("&Help")
        for a in (self.welcome_action, self.shortcuts_action):
            help_menu.addAction(a)

    def _connect(self) -> None:
        c, tasks = self.conversations, self.tasks
        self.sidebar.new_chat_requested.connect(c.new_chat)
        self.sidebar.conversation_selected.connect(lambda cid: tasks.run(c.open(cid), what="opening the chat"))
        # Actions hand the keyboard back to the message box: a chat opened from the list (or
        # by search and Enter), Remember and Continue on a message.
        self.sidebar.conversation_selected.connect(lambda _cid: self.focus_composer())
        self.chat.remember_requested.connect(lambda _mid: self.focus_composer())
        self.chat.continue_requested.connect(lambda _mid: self.focus_composer())
        self.sidebar.rename_requested.connect(lambda cid, t: tasks.run(c.rename(cid, t), what="renaming"))
        self.sidebar.pin_requested.connect(lambda cid, p: tasks.run(c.pin(cid, p), what="pinning"))
        self.sidebar.delete_requested.connect(lambda cid: tasks.run(c.delete(cid), what="deleting"))
        self.sidebar.undo_delete_requested.connect(lambda cid: tasks.run(c.restore(cid), what="restoring"))

        async def delete_permanently(cid: int) -> None:  # no undo bar: the text is gone at once
            await self.engine.conversations.delete(cid, permanently=True)
            if cid == c.current_id:
                c.new_chat()
            c.forget(cid)
            await c.refresh_list()

        self.sidebar.delete_permanently_requested.connect(
            lambda cid: tasks.run(delete_permanently(cid), what="deleting permanently"))
        self.sidebar.search_changed.connect(lambda _q: c.refresh())
        # a result's snippet; opening one shows its match and clears the filter (desktop/window/search.py)
        self.search = ChatSearch(self.engine, self.sidebar, self.chat, tasks, self)
        c.listed.connect(self.search.listed)
        self.sidebar.conversation_selected.connect(self.search.selected)
        c.opened.connect(self.search.opened)
        self.sidebar.export_requested.connect(self.export)
        # Every message passes the safety check before it reaches the conversation.
        self.composer.submitted.connect(self.gate.submit)
        self.composer.edit_submitted.connect(self.gate.submit_edit)
        self.gate.approved.connect(c.send)
        self.gate.edit_approved.connect(c.edit_and_resend)
        self.gate.said.connect(lambda text: self.status.showMessage(text, 10000))
        c.opened.connect(lambda _cid: self.gate.dismiss())
        self.temporary_button.clicked.connect(
            lambda checked: c.new_temporary_chat() if checked else c.new_chat()
        )
        self.composer.stop_requested.connect(c.stop)
        self.composer.edit_last_requested.connect(c.edit_last)
        self.chat.regenerate_requested.connect(c.regenerate)
        self.chat.edit_requested.connect(self._edit_message)
        self.chat.sibling_requested.connect(lambda mid, step: tasks.run(c.sibling(mid, step), what="switching versions"))
        self.chat.copied.connect(lambda _t: self.status.showMessage("Copied to the clipboard", 2000))
        self.settings_button.clicked.connect(self.settings_requested.emit)
        self.models_button.clicked.connect(self.open_models)

    # -- behaviour ------------------------------------------------------------------

    async def start(self) -> None:
        """Fill the window, then load the model without holding the window up."""
        await self.restore_layout()
        await self.conversations.load_settings()
        await self.conversations.refresh_list()
        self._list_poll.start()
        await self.library.start()
        self.models.load_in_background()
        self.chat.warm_up()
        self.focus_composer()  # not the first button: what is typed first must not be lost

    def list_chats_again(self) -> None:
        """Read the chat list again for chats made elsewhere (the poll, the window activated):
        one read at a time, none while the window is hidden or minimized."""
        if not self.isVisible() or self.isMinimized() or self.engine.closed:
            return
        if self._list_reading is not None and not self._list_reading.done():
            return
        coro = self.conversations.refresh_if_changed()
        try:
            self._list_reading = self.tasks.run(coro, what="listing chats")
        except RuntimeError:  # the event loop this window ran on is gone: nothing left to ask
            coro.close()
            self._list_poll.stop()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        # Coming back to the window from a terminal shows the chats made there at once.
        if event.type() == QEvent.Type.ActivationChange and self.isActiveWindow() and self._list_poll.isActive():
            self.list_chats_again()

    def show_draft_tokens(self):
        """The composer's popover: the draft as the model's tokens (Chat menu, Ctrl+Shift+K)."""
        return self.token_popover.show_for(self.composer.text(), self.composer.tools_button)

    # -- keyboard ---------------------------------------------------------------------

    def tab_stops(self) -> list[QWidget]:
        """Every place Tab stops, in order (hidden ones are skipped by Qt as Tab moves)."""
        projects = self.library.projects
        stops: list[QWidget] = [
            self.sidebar.new_chat_button, self.sidebar.search_box, projects.add_button, projects.tree,
            self.sidebar.list, self.sidebar.undo_button, self.model_picker, self.temporary_button,
            self.library.button, self.models_button, self.chat_settings_button, self.settings_button, self.chat,
        ]
        for message in self.chat.message_widgets():
            stops += _stops_in_reading_order(message)
        stops += _stops_in_reading_order(self.gate.panel)
        stops += [self.composer.edit, self.voice.mic, self.composer.send_button, self.composer.stop_button]
        stops += [self.composer.tools_button, *_stops_in_reading_order(self.composer.attachment_bar)]
        return stops

    def order_tab_stops(self) -> None:
        stops = self.tab_stops()
        for before, after in zip(stops, stops[1:]):
            QWidget.setTabOrder(before, after)

    # -- size and place, kept across restarts -----------------------------------------

    def layout_state(self) -> dict:
        return {
            "geometry": base64.b64encode(self.saveGeometry().data()).decode("ascii"),
            "splitter": self.sidebar_fit.natural_sizes(),  # not what a narrow window took for the title
            "maximized": self.isMaximized(),
        }

    def _save_layout_soon(self) -> None:
        """The debounced save after a move or resize; skipped once the event loop is gone
        (the window is closing, and closing saves the layout itself)."""
        try:
            asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return
        self.tasks.run(self.save_layout(), what="saving the window layout")

    async def save_layout(self, state: dict | None = None) -> None:
        # Never overwrite the saved layout with the default one, nor write to a closed engine.
        if self._layout_restored and not getattr(self.engine, "_closed", False):
            await self.engine.settings.set(LAYOUT_KEY, state or self.layout_state())

    async def restore_layout(self) -> None:
        """Size, position, splitter and maximized state as the last Wren left them (once)."""
        if self._layout_restored:
            return
        self._layout_restored = True
        saved = await self.engine.settings.get(LAYOUT_KEY)
        if not isinstance(saved, dict):
            return
        try:
            geometry = QByteArray(base64.b64decode(saved.get("geometry") or "", validate=True))
            sizes = [int(n) for n in saved.get("splitter") or []]
        except (ValueError, TypeError) as exc:
            log.warning("the saved window layout is unreadable, using the default: %s", exc)
            return
        if not geometry.isEmpty() and not self.restoreGeometry(geometry):
            log.warning("the saved window geometry was refused, using the default")
        if len(sizes) == 2 and all(n > 0 for n in sizes):
            self.splitter.setSizes(sizes)
            self.sidebar_fit.chosen(sizes[0])
        if saved.get("maximized"):
            self.setWindowState(self.windowState() | Qt.WindowState.WindowMaximized)

    def moveEvent(self, event) -> None:
        super().moveEvent(event)
        self._layout_timer.start()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._layout_timer.start()

    def set_title(self, title: str) -> None:
        if self.conversations.temporary:
            title = TEMPORARY_TITLE
        self.title_label.setText(title)
        self.header.fit()
        self.sidebar_fit.title_changed()
        self.setWindowTitle(f"{elide(title, WINDOW_TITLE_CHARS)} — Wren" if title else "Wren")

    def focus_composer(self) -> None:
        self.composer.edit.setFocus()

    def step_chat(self, step: int) -> None:
        """Ctrl+Tab and the like: the next chat down the list (up when `step` < 0)."""
        cid = chat_after(self.sidebar.conversation_ids(), self.conversations.current_id, step)
        if cid is not None:
            self.tasks.run(self.conversations.open(cid), what="opening the chat")
            self.focus_composer()

    def show_shortcuts(self) -> ShortcutsDialog:
        """Help → Keyboard shortcuts, listed from the window's own actions."""
        dialog = ShortcutsDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    async def open_chat_settings(self):
        """The header's Chat settings for the open chat (kept as chat_settings_dialog)."""
        dialog = await open_chat_settings(self.engine, self.conversations, self.status, self.tasks, self)
        if dialog is not None:
            self.chat_settings_dialog = dialog
        return dialog

    def show_temporary(self, temporary: bool) -> None:
        """Mark the window clearly while a temporary chat is shown."""
        self.header.setProperty("temporary", temporary)
        self.header.style().polish(self.header)
        self.title_label.style().polish(self.title_label)
        self.temporary_banner.setVisible(temporary)
        self.temporary_button.setChecked(temporary)
        self.chat.set_temporary(temporary)
        self.gate.reset()
        if temporary:
            self.set_title(TEMPORARY_TITLE)

    def open_models(self) -> ModelsDialog:
        """The Models page; its changes show in the model picker at once, and a new default
        model is loaded."""
        if self.models_dialog is None:
            # Its own top-level window: Settings is modal to this window and opens it too.
            self.models_dialog = ModelsDialog(self.engine, self.tasks)
            self.models_dialog.move(self.geometry().center() - self.models_dialog.rect().center())
            page = self.models_dialog.page
            page.add_section(VoiceModelsSection(self.voice.choices))
            page.changed.connect(lambda: self.tasks.run(self.models.refresh(), what="listing the models"))
            page.default_changed.connect(self._default_model_changed)
            # the picker chose another model: the page's "default" and "answering now" follow
            self.models.loaded.connect(lambda _status: self.models_dialog is not None and self.models_dialog.isVisible()
                                       and self.tasks.run(page.refresh_installed(), what="listing the models"))
        self.tasks.run(self.models_dialog.show_page(), what="opening the models")
        return self.models_dialog

    def _default_model_changed(self, name: str) -> None:
        current = self.engine.models.current
        if current is None or current.name != name:
            self.models.load_in_background(name)

    def focus_search(self) -> None:
        self.sidebar.search_box.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.sidebar.search_box.selectAll()

    def escape(self) -> None:
        """Esc stops the answer; with nothing streaming it cancels an edit in progress."""
        if not self.conversations.stop():
            self.composer.cancel_edit()

    def regenerate_last(self) -> None:
        """Ctrl+R: another answer to the last question (the current one is kept beside it)."""
        widget = self.chat.last_answer()
        if widget is not None and widget.message_id is not None:
            self.conversations.regenerate(widget.message_id)

    def copy_last_answer(self) -> None:
        widget = self.chat.last_answer()
        if widget is not None:
            widget.copy()

    def _edit_message(self, message_id: int) -> None:
        widget = self.chat.widget_for(message_id)
        if widget is not None:
            self.conversations.edit(message_id, widget.text())

    def export_current(self, fmt: str) -> None:
        if self.conversations.current_id is not None:
            self.export(self.conversations.current_id, fmt)

    def export(self, conversation_id: int, fmt: str) -> None:
        suffix, kind = (".json", "JSON (*.json)") if fmt == "json" else (".md", "Markdown (*.md)")
        name = (self.title_label.text() if conversation_id == self.conversations.current_id else "chat") or "chat"
        safe = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in name).strip() or "chat"
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", str(Path.home() / f"{safe}{suffix}"), kind)
        if path:
            self.tasks.run(self.conversations.export_to(conversation_id, fmt, Path(path)), what="exporting")

    def closeEvent(self, event: QCloseEvent) -> None:
        self._layout_timer.stop()
        self.tasks.run(self.save_layout(self.layout_state()), what="saving the window layout")
        if self.keep_running_in_tray:
            event.ignore()
            self.hide()
            self.hidden_to_tray.emit()
            return
        event.accept()
        self._list_poll.stop()
        self.voice.close()
        self.status.stop_following()
        if self.models_dialog is not None:
            self.models_dialog.hide()
        self.quit_requested.emit()

    def show_and_raise(self) -> None:
        self.show()
        self.setWindowState(self.windowState() & ~Qt.WindowState.WindowMinimized)
        self.raise_()
        self.activateWindow()
        self.focus_composer()


def _stops_in_reading_order(widget: QWidget) -> list[QWidget]:
    """The widget's descendants that Tab stops at, top to bottom, then left to right."""
    found = [w for w in widget.findChildren(QWidget) if w.focusPolicy() & Qt.FocusPolicy.TabFocus]

    def place(w: QWidget) -> tuple[int, int]:
        at = w.mapTo(widget, QPoint(0, 0))
        return at.y() + w.height() // 2, at.x()

    return sorted(found, key=place)
