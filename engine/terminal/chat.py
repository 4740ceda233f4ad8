"""`wren chat`: a conversation in the terminal, like `ollama run`.

Lines are edited with readline where Python has it (arrows, Ctrl+R, history kept in the
data folder between sessions); where it has not (Windows), plain lines still work. A line
that starts with `/` is a command (`/help` lists them) and is never sent to the model; an
unknown one is an error. `\"\"\"` opens a message of several lines and `\"\"\"` closes it.

The prompt is read on the main thread, outside the event loop, so Ctrl+C at the prompt
only drops the line being typed; during an answer it stops the answer.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import chat_history
from ..chat_history import Entry
from ..errors import WrenError
from ..events import (
    AnswerNotice,
    Delta,
    Failed,
    Finished,
    FinishReason,
    PrefillProgress,
    Reasoning,
    Started,
)
from ..progress import PrefillLine
from ..records import ORIGIN_KEY, TERMINAL_ORIGIN, ConversationInfo
from .ask_request import policy_notices
from .output import Output, ThinkingLines, length_note, shown
from .sigint import SigintRouter, ctrl_c_kept

PROMPT, MORE = ">>> ", "... "
QUOTES = '"""'
HISTORY_FILE = chat_history.FILE_NAME
HISTORY_LINES = chat_history.KEEP_LINES


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str
    aliases: tuple[str, ...] = ()


COMMANDS = (
    Command("/help", "", "list these commands", ("/?",)),
    Command("/new", "", "start a new chat (the model forgets this one)", ("/clear", "/reset")),
    Command("/system", "[TEXT]", "show the system prompt, or set it for this session; /system --clear drops it"),
    Command("/set", "[NAME VALUE]", "show the sampling settings, or set one: temperature, top-p, top-k, "
                                    "min-p, repetition-penalty, max-tokens, seed (seed off: random)"),
    Command("/attach", "[PATH]", "attach a file to your next message (its text goes into the prompt); "
                                 "without PATH, list the files waiting; /attach --clear drops them"),
    Command("/model", "[NAME]", "show the model, or switch to an installed one"),
    Command("/models", "", "list the installed models"),
    Command("/bye", "", "quit (Ctrl+D does too)", ("/exit", "/quit")),
)
_BY_NAME = {name: c for c in COMMANDS for name in (c.name, *c.aliases)}
SETTABLE = {  # /set NAME: the sampling field, and how its value is read
    "temperature": ("temperature", float), "top-p": ("top_p", float), "top-k": ("top_k", int),
    "min-p": ("min_p", float), "repetition-penalty": ("repetition_penalty", float),
    "max-tokens": ("max_tokens", int), "seed": ("seed", int),
}


def help_text() -> str:
    rows = [(f"{c.name} {c.usage}".strip(), c.help + (f" (also {', '.join(c.aliases)})" if c.aliases else ""))
            for c in COMMANDS]
    rows.append((f'{QUOTES} … {QUOTES}', "a message of several lines"))
    rows.append(("//TEXT", "send a message that starts with /"))
    width = max(len(left) for left, _ in rows)
    return "\n".join(f"  {left:{width}}  {right}" for left, right in rows)


# -- reading lines ------------------------------------------------------------------------

def read_message(read: Callable[[str], str], *, prompt: str = PROMPT, more: str = MORE) -> str:
    """One message (or command) from `read(prompt)`; `\"\"\"` starts several lines, which end
    at a line that ends with `\"\"\"`, or at the end of input (a pipe whose text never closes
    its quotes: the lines are sent, not dropped without a word). EOFError (with nothing
    typed) and KeyboardInterrupt pass through."""
    line = read(prompt)
    if not line.lstrip().startswith(QUOTES):
        return line
    first = line.lstrip()[len(QUOTES):]
    if first.rstrip().endswith(QUOTES):  # """one line"""
        return first.rstrip()[: -len(QUOTES)]
    lines = [first] if first.strip() else []
    while True:
        try:
            line = read(more)
        except EOFError:
            if any(part.strip() for part in lines):
                return "\n".join(lines)
            raise
        if line.rstrip().endswith(QUOTES):
            last = line.rstrip()[: -len(QUOTES)]
            if last.strip():
                lines.append(last)
            return "\n".join(lines)
        lines.append(line)


class History:
    """readline's line editing, and the lines typed, tagged with their chat, saved in the
    data folder (engine/chat_history.py), where readline exists."""

    def __init__(self, path: Path | None, *, save: bool = True) -> None:
        self.path, self.save = path, save
        self.pending: list[str] = []  # typed; their chat is not known yet
        self.tagged: list[Entry] = []  # this session's lines and the chat each went to
        try:
            import readline
        except ImportError:  # Windows, or a Python built without it: plain lines
            self.readline = None
            return
        self.readline = readline
        readline.set_history_length(HISTORY_LINES)
        readline.set_auto_history(False)  # lines are added by `input` below, to be tagged
        readline.set_completer(self._complete)
        readline.set_completer_delims(" \t\n")
        if "libedit" in (readline.__doc__ or ""):
            readline.parse_and_bind("bind ^I rl_complete")
        else:
            readline.parse_and_bind("tab: complete")
        readline.clear_history()
        if path is not None:
            try:
                saved = chat_history.load(path)
            except OSError:
                saved = []
            for entry in saved:
                readline.add_history(entry.text)

    def _complete(self, text: str, state: int) -> str | None:
        if not text.startswith("/"):
            return None
        matches = sorted(name for name in _BY_NAME if name.startswith(text))
        return matches[state] + " " if state < len(matches) else None

    def input(self, prompt: str) -> str:
        """A line from the terminal, remembered (when saving) until its chat is known."""
        line = input(prompt)
        if self.readline is not None and self.save and line.strip():
            self.readline.add_history(line)
            self.pending.append(line)
        return line

    def settle(self, conversation_id: int | None) -> None:
        """The lines typed so far went to `conversation_id` (None: no chat yet)."""
        if conversation_id is not None and self.pending:
            self.tagged += [Entry(conversation_id, text) for text in self.pending]
            self.pending = []

    def close(self, exists: Callable[[int], bool] | None = None) -> None:
        """Add this session's lines to the history file (only the owner may read it),
        leaving out those of chats deleted meanwhile (`exists` says which are not)."""
        if self.readline is None or self.path is None or not self.save:
            return
        entries = self.tagged + [Entry(None, text) for text in self.pending]
        if exists is not None:
            alive = {cid: exists(cid) for cid in {e.conversation_id for e in entries} if cid is not None}
            entries = [e for e in entries if e.conversation_id is None or alive[e.conversation_id]]
        try:
            chat_history.append(self.path, entries)
        except OSError as exc:
            print(f"wren: the chat history was not saved to {self.path}: {exc.strerror or exc}", file=sys.stderr)


# -- the session ----------------------------------------------------------------------------

class Chat:
    """What a chat remembers between lines: the conversation, the sampling settings, the
    system prompt. `handle(line)` does one line; it returns False when the chat should end."""

    def __init__(self, engine, params, *, save: bool = True, backend: str | None = None,
                 out: Output | None = None, err=None, sigint: SigintRouter | None = None) -> None:
        self.engine, self.params, self.save, self.backend = engine, params, save, backend
        self.sigint = sigint or SigintRouter()  # not started: Python's own Ctrl+C handling
        self.out = out or Output(sys.stdout)
        self.err = err or sys.stderr
        self.system: str | None = None
        self.conv: ConversationInfo | None = None  # made by the first message, so no empty chat is left
        self.attached: list[str] = []  # files for the next message (/attach)

    def note(self, text: str) -> None:
        print(shown(text, self.err), file=self.err, flush=True)

    def new_conversation(self) -> None:
        """The next message starts a new chat."""
        self.conv = None

    async def handle(self, line: str) -> bool:
        if not line.strip():
            return True
        if line.startswith("//"):
            await self.send(line[1:])
            return True
        if line.lstrip().startswith("/"):
            return await self.command(line.strip())
        await self.send(line)
        return True

    async def command(self, line: str) -> bool:
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        command = _BY_NAME.get(name.lower())
        if command is None:
            self.note(f"wren: unknown command {name}; /help lists the commands "
                      "(start a message with // to send one that begins with /)")
            return True
        if command.name == "/help":
            self.note("Commands:\n" + help_text())
        elif command.name == "/bye":
            return False
        elif command.name == "/new":
            self.new_conversation()
            self.note("(new chat)")
        elif command.name == "/system":
            self.set_system(rest)
        elif command.name == "/set":
            self.set_sampling(rest)
        elif command.name == "/attach":
            self.attach(rest)
        elif command.name == "/model":
            await self.switch_model(rest)
        elif command.name == "/models":
            for m in await self.engine.models.list():
                problem = getattr(m, "problem", None)
                self.note(f"  {m.name}" + (f" (cannot load: {problem})" if problem else ""))
        return True

    def set_system(self, text: str) -> None:
        if text == "--clear":
            self.system = None
            self.note("(system prompt cleared: the model's own applies)")
        elif text:
            self.system = text
            self.note("(system prompt set for this session)")
        else:
            self.note(f"system prompt: {self.system}" if self.system else "(no system prompt set: the saved "
                      "setting, else the model's own, applies; /system TEXT sets one)")

    def attach(self, text: str) -> None:
        """/attach PATH: a file for the next message (checked now, read when it is sent)."""
        if text == "--clear":
            self.attached = []
            self.note("(no files attached)")
            return
        if not text:
            names = ", ".join(Path(p).name for p in self.attached)
            self.note(f"(attached to your next message: {names})" if names else "(no files attached; /attach PATH)")
            return
        path = Path(text.strip().strip("'\"")).expanduser()
        if not path.is_file():
            self.note(f"wren: /attach: {path} is not a file")
            return
        resolved = str(path.resolve())
        if resolved not in self.attached:
            self.attached.append(resolved)
        self.note(f"(attached {path.name} to your next message)")

    def set_sampling(self, text: str) -> None:
        if not text:
            values = [f"{name} {getattr(self.params, field)}" for name, (field, _) in SETTABLE.items()]
            self.note("  " + "\n  ".join(values))
            return
        name, _, value = text.partition(" ")
        name, value = name.lower().replace("_", "-"), value.strip()
        if name == "system":  # `/set system TEXT`, as in ollama
            self.set_system(value)
            return
        if name not in SETTABLE:
            self.note(f"wren: /set does not know {name!r}; it sets {', '.join(SETTABLE)}")
            return
        field, kind = SETTABLE[name]
        if not value:
            self.note(f"wren: /set {name} needs a value")
            return
        try:
            parsed = None if name == "seed" and value.lower() in ("off", "none") else kind(value)
        except ValueError:
            self.note(f"wren: /set {name}: {value!r} is not a {'whole number' if kind is int else 'number'}")
            return
        try:
            self.params = self.params.with_(**{field: parsed})
        except WrenError as exc:
            self.note(f"wren: {exc}")
            return
        now = getattr(self.params, field)
        self.note(f"({name} {'off' if now is None else now})")

    async def switch_model(self, name: str) -> None:
        if name:
            try:
                await self.engine.models.load(name, backend=self.backend)
            except WrenError as exc:
                self.note(f"wren: {exc}")
                return
        status = self.engine.models.current
        self.note(f"(model {status.name} on {status.backend})" if status else "(no model loaded)")

    async def send(self, text: str) -> None:
        from ..records import SendOptions

        files, self.attached = tuple(self.attached), []
        options = SendOptions(sampling=self.params, system_prompt=self.system, attachments=files)
        if files:
            self.note(f"(with {', '.join(Path(p).name for p in files)})")
        if self.conv is None:  # the chat is made only once its first question is accepted
            events = self.engine.chat.send_new(text, options, title=" ".join(text.split())[:60],
                                          settings={ORIGIN_KEY: TERMINAL_ORIGIN}, temporary=not self.save)
        else:
            events = self.engine.chat.send(self.conv.id, text, options)
        stopping: list[bool] = []

        def stop() -> None:
            # engine.chat.stop reaches answers that have started; a press before that (while
            # the question is checked and its prompt assembled) is kept and said again as
            # each event comes (_stream), so the answer it meant stops within a token
            stopping.append(True)
            self.engine.chat.stop()

        with self.sigint.on_interrupt(stop) as routed:
            handled = not routed and _stop_on_sigint(stop)
            try:
                await self._stream(events, stopping)
            finally:
                if handled:
                    asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    async def _stream(self, events, stopping: list[bool]) -> None:
        reading = PrefillLine(self.err)
        thinking = ThinkingLines(self.out)  # dimmed, before the answer, on a terminal only
        try:
            async for event in events:
                if stopping:
                    self.engine.chat.stop()
                if isinstance(event, Started) and self.conv is None:
                    self.conv = await self.engine.conversations.get(event.conversation_id)
                if isinstance(event, PrefillProgress):
                    reading.update(event.done, event.total)
                    continue
                reading.clear()
                self._show(event, thinking)
        except WrenError as exc:
            self.note(f"wren: {exc}")
        finally:
            reading.clear()
            self.out.end()

    def _show(self, event, thinking: ThinkingLines) -> None:
        """One event of the answer: its thinking dimmed, its text, a failure or note, its end."""
        if isinstance(event, Reasoning):
            thinking.write(event.text)
            return
        thinking.end()
        if isinstance(event, Delta):
            self.out.write(event.text)
        elif isinstance(event, Failed):
            self.out.end()
            self.out.line()
            self.note(f"wren: {event.error}")
        elif isinstance(event, AnswerNotice):  # e.g. a tool-shaped question answered without the tool
            self.out.end()
            self.out.line()
            self.note(f"wren: note: {event.text}")
        elif isinstance(event, Finished):
            self.out.end()
            self.out.line(" [stopped]" if event.reason is FinishReason.CANCELLED else "")
            if event.reason is FinishReason.BLOCKED:
                self.note("(not sent: the safety policy blocks this message; `wren scan TEXT` says why)")
            elif event.reason is FinishReason.LENGTH:  # cut mid-sentence, it looked finished
                self.note(length_note(event.message_id))


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _stop_on_sigint(stop: Callable[[], object]) -> bool:
    """Without a router (an embedding caller, or no signal masks): Ctrl+C stops the answer
    through the loop's own handler, where the loop can install one."""
    if not _main_thread():
        return False
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop)
    except NotImplementedError:  # Windows' loops: Ctrl+C ends the chat instead
        return False
    return True


def history_path() -> Path:
    from .. import paths

    return paths.data_dir() / HISTORY_FILE


def run(args, open_engine: Callable, load: Callable, sampling: Callable, save_setting: Callable) -> int:
    """The chat loop; the engine's work runs on one event loop, the prompt outside it."""
    voice = _voice_chat(args)  # before the model loads: no microphone is said at once
    loop = asyncio.new_event_loop()
    sigint = SigintRouter().start(loop)  # before the engine makes its threads: see sigint.py
    try:
        engine = open_engine()
    except BaseException:
        sigint.stop()
        raise
    interactive = _is_tty(sys.stdin) and _is_tty(sys.stdout)
    history = None
    try:
        print("Loading the model…", file=sys.stderr, flush=True)
        status = loop.run_until_complete(_stoppable(sigint, load(engine, args))) or engine.models.current
        _say_loaded(engine, status)
        params = loop.run_until_complete(sampling(engine, args))
        save = args.save if args.save is not None else loop.run_until_complete(save_setting(engine))
        chat = Chat(engine, params, save=save, backend=args.backend, sigint=sigint)
        if interactive:
            history = History(history_path(), save=save)
        kept = "" if save else " This chat is not saved."
        print(f"Type a message; /help lists the commands, {QUOTES} starts several lines, "
              f"Ctrl+C stops an answer, Ctrl+D or /bye quits.{kept}", file=sys.stderr, flush=True)
        prompt, more = (PROMPT, MORE) if interactive else ("", "")
        read = _reader(sigint, voice, history)
        while True:
            # busy from the prompt on: a Ctrl+C once readline has taken Enter, or after the
            # prompt, stops the answer the line asks for, wherever it is (sigint.py)
            with sigint.busy():
                try:
                    with sigint.prompt(), ctrl_c_kept():
                        line = read_message(read, prompt=prompt, more=more)
                except EOFError:
                    if interactive:
                        print(file=sys.stderr)
                    return 0
                except KeyboardInterrupt:  # at the prompt: drop what was typed
                    if voice is not None:  # talking: Ctrl+C ends the chat
                        print(file=sys.stderr)
                        return 0
                    print("\n(Ctrl+D or /bye quits)", file=sys.stderr, flush=True)
                    continue
                going_on = loop.run_until_complete(chat.handle(line))
            if voice is not None and going_on and not _speak(loop, sigint, voice, engine, chat):
                return 0
            if history is not None:
                history.settle(chat.conv.id if chat.conv is not None else None)
            if not going_on:
                return 0
    finally:
        if voice is not None:
            voice.close()
        if history is not None:
            history.close(lambda cid: loop.run_until_complete(_exists(engine, cid)))
        try:
            loop.run_until_complete(engine.close())
            for notice in engine.notices():  # a damaged model file, disk freed at start
                print(f"wren: {notice.message}", file=sys.stderr)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            sigint.stop()


def _reader(sigint: SigintRouter, voice, history: History | None) -> Callable[[str], str]:
    """What reads a line: the voice, readline (which tells `sigint` when a line has begun),
    or plain input(); a press carried from the line before drops the message."""
    reader = voice.listen if voice is not None else history.input if history is not None else input
    if history is not None and history.readline is not None:
        history.readline.set_pre_input_hook(sigint.line_begun)

    def read(text: str) -> str:
        sigint.before_read()
        return reader(text)

    return read


def _speak(loop, sigint: SigintRouter, voice, engine, chat: Chat) -> bool:
    """Say the last answer aloud; False when Ctrl+C ended the chat while it spoke."""
    answer = loop.run_until_complete(voice.last_answer(engine, chat.conv.id if chat.conv else None))
    try:
        with sigint.prompt(), ctrl_c_kept():
            voice.speak(answer)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return False
    return True


def _say_loaded(engine, status) -> None:
    """The model that answers, and what is wrong with the user's safety policy file, if anything."""
    print(f"(model {status.name} on {status.backend}, loaded in {status.load_seconds:.1f} s)", file=sys.stderr)
    for message in policy_notices(engine):
        print(f"wren: {message}", file=sys.stderr)


async def _stoppable(sigint: SigintRouter, work):
    """`work` (loading the model) with Ctrl+C cancelling it, waiting for it to unwind, and
    then raising KeyboardInterrupt as Python would have: the load lets a half-loaded model's
    worker finish and go first. Interrupted where it stood instead, the worker's thread was
    left inside torch as the interpreter exited, and the process aborted ("terminate called
    without an active exception") or printed a traceback."""
    task = asyncio.ensure_future(work)
    with sigint.on_interrupt(task.cancel) as routed:
        try:
            return await task
        except asyncio.CancelledError:
            if routed and task.cancelled():
                raise KeyboardInterrupt from None
            raise


def _voice_chat(args):
    """`--voice`: the microphone and speaker (engine/terminal/voice.py), or None."""
    if not getattr(args, "voice", False):
        return None
    from .voice import VoiceChat

    return VoiceChat()


async def _exists(engine, conversation_id: int) -> bool:
    """Whether a chat is still there (not deleted by another window or terminal meanwhile)."""
    from ..errors import NotFound

    try:
        await engine.conversations.get(conversation_id)
    except NotFound:
        return False
    except WrenError:  # the database cannot say now: keep the lines
        return True
    return True


def _is_tty(stream) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


__all__ = ["COMMANDS", "Chat", "History", "help_text", "read_message", "run"]
