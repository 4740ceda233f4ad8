"""The seams between the window's controllers and what they drive (docs/architecture.md,
"Seams"). A controller is built with each collaborator it needs, typed by one of these
protocols, never with the whole `MainWindow`; it reaches nothing of a collaborator beyond
what the protocol declares (tests/desktop/test_window_seams.py).

`MainWindow` passes its own widgets where a controller genuinely drives one (the chat view
it streams into, the sidebar's list, the status bar), and itself only as a `ChatFrame`:
the header and the focus, said as intentions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from PySide6.QtCore import SignalInstance

from wren.engine.events import Usage
from wren.engine.records import ConversationInfo, MessageInfo
from wren.engine.tools.registry import ToolInfo

from ..chat.message import MessageWidget


class TaskRunner(Protocol):
    """Runs a coroutine on the window's loop; a failure is said in the status bar (desktop.bridge.Tasks)."""

    def run(self, coro: Awaitable[Any], on_result: Callable[[Any], None] | None = None, *, what: str = "") -> Any: ...


class StatusLine(Protocol):
    """The status bar as controllers use it (WrenStatusBar): a passing message, the model, its
    speed and the context used."""

    def showMessage(self, text: str, timeout: int = 0) -> None: ...
    def clearMessage(self) -> None: ...
    def show_loading(self, text: str) -> None: ...
    def show_model(self, name: str | None, backend: str | None, context_length: int) -> None: ...
    def show_usage(self, usage: Usage) -> None: ...
    def show_speed(self, tokens_per_second: float | None, ttft: float | None) -> None: ...
    def show_context(self, used: int | None) -> None: ...


class UsageMeter(Protocol):
    """The composer's token counter (desktop.composer.counter.TokenCounter)."""

    def set_model(self, count: Callable[[str], Any] | None, context_length: int) -> None: ...
    def set_used(self, tokens: int) -> None: ...
    def set_edit_base(self, tokens: int) -> None: ...  # what the chat takes before a message being edited


class ChatFrame(Protocol):
    """What the conversation controller asks of the window around the chat (MainWindow)."""

    def set_title(self, title: str) -> None: ...  # header and window title
    def show_temporary(self, temporary: bool) -> None: ...  # the temporary chat's marks, or none
    def focus_composer(self) -> None: ...  # the cursor goes to the message box


class ChatList(Protocol):
    """The sidebar's list of chats (desktop.sidebar.sidebar.Sidebar)."""

    def query(self) -> str: ...
    def set_conversations(self, conversations: list[ConversationInfo], current_id: int | None) -> None: ...
    def shows(self, conversations: list[ConversationInfo]) -> bool: ...
    def editing(self) -> bool: ...
    def relist(self, conversations: list[ConversationInfo], current_id: int | None) -> None: ...
    def select(self, conversation_id: int | None) -> None: ...
    def rename_shown(self, conversation_id: int, title: str) -> bool: ...
    def show_undo(self, conv: ConversationInfo) -> None: ...


class AnswerView(Protocol):
    """The chat view the conversation controller fills and streams into (desktop.chat.view.ChatView)."""

    tool_decided: SignalInstance  # call id, "once" | "always" | "deny"
    tool_cancel_requested: SignalInstance  # call id
    continue_requested: SignalInstance  # answer id
    replay_requested: SignalInstance  # answer id

    def clear(self) -> None: ...
    def show_messages(self, messages: list[MessageInfo]) -> None: ...
    def show_branch(self, messages: list[MessageInfo], switched: int) -> None: ...
    def reveal(self, message_id: int, terms: Sequence[str] = ()) -> bool: ...
    def show_notice(self, text: str) -> None: ...
    def scroll_to_bottom(self) -> None: ...
    def set_busy(self, busy: bool) -> None: ...
    def set_probability_marks(self, on: bool) -> None: ...
    def message_widgets(self) -> list[MessageWidget]: ...
    def widget_for(self, message_id: int) -> MessageWidget | None: ...
    def add_pending_user(self, text: str, attachments: Sequence[str] = ()) -> MessageWidget: ...
    def add_streaming_answer(self) -> MessageWidget: ...
    def remove_from(self, message_id: int) -> None: ...


class MemoryView(Protocol):
    """The chat view as the context controller uses it: its requests about what an answer
    was built from and what Wren remembers, and the messages' memory notes."""

    inspect_requested: SignalInstance  # answer id
    provenance_requested: SignalInstance  # answer id
    remember_requested: SignalInstance  # message id
    memory_open_requested: SignalInstance  # memory id
    memory_undo_requested: SignalInstance  # answer id, memory id
    suggestion_accepted: SignalInstance  # answer id, suggested text
    clear_memories_requested: SignalInstance  # answer id

    def message_widgets(self) -> list[MessageWidget]: ...
    def widget_for(self, message_id: int) -> MessageWidget | None: ...


class Draft(Protocol):
    """The composer's text, edit mode and busy state (desktop.composer.composer.Composer)."""

    def text(self) -> str: ...
    def set_text(self, text: str) -> None: ...
    def set_streaming(self, streaming: bool) -> None: ...
    def begin_edit(self, message_id: int, text: str) -> None: ...
    def cancel_edit(self) -> bool: ...  # whether an edit was open
    def take_draft(self) -> tuple[str, tuple[str, ...]]: ...  # typed text and large pastes; emptied
    def put_draft(self, typed: str, pastes: tuple[str, ...]) -> None: ...


class ReadyLine(Protocol):
    """Whether the composer takes a message, and why not (Composer.set_ready)."""

    def set_ready(self, ready: bool, reason: str = "") -> None: ...


class ToolMenu(Protocol):
    """The composer's tools menu (desktop.composer.tools.ToolsButton)."""

    changed: SignalInstance  # the names now chosen
    refresh_requested: SignalInstance  # the menu was opened: list again, starting servers
    default_chosen: SignalInstance  # "Use these for new chats": the names new chats start with

    @property
    def loaded(self) -> bool: ...

    def chosen(self) -> list[str]: ...
    def set_tools(self, tools: list[ToolInfo], chosen: list[str]) -> None: ...
    def set_default(self, names: list[str]) -> None: ...
    def set_support(self, calls_tools: bool | None, reason: str = "") -> None: ...


class Attachments(Protocol):
    """The files attached to the draft (desktop.composer.tools.AttachmentBar)."""

    added: SignalInstance  # a file's path, just attached

    def take(self) -> list[str]: ...  # their paths; the bar is emptied
    def put(self, paths: list[str]) -> None: ...  # these attached instead
    def files(self) -> list[str]: ...  # their paths, left attached
    def flag(self, path: str, problem: str) -> None: ...  # this file will not be read, and why


class ModelPicker(Protocol):
    """The header's model picker (a QComboBox)."""

    activated: SignalInstance  # index

    def clear(self) -> None: ...
    def addItems(self, texts: list[str]) -> None: ...
    def itemText(self, index: int) -> str: ...
    def setCurrentIndex(self, index: int) -> None: ...
    def setPlaceholderText(self, text: str) -> None: ...


class OpenChat(Protocol):
    """The conversation shown, as the chat settings panel needs it (ConversationController)."""

    current_id: int | None
    temporary: bool
    new_chat_settings: dict  # the new chat's own settings before its first message

    def load_tools(self, start_servers: bool = False) -> None: ...
    def opening(self) -> int: ...
    async def set_new_chat_settings(self, settings: dict) -> None: ...
