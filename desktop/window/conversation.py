"""What the window does with conversations: open, send, stream, branch, rename, delete, and
temporary chats (kept in memory by the engine, gone when the user leaves them)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from wren.engine.api import Engine
from wren.engine.context.report import context_used
from wren.engine.errors import WrenError
from wren.engine.events import (
    Delta,
    Event,
    Failed,
    FailureKind,
    Finished,
    FinishReason,
    Started,
    TitleUpdate,
)
from wren.engine.records import MessageInfo, Role, SendOptions

from ..bridge import TurnStream, describe_notices
from ..chat.body import MarkdownBody
from ..chat.message import MessageWidget
from ..library.sources import watch_citations
from ..sidebar.sidebar import UNTITLED
from .live_answer import LiveAnswers
from .probabilities import TokenProbabilities
from .seams import (
    AnswerView,
    Attachments,
    ChatFrame,
    ChatList,
    Draft,
    StatusLine,
    TaskRunner,
    ToolMenu,
    UsageMeter,
)
from .tool_choice import ToolChoice


class ConversationController(QObject):
    # Ids travel as `object`: Qt's int is 32 bits, and temporary chats' ids start at 2**40.
    opened = Signal(object)  # the chat view shows this conversation
    listed = Signal()  # the sidebar was refreshed
    turn_finished = Signal(object)  # Finished; the view already shows the stored result
    answer_text = Signal(object, str)  # conversation id, the next piece of its answer as it streams (read-aloud)
    announce = Signal(str, bool)  # what a screen reader should say now; True: at once (an error, a question)
    titled = Signal(object, str)
    temporary_left = Signal(object)  # a temporary chat was left and the engine dropped it
    cited = Signal(int, object)  # an answer's message id, the library passages it cited (tuple of Citation)

    def __init__(self, engine: Engine, *, chat: AnswerView, composer: Draft, tools: ToolMenu,
                 attachments: Attachments, sidebar: ChatList, status: StatusLine, counter: UsageMeter,
                 frame: ChatFrame, tasks: TaskRunner, parent: QObject | None = None):
        """Everything it drives is given here, each by its seam (desktop/window/seams.py):
        the chat view it streams into, the composer and its tools menu and attachments, the
        sidebar's list, the status bar, the token counter, and the window as a `ChatFrame`."""
        super().__init__(parent)
        self.engine = engine
        self.chat = chat
        self.composer = composer
        self.tools = tools
        self.attachments = attachments
        self.sidebar = sidebar
        self.status = status
        self.counter = counter
        self.frame = frame
        self.tasks = tasks
        self.current_id: int | None = None
        self.temporary = False  # the chat shown is temporary (created on its first message)
        self.new_chat_settings: dict = {}  # the new chat's own settings, set before its first message
        self.project: str | None = None  # the project a new chat is started in (desktop/library/projects.py)
        self._temporary_ids: set[int] = set()  # every temporary chat of this session, left or not
        # each chat's unsent message while another is shown (None: the new chat's): its typed
        # text, large pastes and attached files stay with the chat they were written in
        self._drafts: dict[int | None, tuple[str, tuple[str, ...], list[str]]] = {}
        self._deleted_open: int | None = None  # the chat deleted while it was shown (Undo reopens it)
        self.streams: dict[int, TurnStream] = {}  # conversation id → its answer in flight
        # each answer in flight: its live widget, what a screen reader and read-aloud hear of it
        self.live = LiveAnswers(chat=chat, status=status, current=lambda: self.current_id,
                                announce=self.announce.emit, text_out=self.answer_text.emit)
        self._open_generation = 0
        self._list_generation = 0
        # the composer's tools menu for the chat shown, and the answers' tool approvals
        self.tool_choice = ToolChoice(engine, tools=tools, status=status, tasks=tasks,
                                      current_chat=lambda: self.current_id, opening=lambda: self._open_generation,
                                      parent=self)
        chat.tool_decided.connect(self.tool_choice.approve)
        chat.continue_requested.connect(self.continue_answer)
        chat.replay_requested.connect(self.replay)
        # Chat ▸ Show token probabilities (desktop/window/probabilities.py): its menu action
        self.probabilities = TokenProbabilities(engine, chat=chat, status=status, tasks=tasks, action_parent=parent,
                                                parent=self)
        self.probabilities_action = self.probabilities.action
        chat.tool_cancel_requested.connect(self.tool_choice.cancel)
        attachments.added.connect(self._check_attachment)

    async def load_settings(self) -> None:
        """The saved choices this controller follows (Show token probabilities)."""
        await self.probabilities.load()

    async def _asking(self, conversation_id: int, options: SendOptions | None,
                      answer: Callable[[SendOptions | None], AsyncIterator[Event]]) -> AsyncIterator[Event]:
        """The events of `answer(options)`, the options settled first (inside the stream, so
        the answer's place shows at once and a problem ends the turn like any failure)."""
        settled = await self.probabilities.answer_options(conversation_id, options)
        async for event in answer(settled):
            yield event

    # -- the list -------------------------------------------------------------------

    def refresh(self) -> None:
        self.tasks.run(self.refresh_list(), what="listing chats")

    async def refresh_list(self) -> None:
        self._list_generation += 1
        generation = self._list_generation
        convs = await self.engine.conversations.list(self.sidebar.query() or None)
        if generation == self._list_generation:  # a newer search has overtaken this one
            self.sidebar.set_conversations(convs, self.current_id)
            self.listed.emit()

    async def refresh_if_changed(self) -> None:
        """List again if chats were made or changed by another front end of this engine
        (`wren ask` answered through the window's socket) or another process on the same
        data (`wren chat`); neither tells the window. The list is rebuilt only when it
        differs, and never under a search's results or a rename in progress."""
        if self.sidebar.query() or self.sidebar.editing():
            return
        generation = self._list_generation  # not a new one: a listing the user asked for wins
        convs = await self.engine.conversations.list(None)
        if (generation != self._list_generation or self.sidebar.query() or self.sidebar.editing()
                or self.sidebar.shows(convs)):
            return
        self.sidebar.relist(convs, self.current_id)
        self.listed.emit()

    async def rename(self, conversation_id: int, title: str) -> None:
        conv = await self.engine.conversations.rename(conversation_id, title)
        if conversation_id == self.current_id:
            self.frame.set_title(conv.title)
        await self.refresh_list()

    async def pin(self, conversation_id: int, pinned: bool) -> None:
        await self.engine.conversations.pin(conversation_id, pinned)
        await self.refresh_list()

    async def delete(self, conversation_id: int) -> None:
        conv = await self.engine.conversations.get(conversation_id)
        await self.engine.conversations.delete(conversation_id)
        self._deleted_open = conversation_id if conversation_id == self.current_id else None
        if conversation_id == self.current_id:
            self.new_chat()
        await self.refresh_list()
        self.sidebar.show_undo(conv)

    async def restore(self, conversation_id: int) -> None:
        """Undo a delete: the chat is listed again, and shown again if it was shown when
        deleted (another chat deleted from the list leaves the one open where it is)."""
        await self.engine.conversations.restore(conversation_id)
        await self.refresh_list()
        if self._deleted_open == conversation_id:
            self._deleted_open = None
            await self.open(conversation_id)

    def forget(self, conversation_id: int | None = None) -> None:
        """Drop the unsent drafts of a chat deleted for good (of every chat, with None: all
        erased)."""
        if conversation_id is None:
            self._drafts.clear()
        else:
            self._drafts.pop(conversation_id, None)

    async def export_to(self, conversation_id: int, fmt: str, path: Path) -> Path:
        text = await self.engine.conversations.export(conversation_id, fmt)
        path.write_text(text, encoding="utf-8")
        self.status.showMessage(f"Exported to {path}", 5000)
        return path

    # -- showing one ----------------------------------------------------------------

    def new_chat(self) -> None:
        self._reset(temporary=False)

    def new_temporary_chat(self) -> None:
        self._reset(temporary=True)

    def opening(self) -> int:
        """Which opening of a chat (or of a new one) is shown: each changes it."""
        return self._open_generation

    async def set_new_chat_settings(self, settings: dict) -> None:
        """The new chat's own settings (checked by engine.conversations.new_chat_settings),
        kept until its first message creates it with them; its tools tick the composer's menu,
        whose choice that message keeps."""
        self.new_chat_settings = dict(settings)
        names = settings.get("tools")
        if names is None:
            saved = await self.engine.settings.get("tools.default")
            names = [n for n in saved if isinstance(n, str)] if isinstance(saved, list) else []
        self.tools.set_tools(await self.engine.tools.list(), list(names))
        self.tool_choice.picked(list(names))

    def _reset(self, *, temporary: bool) -> None:
        self._open_generation += 1
        self.composer.cancel_edit()
        self._switch_draft(None)
        self.new_chat_settings = {}
        self._leave_temporary()
        self.live.detach(self.current_id)
        self.current_id = None
        self.project = None
        self._set_temporary(temporary)
        self.chat.clear()
        self.frame.set_title(UNTITLED)
        self.sidebar.select(None)
        self._sync_busy()
        self.counter.set_used(0)
        self.status.show_context(None)
        self.status.show_speed(None, None)
        self.frame.focus_composer()
        self.load_tools()

    async def open(self, conversation_id: int) -> None:
        self._open_generation += 1
        generation = self._open_generation
        conv = await self.engine.conversations.get(conversation_id)
        messages = await self.engine.conversations.messages(conversation_id)
        if generation != self._open_generation:
            return  # the user clicked another chat meanwhile
        if conversation_id != self.current_id:
            self.composer.cancel_edit()
            self._switch_draft(conversation_id)
            self._leave_temporary()
            self._set_temporary(conversation_id in self._temporary_ids)
            self.live.detach(self.current_id)
            self.chat.clear()
            self.project = None  # a project's chat is in it already: the engine scopes it
        self.current_id = conversation_id
        self.chat.show_messages(messages)
        self.frame.set_title(conv.title or UNTITLED)
        self.sidebar.select(conversation_id)
        self.live.reattach(self.streams.get(conversation_id))
        self._sync_busy()
        self._show_usage_of(messages)
        self.chat.scroll_to_bottom()
        self.load_tools()
        self.opened.emit(conversation_id)

    def _check_attachment(self, path: str) -> None:
        """A file Wren will not be able to read (binary, not UTF-8, too large) is said as it
        is attached: it was taken silently, and only the sent message said so."""
        async def check() -> None:
            problem = await self.engine.tools.attachment_problem(path)
            if problem:
                self.attachments.flag(path, problem)
                self.status.showMessage(f"{problem[:1].upper()}{problem[1:]}.", 10000)

        self.tasks.run(check(), what="checking the attached file")

    def _switch_draft(self, to: int | None) -> None:
        """Keep the shown chat's unsent message (text, pastes, files) with it, and bring back
        chat `to`'s: a draft never follows the user into another chat, to be sent there."""
        typed, pastes = self.composer.take_draft()
        files = self.attachments.take()
        if typed or pastes or files:
            self._drafts[self.current_id] = (typed, pastes, files)
        else:
            self._drafts.pop(self.current_id, None)
        kept = self._drafts.pop(to, None)
        if kept is not None:
            self.composer.put_draft(kept[0], kept[1])
            self.attachments.put(kept[2])

    def _set_temporary(self, temporary: bool) -> None:
        self.temporary = temporary
        self.frame.show_temporary(temporary)

    def _leave_temporary(self) -> None:
        """Leaving a temporary chat ends it: nothing of it is kept anywhere."""
        if self.temporary and self.current_id is not None:
            self._drafts.pop(self.current_id, None)  # its unsent message too
            self.tasks.run(self._drop(self.current_id), what="closing the temporary chat")

    async def _drop(self, conversation_id: int) -> None:
        stream = self.streams.get(conversation_id)
        if stream is not None:
            self.engine.chat.stop(conversation_id)
            await stream.wait()
        await self.engine.conversations.delete(conversation_id)
        self.temporary_left.emit(conversation_id)

    def _show_usage_of(self, messages: list[MessageInfo]) -> None:
        last = next((m for m in reversed(messages) if m.role is Role.ASSISTANT), None)
        used = context_used(last.prompt_tokens, last.completion_tokens) if last else 0
        self.counter.set_used(used)
        self.status.show_context(used if last else None)
        if last is not None:
            self.status.show_speed(last.tokens_per_second, last.time_to_first_token)
        else:  # a chat with no answer has no speed to show; another chat's would be wrong
            self.status.show_speed(None, None)

    def _sync_busy(self) -> None:
        busy = self.current_id in self.streams
        self.composer.set_streaming(busy)
        self.chat.set_busy(busy)

    # -- turns ----------------------------------------------------------------------

    def send(self, text: str) -> None:
        self.composer.set_streaming(True)  # at once: a second Enter must not send twice
        self.tasks.run(self._send(text, self.send_options()), what="sending")

    def send_options(self) -> SendOptions:
        """The composer's tools (once loaded; else the chat's own choice) and attached files,
        which leave the composer with this message."""
        chosen = tuple(self.tools.chosen()) if self.tools.loaded else None
        return SendOptions(tools=chosen, attachments=tuple(self.attachments.take()), project=self.project)

    async def _send(self, text: str, options: SendOptions | None = None) -> None:
        conversation_id = self.current_id
        created = conversation_id is None
        temporary = self.temporary
        if conversation_id is None:
            try:
                # A refused question (empty, too long, more tokens than the model reads) is
                # said before any chat exists: no empty chat is left behind.
                await self.engine.chat.check_question(text)
            except WrenError as exc:
                self._sync_busy()
                self._refused(Failed(str(exc), FailureKind.INVALID_REQUEST), text,
                              options.attachments if options is not None else ())
                self.turn_finished.emit(Finished(FinishReason.ERROR))
                return
            try:
                conversation_id = (await self.engine.conversations.create(
                    temporary=temporary, settings=self.new_chat_settings or None)).id
            except Exception:
                self._sync_busy()
                self.composer.set_text(text)
                raise
            self.current_id = conversation_id
            self.new_chat_settings = {}  # the chat has them now
            if temporary:
                self._temporary_ids.add(conversation_id)
        user = self.chat.add_pending_user(text, options.attachments if options is not None else ())
        if created and options is not None and options.tools is not None:
            await self.engine.tools.set_for_conversation(conversation_id, list(options.tools))
        if options is not None and options.tools:
            await self.engine.tools.prepare_sources(list(options.tools))  # starts the MCP servers they need
        self._start(conversation_id, self._asking(
            conversation_id, options, lambda o: self.engine.chat.send(conversation_id, text, options=o)), user, draft=text,
            files=options.attachments if options is not None else ())
        if created and not temporary:
            await self.refresh_list()

    def regenerate(self, message_id: int) -> None:
        if self.current_id is None or self.current_id in self.streams:
            return
        self.chat.remove_from(message_id)
        self._start(self.current_id, self._asking(self.current_id, None, lambda o: self.engine.chat.regenerate(message_id, o)))

    def replay(self, message_id: int) -> None:
        """The same answer again, as a new version beside it: its model, settings and seed
        (engine.chat.replay), so the same text token for token."""
        if self.current_id is None or self.current_id in self.streams:
            return
        self.chat.remove_from(message_id)
        self._start(self.current_id, self.engine.chat.replay(message_id))

    def continue_answer(self, message_id: int) -> None:
        """Go on with an answer that was stopped, interrupted or cut at its length limit: the
        same message grows (engine.chat.continue_answer)."""
        if self.current_id is None or self.current_id in self.streams:
            return
        self.chat.remove_from(message_id)
        self._start(self.current_id, self._continued(message_id))

    async def _continued(self, message_id: int) -> AsyncIterator[Event]:
        """The continuation's events, led by the text the answer already has (the live widget
        shows the whole answer, and the stored one keeps it)."""
        kept = (await self.engine.conversations.message(message_id)).content
        first = True
        async for event in self.engine.chat.continue_answer(message_id):
            yield event
            if first and isinstance(event, Started):
                first = False
                if kept:
                    yield Delta(kept)

    def edit_and_resend(self, message_id: int, text: str) -> None:
        if self.current_id is None or self.current_id in self.streams:
            return
        self.chat.remove_from(message_id)
        user = self.chat.add_pending_user(text)
        self._start(self.current_id, self._asking(
            self.current_id, None, lambda o: self.engine.chat.edit_and_resend(message_id, text, o)), user, draft=text)

    async def sibling(self, message_id: int, step: int) -> None:
        if self.current_id is None or self.current_id in self.streams:
            return
        messages = await self.engine.conversations.sibling(message_id, step)
        self.chat.show_branch(messages, message_id)
        self._show_usage_of(messages)

    def stop(self) -> bool:
        if self.current_id is None or self.current_id not in self.streams:
            return False
        self.engine.chat.stop(self.current_id)
        return True

    def edit_last(self) -> None:
        if self.current_id in self.streams:
            return
        last = next((w for w in reversed(self.chat.message_widgets()) if w.role is Role.USER and w.info), None)
        if last is not None and last.message_id is not None:
            self.edit(last.message_id, last.text())

    def edit(self, message_id: int, text: str) -> None:
        """Open the question `message_id` for editing: the counter counts it in place of it
        and what followed, on top of what the chat takes before it."""
        before = 0
        for widget in self.chat.message_widgets():
            if widget.message_id == message_id:
                break
            info = widget.info
            if widget.role is Role.ASSISTANT and info is not None:
                before = context_used(info.prompt_tokens, info.completion_tokens)
        self.counter.set_edit_base(before)
        self.composer.begin_edit(message_id, text)

    def _start(self, conversation_id: int, events: AsyncIterator[Event], user: MessageWidget | None = None, *,
               draft: str = "", files: tuple[str, ...] = ()) -> TurnStream:
        """Stream an answer; `draft` and `files`, the message and attached files it answers,
        go back to the composer if the engine turns the message down."""
        # What was said about the last turn stops being true when the next one starts: its
        # error under the chat, its failure in the status bar, its speed.
        self.chat.show_notice("")
        self.status.clearMessage()
        self.status.show_speed(None, None)
        answer = self.chat.add_streaming_answer()
        stream = TurnStream(watch_citations(self._watch_titles(events), self.cited.emit), conversation_id, self)
        self.streams[conversation_id] = stream
        self._sync_busy()
        stream.started.connect(lambda ev: self._started(ev, user, answer))
        self.live.follow(stream, answer)
        stream.finished.connect(lambda fin: self.tasks.run(self._finished(stream, fin, draft, files),
                                                           what="finishing the answer"))
        return stream.start()

    def _started(self, event: Started, user: MessageWidget | None, answer: MessageWidget) -> None:
        self.live.started(event.conversation_id)
        if user is not None:
            user.assign_id(event.user_message_id)
        answer.assign_id(event.assistant_message_id)
        # the prompt as sent is in the answer's record from its start: the counter shows it
        # while the answer streams, not the empty chat's 0 or the last answer's total
        self.tasks.run(self._show_prompt_of(event), what="reading the answer's prompt size")

    async def _show_prompt_of(self, event: Started) -> None:
        answer = await self.engine.conversations.message(event.assistant_message_id)
        if event.conversation_id == self.current_id:
            used = context_used(answer.prompt_tokens, answer.completion_tokens)
            self.counter.set_used(used)
            self.status.show_context(used)

    # -- tools ----------------------------------------------------------------------

    def load_tools(self, start_servers: bool = False) -> None:
        """The composer's tools menu listed again for the chat shown (a model loaded, settings changed)."""
        self.tool_choice.load(start_servers)

    async def _finished(self, stream: TurnStream, finished: Finished, draft: str, files: tuple[str, ...] = ()) -> None:
        conversation_id = stream.conversation_id
        self.streams.pop(conversation_id, None)
        widget = self.live.drop(conversation_id)
        if widget is not None and isinstance(widget.body, MarkdownBody):  # an answer's body is Markdown
            widget.body.finish()
        failure = stream.failure
        messages = []
        if conversation_id == self.current_id:
            messages = await self.engine.conversations.messages(conversation_id)
            if conversation_id == self.current_id:
                self.chat.show_messages(messages)
                self._sync_busy()
                self._show_usage_of(messages)
                if stream.started_event is None and finished.reason is FinishReason.BLOCKED:
                    self._refused(Failed(
                        f"Not sent — a safety rule blocked it ({describe_notices(stream.notices)}). "
                        "Your text is back in the box to change.", FailureKind.INVALID_REQUEST,
                    ), draft, files)
                elif stream.started_event is None and failure is not None:
                    self._refused(failure, draft, files)
        if failure is not None:
            self.status.showMessage(f"The answer failed: {failure.error}", 10000)
        if conversation_id == self.current_id and messages:
            self.live.announce_end(stream, finished, messages[-1].content)
        self.turn_finished.emit(finished)

    def _refused(self, failure: Failed, draft: str, files: tuple[str, ...] = ()) -> None:
        """The engine turned the message down before answering: say why, keep the draft and
        the files attached to it."""
        self.chat.show_notice(failure.error[:1].upper() + failure.error[1:])
        self.announce.emit(failure.error[:1].upper() + failure.error[1:], True)
        if failure.kind is FailureKind.INVALID_REQUEST and draft and not self.composer.text():
            self.composer.set_text(draft)
            if files and not self.attachments.files():
                self.attachments.put(list(files))

    async def _watch_titles(self, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
        """The engine names a new chat while its first answer streams (TitleUpdate, at
        most twice): the header and the sidebar follow at once."""
        async for event in events:
            if isinstance(event, TitleUpdate):
                self._titled(event)
            yield event

    def _titled(self, event: TitleUpdate) -> None:
        if event.conversation_id in self._temporary_ids:
            return
        if event.conversation_id == self.current_id:
            self.frame.set_title(event.title)
        if not self.sidebar.rename_shown(event.conversation_id, event.title):
            self.refresh()  # not listed yet (or filtered out by a search): list again
        self.titled.emit(event.conversation_id, event.title)

    async def close(self) -> None:
        """Stop every answer and let each record how it ended."""
        self.engine.chat.stop()
        for stream in list(self.streams.values()):
            await stream.wait()
        if self.temporary and self.current_id is not None:
            await self.engine.conversations.delete(self.current_id)
