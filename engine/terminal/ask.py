"""`wren ask`: one question, its answer streamed to the terminal (engine/cli.py registers
the command). The answer comes from Wren's window or the resident engine where one can give
it (engine/resident.py), else from an engine in this process; either way AskView shows the
events the same."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time

from ..events import (
    AnswerNotice,
    Delta,
    Failed,
    Finished,
    FinishReason,
    PrefillProgress,
    SafetyAction,
    SafetyNotice,
    Started,
    event_to_dict,
)
from ..progress import PrefillLine
from ..records import ORIGIN_KEY, TERMINAL_ORIGIN
from .main import _INTERRUPTED, _load, _main_thread, _open_engine, _params, _print_notices, _question, _saving
from .output import Output, shown

# How long a question waits for a database another program holds locked before it is
# refused (the store's busy timeout alone is 3 s; an answer's last write waits 60 s).
QUESTION_LOCK_WAIT = 30.0


async def run(args) -> int:
    """`wren ask`: the question from files, standard input and words; answered by Wren's
    window or the resident engine when one can (engine/resident.py), else here."""
    if args.logprobs is not None:
        from ..errors import InvalidRequest
        from ..inference.sampling import SamplingParams

        if not args.json:
            raise InvalidRequest("--logprobs needs --json: the probabilities come in each delta's JSON")
        SamplingParams(logprobs=args.logprobs)  # out of range: said before anything loads
    text, title = _question(args)
    from ..inference.constrain import response_format_argument

    response_format = response_format_argument(args.schema)  # a bad schema fails before the model loads
    from . import resident

    if resident.wanted(args):  # a model kept loaded between runs answers (engine/resident.py)
        code = await resident.ask(args, text, title, response_format)
        if code is not None:
            return code
    return await _ask_here(args, text, title, response_format)


async def ask_events(engine, args, text: str, title: str, response_format, load=None):
    """`wren ask`'s answer as events: the question's checks, the model, the send. Run in
    this process (_ask_here) or by the resident engine, which passes its own `load`."""
    await engine.check_question(text, args.model)  # empty, too long, too many tokens: before loading
    from .ask_tools import send_options as tool_options

    tool_fields = await tool_options(engine, args)  # unknown tool names: before loading
    saving = await _saving(engine, args)
    if saving:
        await _writable(engine)
    await (load or _load)(engine, args)
    from ..api import SendOptions

    params = _params(args, await engine.default_sampling())
    if args.logprobs is not None:
        params = params.with_(logprobs=args.logprobs)
    # The chat is made only once the question is accepted (no empty chat is left).
    async for event in engine.send_new(text, SendOptions(sampling=params, response_format=response_format,
                                                         **tool_fields),
                                       title=title, settings={ORIGIN_KEY: TERMINAL_ORIGIN}, temporary=not saving):
        yield event


# The exit status when the safety policy blocked the question or stopped the answer
# (docs/cli.md, "Exit statuses").
BLOCKED_STATUS = 3

_DONE = {SafetyAction.WARN: "warning", SafetyAction.REDACT: "replaced by [REDACTED:{category}]",
         SafetyAction.BLOCK: "blocked"}


def notice_line(notice: SafetyNotice, started: bool) -> str:
    """One line on standard error saying what a safety rule did, and where."""
    if notice.stage == "outgoing":
        where = "in what was sent to the remote model (memories, system prompt, earlier turns, tool results)"
    elif notice.stage == "output":
        where = "in the answer"
    else:  # an input notice after the answer started is a tool's result
        where = "in a tool's result" if started else "in your question"
    done = _DONE.get(notice.action, notice.action.value).format(category=notice.category)
    return f"wren: safety: {notice.category} {where}: {done} (rule {notice.rule})"


async def _writable(engine) -> None:
    """Wait (at most QUESTION_LOCK_WAIT s, in short steps Ctrl+C can cut) while another
    program holds the database locked, so a question is treated alike here and in a resident
    engine, whose model is loaded already; still locked, the first write says so."""
    deadline = time.monotonic() + QUESTION_LOCK_WAIT
    while not await engine.db(engine.store.writable, 0.25) and time.monotonic() < deadline:
        pass


class AskView:
    """What `wren ask` shows of each event: the answer on standard output (a JSON line per
    event with --json), a long prompt's progress, tool calls, safety notices and errors on
    standard error. `code` ends 1 when the answer failed, BLOCKED_STATUS when the safety
    policy blocked the question or stopped the answer."""

    def __init__(self, args) -> None:
        self.args = args
        self.code = 0
        self.started = False
        self.reading = PrefillLine(sys.stderr)  # a long prompt's progress, drawn on a terminal only
        self.out = Output(sys.stdout)  # on a terminal, without control characters

    async def show(self, engine, event) -> None:
        """`engine` answers a tool approval (the engine itself, or the resident engine's line)."""
        from .ask_tools import on_event as tool_event

        await tool_event(engine, event, self.args)  # a call shown, an approval asked
        self._safety(event)
        if self.args.json:  # JSON escapes control characters; on a terminal, C1 and DEL too
            print(json.dumps(event_to_dict(event), ensure_ascii=not self.out.raw), flush=True)
            if isinstance(event, Failed):  # a failed answer never exits 0
                self.code = 1
        elif isinstance(event, PrefillProgress):
            self.reading.update(event.done, event.total)
        elif isinstance(event, Delta):
            self.reading.clear()
            self.out.write(event.text)
        elif isinstance(event, Failed):
            self.reading.clear()
            self.out.end()
            print(shown(f"\nwren: {event.error}", sys.stderr), file=sys.stderr)
            self.code = 1
        elif isinstance(event, AnswerNotice):  # a file cut to fit, a tool the model did not call
            self.reading.clear()
            self.out.end()
            print(shown(f"\nwren: note: {event.text}", sys.stderr), file=sys.stderr, flush=True)
        elif isinstance(event, Finished) and not self.args.json:
            self.reading.clear()
            self.out.end()
            if self.started:  # a question blocked before any answer leaves standard output empty
                print()

    def _safety(self, event) -> None:
        """Safety notices and a block said on standard error (also with --json, whose
        events stay on standard output); a block ends with BLOCKED_STATUS."""
        if isinstance(event, Started):
            self.started = True
        elif isinstance(event, SafetyNotice) and event.action is not SafetyAction.ALLOW:
            self.reading.clear()
            self.out.end()
            print(shown(notice_line(event, self.started), sys.stderr), file=sys.stderr, flush=True)
        elif isinstance(event, Finished) and event.reason is FinishReason.BLOCKED:
            self.reading.clear()
            self.out.end()
            if self.started:
                said = "wren: the answer was stopped: the safety policy blocks what came next"
            else:
                said = "wren: not sent: the safety policy blocks this question (`wren scan TEXT` says why)"
            print(said, file=sys.stderr, flush=True)
            if self.code == 0:
                self.code = BLOCKED_STATUS

    def close(self) -> None:
        self.reading.clear()


class Interrupt:
    """Ctrl+C while `wren ask` answers in its own process. Before the model has loaded
    (the question checked, torch imported, the weights read) the work is cancelled at once
    and nothing is saved; from then on the answer stops within a token and is saved as
    stopped (a press before the answer exists stops it as it starts)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.pressed = False
        self.loaded = False
        self._task: asyncio.Task | None = None

    def __call__(self) -> None:  # the SIGINT handler, on the loop
        self.pressed = True
        self.engine.stop()
        if not self.loaded and self._task is not None:
            self._task.cancel()

    async def load(self, engine, args) -> None:
        await _load(engine, args)
        self.loaded = True  # past here a chat may be made: it is stopped, not cancelled mid-write

    def seen(self, event) -> None:
        if self.pressed and isinstance(event, Started):
            self.engine.stop(event.conversation_id)

    async def run(self, work) -> None:
        """Run `work`; a press before the model loaded ends it early, quietly."""
        self._task = asyncio.ensure_future(work)
        try:
            await self._task
        except asyncio.CancelledError:
            if not (self.pressed and self._task.cancelled()):
                raise


async def _ask_here(args, text: str, title: str, response_format) -> int:
    engine = _open_engine(one_shot=True)
    try:
        loop = asyncio.get_running_loop()
        interrupt = Interrupt(engine)
        view = AskView(args)

        async def answer() -> None:
            async for event in ask_events(engine, args, text, title, response_format, load=interrupt.load):
                interrupt.seen(event)
                await view.show(engine, event)

        if _main_thread():
            loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            await interrupt.run(answer())
        finally:
            view.close()
            if _main_thread():
                loop.remove_signal_handler(signal.SIGINT)
        return _INTERRUPTED if interrupt.pressed else view.code
    finally:
        # The model and its background work go before the interpreter does.
        await engine.close()
        _print_notices(engine)
