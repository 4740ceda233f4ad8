"""`wren ask`: one question, its answer streamed to the terminal (main.py registers the
command). The question becomes an AskRequest (ask_request.py); the answer comes from Wren's
window or the resident engine where one can give it (resident.py), else from an engine in
this process; either way AskView shows the events the same."""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from ..events import (
    AnswerNotice,
    Citation,
    Delta,
    Failed,
    Finished,
    FinishReason,
    PrefillProgress,
    Reasoning,
    SafetyAction,
    SafetyNotice,
    Started,
    event_to_dict,
)
from ..progress import PrefillLine
from .ask_request import AskRequest, answer, load_asked_model, policy_notices
from .main import _INTERRUPTED, _main_thread, _open_engine, _print_notices, _question
from .output import Output, ThinkingLines, length_note, shown


async def run(args) -> int:
    """`wren ask`: the question from files, standard input and words; answered by Wren's
    window or the resident engine when one can (resident.py), else here."""
    if args.logprobs is not None:
        from ..errors import InvalidRequest
        from ..inference.sampling import SamplingParams

        if not args.json:
            raise InvalidRequest("--logprobs needs --json: the probabilities come in each delta's JSON")
        SamplingParams(logprobs=args.logprobs)  # out of range: said before anything loads
    text, title = _question(args)
    from ..inference.constrain import response_format_argument

    response_format = response_format_argument(args.schema)  # a bad schema fails before the model loads
    request = request_from(args, text, title, response_format)
    from . import resident

    if resident.wanted(args):  # a model kept loaded between runs answers (resident.py)
        code = await resident.ask(args, request)
        if code is not None:
            return code
    return await _ask_here(args, request)


def request_from(args, text: str, title: str, response_format: dict | None) -> AskRequest:
    """The question as `wren ask`'s command line put it."""
    return AskRequest(text=text, title=title, model=args.model, backend=args.backend, seed=args.seed,
                      temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                      max_tokens=args.max_tokens, logprobs=args.logprobs, tools=args.tools,
                      tool_choice=args.tool_choice or "auto", response_format=response_format, save=args.save,
                      thinking=getattr(args, "thinking", None), documents=getattr(args, "docs", None),
                      project=getattr(args, "project", None), expand_query=getattr(args, "expand_query", None))


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


class AskView:
    """What `wren ask` shows of each event: the answer on standard output (a JSON line per
    event with --json), a long prompt's progress, tool calls, safety notices and errors on
    standard error. `code` ends 1 when the answer failed, BLOCKED_STATUS when the safety
    policy blocked the question or stopped the answer."""

    def __init__(self, args) -> None:
        self.args = args
        self.code = 0
        self.started = False
        self.wrote = False  # some of the answer is on standard output
        self.reading = PrefillLine(sys.stderr)  # a long prompt's progress, drawn on a terminal only
        self.out = Output(sys.stdout)  # on a terminal, without control characters
        self.thinking = ThinkingLines(self.out, shown=not getattr(args, "hide_thinking", False))

    async def show(self, engine, event) -> None:
        """`engine` answers a tool approval (the engine itself, or the resident engine's line)."""
        from .ask_tools import on_event as tool_event

        await tool_event(engine, event, self.args)  # a call shown, an approval asked
        self._safety(event)
        if isinstance(event, Reasoning) and not self.thinking.shown:
            return  # --hide-thinking: not even as a JSON event
        if self.args.json:  # JSON escapes control characters; on a terminal, C1 and DEL too
            print(json.dumps(event_to_dict(event), ensure_ascii=not self.out.raw), flush=True)
            if isinstance(event, Failed):  # a failed answer never exits 0
                self.code = 1
        elif isinstance(event, PrefillProgress):
            self.reading.update(event.done, event.total)
        elif isinstance(event, Reasoning):
            self.reading.clear()
            self.thinking.write(event.text)
        elif isinstance(event, Delta):
            self.reading.clear()
            self.thinking.end()
            self.out.write(event.text)
            self.wrote = self.wrote or bool(event.text)
        elif isinstance(event, Failed):
            self.reading.clear()
            self.out.end()
            print(shown(f"\nwren: {event.error}", sys.stderr), file=sys.stderr)
            self.code = 1
        elif isinstance(event, AnswerNotice):  # a file cut to fit, a tool the model did not call
            self.reading.clear()
            self.out.end()
            print(shown(f"\nwren: note: {event.text}", sys.stderr), file=sys.stderr, flush=True)
        elif isinstance(event, Citation):  # the sources, after the answer, apart from it
            self.reading.clear()
            self.out.end()
            print(shown(f"\n[{event.number}] {event.path}" + (f" ({event.where})" if event.where else ""),
                        sys.stderr), file=sys.stderr, end="", flush=True)
        elif isinstance(event, Finished) and not self.args.json:
            self.reading.clear()
            self.thinking.end()
            self.out.end()
            # a question blocked before any answer, or an answer that failed before any of it came,
            # leaves standard output empty (a blank line there read as an empty answer)
            if self.started and (self.wrote or self.code == 0):
                print()
            if event.reason is FinishReason.LENGTH:  # it looked finished, cut mid-sentence
                print(length_note(event.message_id), file=sys.stderr, flush=True)

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
        self.engine.chat.stop()
        if not self.loaded and self._task is not None:
            self._task.cancel()

    async def load(self, engine, request: AskRequest) -> None:
        await load_asked_model(engine, request)
        self.loaded = True  # past here a chat may be made: it is stopped, not cancelled mid-write

    def seen(self, event) -> None:
        if self.pressed and isinstance(event, Started):
            self.engine.chat.stop(event.conversation_id)

    async def run(self, work) -> None:
        """Run `work`; a press before the model loaded ends it early, quietly."""
        self._task = asyncio.ensure_future(work)
        try:
            await self._task
        except asyncio.CancelledError:
            if not (self.pressed and self._task.cancelled()):
                raise


async def _ask_here(args, request: AskRequest) -> int:
    engine = _open_engine(one_shot=True)
    try:
        loop = asyncio.get_running_loop()
        interrupt = Interrupt(engine)
        view = AskView(args)
        for message in policy_notices(engine):
            print(f"wren: {message}", file=sys.stderr)

        async def show() -> None:
            async for event in answer(engine, request, load=interrupt.load):
                interrupt.seen(event)
                await view.show(engine, event)

        if _main_thread():
            loop.add_signal_handler(signal.SIGINT, interrupt)
        try:
            await interrupt.run(show())
        finally:
            view.close()
            if _main_thread():
                loop.remove_signal_handler(signal.SIGINT)
        return _INTERRUPTED if interrupt.pressed else view.code
    finally:
        # The model and its background work go before the interpreter does.
        await engine.close()
        _print_notices(engine)
