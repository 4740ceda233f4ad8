"""`wren`: the terminal front end (chat, ask, models, conversations, scan).

Start-up time is most of a `wren ask`: modules that only some commands need (torch, the
engine, the extensions' subcommands) are imported inside those commands.

On a terminal, text that came from a model (answers, titles, exports) is printed without
its control characters and escape sequences (output.py); to a pipe or a file
it goes as it came. docs/cli.md describes the commands.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import InvalidRequest, WrenError
from ..inference.select import BACKEND_NAMES
from ..records import ORIGIN_KEY, TERMINAL_ORIGIN
from . import sigint
from .ask_request import SAVE_SETTING
from .output import shown

# The commands defined here; any other is an extension's (engine.memory, engine.safety).
_BUILTIN = ("chat", "ask", "models", "conversations")
_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl+C


def _sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=BACKEND_NAMES, help="inference backend (default: setting, else auto)")
    p.add_argument("--model", help="installed model name (see `wren models`)")
    p.add_argument("--seed", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--max-tokens", type=int)


def _params(args, base):
    changes = {
        k: v
        for k, v in (
            ("seed", args.seed), ("temperature", args.temperature), ("top_p", args.top_p),
            ("top_k", args.top_k), ("max_tokens", args.max_tokens),
        )
        if v is not None
    }
    return base.with_(**changes)


def build_parser(extensions: bool = True) -> argparse.ArgumentParser:
    """The whole command line; extensions=False leaves out the extensions' subcommands
    (importing them costs start-up time a built-in command does not need)."""
    parser = argparse.ArgumentParser(prog="wren", description="Wren, a private local AI assistant.")
    parser.add_argument("--version", action="version", version=f"wren {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    chat = sub.add_parser("chat", help="chat in the terminal; /help lists its commands (Ctrl+C stops an answer)")
    _sampling_args(chat)
    _save_args(chat)
    chat.add_argument("--voice", action="store_true", help="talk instead of typing: each question is heard from the "
                                                          "microphone and each answer spoken (Ctrl+C stops)")
    chat.set_defaults(func=_cmd_chat)

    ask = sub.add_parser("ask", help="ask one question and stream the answer (Ctrl+C stops it, status 130)")
    _sampling_args(ask)
    ask.add_argument("--json", action="store_true", help="one JSON object per event, each with a `type`")
    ask.add_argument("--thinking", choices=("on", "off", "low", "medium", "high"),
                     help="whether (on/off) or how much (low/medium/high effort) a thinking model thinks, where "
                          "its chat template takes that (default: the model's own)")
    ask.add_argument("--hide-thinking", action="store_true",
                     help="leave out a thinking model's thinking (shown dimmed on a terminal, as reasoning "
                          "events with --json; never in piped output, which holds the answer alone)")
    ask.add_argument("--logprobs", type=int, metavar="N",
                     help="with --json: each delta's tokens with their log-probabilities and the N (0-20) likeliest "
                          "alternatives")
    ask.add_argument("--schema", metavar="FILE|JSON",
                     help="answer with JSON valid for this JSON schema (a file, or the schema itself)")
    from .ask_tools import add_arguments as tool_arguments

    tool_arguments(ask)  # --tools, --tool-choice, --approve
    from .docs_args import add_arguments as docs_arguments

    docs_arguments(ask)  # --docs, --no-docs, --project
    ask.add_argument("--audio", metavar="FILE",
                     help="ask what an audio file says (recognised on this machine; the transcript is the "
                          "question, and is printed to standard error)")
    ask.add_argument("--file", action="append", default=[], metavar="PATH",
                     help="attach a text file (up to 1 MB; repeat for more): files first, then "
                          "standard input, then the words")
    _save_args(ask)
    ask.add_argument("--keep-alive", type=float, metavar="SECONDS",
                     help="keep the model loaded this long after the answer in a resident engine, so the next "
                          "`wren ask` starts at once (default: WREN_KEEP_ALIVE, else 300; 0: answer in this "
                          "process and leave nothing running)")
    ask.add_argument("text", nargs="*", metavar="TEXT",
                     help="the question (its words joined by spaces, no quotes needed); standard "
                          "input, when piped or redirected (or with -), comes before it")
    ask.set_defaults(func=_cmd_ask)

    _models_args(sub)

    convs = sub.add_parser("conversations", help="list, show or export conversations")
    convs.add_argument("action", nargs="?", choices=("list", "show", "export"), default="list")
    convs.add_argument("id", nargs="?", type=int)
    convs.add_argument("--format", choices=("markdown", "json"), default="markdown")
    convs.add_argument("--json", action="store_true", help="list as JSON")
    convs.set_defaults(func=_cmd_conversations)

    if extensions:
        for register in _extensions():
            register(sub)
    return parser


def _save_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--save", action=argparse.BooleanOptionalAction, default=None,
                   help=f"keep the conversation (in the window's Terminal group); --no-save keeps "
                        f"nothing on disk (default: setting {SAVE_SETTING}, else save)")


def _extensions():
    """Subcommands that live beside the parts they belong to."""
    from .completion import register as completion
    from .continuation import register as continue_answer
    from .data import register as data
    from .docs import register as docs
    from .memory import register as memory
    from .privacy import register as privacy
    from .providers import register as providers
    from .resident import register as resident
    from .safety import register as safety
    from .serve import register as serve
    from .tokens import register as tokens
    from .tools import register as tools
    from .voice import register as voice

    return [safety, memory, completion, serve, providers, tools, tokens, data, continue_answer, resident, voice, privacy,
            docs]


def _print_notices(engine) -> None:
    """What the engine found outside the answer (a damaged model file, disk freed at
    start) goes to standard error, so a pipe of the answer stays clean."""
    for notice in engine.notices():
        print(f"wren: {notice.message}", file=sys.stderr)


def _open_engine(one_shot: bool = False):
    """The engine over the user's data. `one_shot`: for a command that ends after one
    answer (`wren ask` answering in its own process), a torch model decodes eagerly: loading
    the saved compiled step imports torch's compiler, which holds the GIL for seconds while
    the answer decodes (first token 2.7-3.3 s instead of 0.3 s, bench/ask.py's question), and
    compiling would outlive the process."""
    from ..api import Engine

    if not one_shot:
        return Engine.open()
    from ..inference.select import resolve_backend

    def backend(name: str):
        chosen = resolve_backend(name)
        from ..inference.backends.torch import TorchBackend

        if isinstance(chosen, TorchBackend):
            chosen.background_compile = False
        return chosen

    return Engine.open(backend_factory=backend)


def _question(args) -> tuple[str, str]:
    """The question's text and a title for it: files, then standard input, then the words."""
    from .question import question

    audio = getattr(args, "audio", None)
    if audio:  # the spoken question stands where the words would
        from .voice import transcript_of

        if args.text:
            raise InvalidRequest("give the question as --audio or as words, not both")
        heard = transcript_of(audio)
        if not heard.heard:
            raise InvalidRequest(f"no speech was heard in {audio}; nothing was asked")
        print(f"heard: {heard.text}", file=sys.stderr, flush=True)
        return question([heard.text], getattr(args, "file", None))
    return question(args.text, getattr(args, "file", None))


async def _load(engine, args) -> None:
    if args.model or args.backend:
        await engine.models.load(args.model, backend=args.backend)
    else:
        await engine.models.load()


async def _cmd_ask(args) -> int:
    from .ask import run

    return await run(args)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _cmd_chat(args) -> int:
    from . import chat

    async def sampling(engine, args):
        return _params(args, await engine.settings.default_sampling())

    async def save_setting(engine):
        return bool(await engine.settings.get(SAVE_SETTING, True))

    return chat.run(args, _open_engine, _load, sampling, save_setting)


# -- wren models [list|import|pull|rm|info] ------------------------------------------------

def _models_args(sub) -> None:
    models = sub.add_parser("models", help="list, import, pull, remove or describe installed models")
    models.add_argument("--json", action="store_true", help="one JSON object per model")
    models.set_defaults(func=_cmd_models)
    actions = models.add_subparsers(dest="models_action", metavar="ACTION")
    p = actions.add_parser("list", help="installed models (what plain `wren models` shows)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="one JSON object per model")
    p.set_defaults(func=_cmd_models)
    p = actions.add_parser("import", help="install a GGUF file (copied) or a Hugging Face model folder (used in place)")
    p.add_argument("path", help="a .gguf file or a folder with config.json, tokenizer.json and .safetensors")
    p.add_argument("--name", help="the installed name (default: from the file or folder name)")
    p.set_defaults(func=_cmd_models_import)
    p = actions.add_parser("pull", help="download a model from the Hugging Face hub (Ctrl+C stops; pull again to resume)")
    p.add_argument("spec", metavar="REPO[:FILE]", help="OWNER/NAME, or OWNER/NAME:FILE.gguf for one file of it; "
                                                   "or a speech recognizer or voice Wren offers (e.g. whisper-base)")
    p.add_argument("--quant", default="Q4_K_M", help="which GGUF of the repo, by its quantization (default Q4_K_M)")
    p.add_argument("--name", help="the installed name (default: from the file name)")
    p.set_defaults(func=_cmd_models_pull)
    p = actions.add_parser("rm", help="delete an installed model (a registered folder itself is kept)")
    p.add_argument("name")
    p.add_argument("--yes", action="store_true", help="do not ask (needed when not run from a terminal)")
    p.set_defaults(func=_cmd_models_rm)
    p = actions.add_parser("info", help="a model's shape, size on disk, estimated memory and GPU plan")
    p.add_argument("name")
    p.add_argument("--json", action="store_true")
    p.add_argument("--gpu-memory", metavar="SIZE",
                   help="plan for a GPU with this much memory free (12GiB, 8GB), whether or not one is here")
    p.add_argument("--context", type=int, metavar="TOKENS", help="the context to plan the GPU's cache for (default 8192)")
    p.add_argument("--gpu-layers", type=int, metavar="N", help="plan N layers on the GPU, as WREN_GPU_LAYERS does")
    p.set_defaults(func=_cmd_models_info)


def _registry():
    from ..modelhub.registry import ModelRegistry

    return ModelRegistry()


class _ProgressBar:
    """`progress(done, total)` drawn on stderr: a bar, the percentage, MB and MB/s."""

    WIDTH = 24

    def __init__(self, label: str) -> None:
        import time

        self.label, self._clock = label, time.monotonic
        self._start: tuple[float, int] | None = None
        self._last_draw = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if self._start is None:
            self._start = (now, done)  # a resumed download counts its speed from here
        if now - self._last_draw < 0.1 and done < total:
            return
        self._last_draw = now
        fraction = done / total if total else 1.0
        filled = int(fraction * self.WIDTH)
        elapsed = now - self._start[0]
        # a speed over less than half a second (or over bytes that were already there) says nothing
        speed = f"  {(done - self._start[1]) / elapsed / 1e6:6.1f} MB/s" if elapsed >= 0.5 else ""
        print(f"\r{self.label} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {fraction * 100:5.1f}%  "
              f"{done / 1e6:,.1f}/{total / 1e6:,.1f} MB{speed}", end="", file=sys.stderr, flush=True)
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            print(file=sys.stderr)
            self.drawn = False


def _size(n: int) -> str:
    """A model's size as people write it ("237 KB", "4.9 GB"), not "0 MB" for a small one."""
    from ..modelhub.sizing import human_size  # here: `wren`'s start imports no more than it needs

    return human_size(n)


def _describe(info) -> str:
    quant = f", {info.quantization}" if info.quantization else ""
    return f"{info.name} ({info.architecture}{quant}, {_size(info.size_bytes)})"


def _cmd_models_import(args) -> int:
    from pathlib import Path

    path = Path(args.path).expanduser()
    registry = _registry()
    if path.is_dir():
        info = registry.register_folder(path, args.name)
    else:
        bar = _ProgressBar("Importing")
        try:
            info = registry.import_gguf(path, args.name, progress=bar)
        finally:
            bar.finish()
    print(f"Installed {_describe(info)}")
    return 0


def _cmd_models_pull(args) -> int:
    import threading

    from ..errors import Cancelled
    from ..modelhub import pull
    from .voice import is_voice_model, pull_voice_model

    if is_voice_model(args.spec):
        return pull_voice_model(args.spec, _ProgressBar("Downloading"))
    plan = pull.resolve(args.spec, quant=args.quant)
    what = f"{plan.repo}:{plan.filename}" if plan.filename else f"{plan.repo} ({len(plan.files)} files)"
    print(f"Pulling {what}, {plan.size / 1e6:,.1f} MB", file=sys.stderr)
    cancel = threading.Event()

    def stop(signum, frame) -> None:
        if cancel.is_set():  # a second Ctrl+C does not wait for the next chunk
            raise KeyboardInterrupt
        cancel.set()

    bar = _ProgressBar("Downloading")
    in_main = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = signal.signal(signal.SIGINT, stop) if in_main else None
    try:
        info = pull.pull(_registry(), plan, name=args.name, progress=bar, cancel=cancel)
    except Cancelled as exc:
        bar.finish()
        print(f"wren: {exc}", file=sys.stderr)
        return 130
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        bar.finish()
    print(f"Installed {_describe(info)}")
    return 0


def _cmd_models_rm(args) -> int:
    from ..engine_sockets import release_model
    from ..errors import InvalidRequest, ModelNotFound
    from ..modelhub.registry import ModelRegistry

    registry = ModelRegistry(before_remove=release_model)  # a resident engine lets go of it first
    try:
        info = registry.get(args.name)
    except ModelNotFound:
        note = asyncio.run(_remote_model_note(args.name)) if "/" in args.name else None
        if note is not None:
            raise InvalidRequest(note) from None
        raise
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidRequest(f"removing {args.name} needs --yes when wren is not run from a terminal")
        kept = "; its folder stays where it is" if info.source == "folder" else ""
        answer = input(f"Remove {_describe(info)}{kept}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print(f"Kept {args.name}", file=sys.stderr)
            return 1
    registry.remove(args.name)
    print(f"Removed {args.name}")
    return 0


async def _remote_model_note(name: str) -> str | None:
    engine = _open_engine()
    try:
        return await engine.models.remote_model_note(name)
    finally:
        await engine.close()


INFO_CONTEXTS = (4096, 32768)


def _cmd_models_info(args) -> int:
    from ..modelhub.sizing import active_parameters, estimate_ram, read_config

    info = _registry().get(args.name)
    ram = {context: estimate_ram(info.path, context) for context in INFO_CONTEXTS}
    active = active_parameters(read_config(info.path), info.parameters)  # None: a dense model
    plan = _gpu_plan(info.path, args)
    if args.json:
        print(json.dumps({
            "name": info.name, "architecture": info.architecture, "parameters": info.parameters,
            "active_parameters": info.parameters if active is None else active,
            "quantization": info.quantization, "context_length": info.context_length,
            "size_bytes": info.size_bytes, "source": str(info.source), "path": str(info.path),
            "ram_bytes": {str(context): n for context, n in ram.items()},
            "gpu_plan": None if plan is None else plan.as_dict(),
        }))
        return 0
    rows = [
        ("name", info.name), ("architecture", info.architecture),
        ("parameters", _count(info.parameters) + ("" if active is None else f", {_count(active)} active per token")),
        ("quantization", info.quantization or "-"), ("context", f"{info.context_length} tokens"),
        ("on disk", _size(info.size_bytes)), ("source", f"{info.source} ({info.path})"),
    ]
    for context, n in ram.items():
        beyond = f" (beyond its {info.context_length}-token limit)" if context > info.context_length else ""
        rows.append((f"RAM at {context // 1024}k", f"about {n / 1e9:.2f} GB{beyond}"))
    rows.append(("GPU", "none found (--gpu-memory plans for one)" if plan is None else
                 f"{plan.gpu_layers} of {plan.layers} layers, {plan.kv_context} tokens of context ({plan.device}): "
                 f"{plan.reason}"))
    for key, value in rows:
        print(f"{key:14} {value}")
    return 0


def _count(parameters: int) -> str:
    return f"{parameters / 1e9:.2f} B" if parameters >= 1e9 else f"{parameters / 1e6:.1f} M"


def _gpu_plan(model_dir, args):
    """How the model sits on this computer's GPU, or on one of --gpu-memory (None: neither)."""
    from ..inference.placement import DEFAULT_SLOTS, gpu_budget, gpu_layers_from_env, parse_bytes, plan_for_folder

    try:
        figure = None if args.gpu_memory is None else parse_bytes(args.gpu_memory)
    except ValueError as exc:
        raise InvalidRequest(f"--gpu-memory: {exc}") from None
    budget = gpu_budget(figure, load_torch=True)
    if budget is None:
        return None
    return plan_for_folder(model_dir, budget[1], budget[0], context=args.context, slots=DEFAULT_SLOTS,
                           gpu_layers=args.gpu_layers if args.gpu_layers is not None else gpu_layers_from_env())


async def _cmd_models(args) -> int:
    from ..inference.select import resolve_backend

    engine = _open_engine()
    try:
        models = await engine.models.list()
        local = resolve_backend("auto").name

        def backend(m) -> str:  # a provider's model runs on its server, not on this machine's backend
            return f"remote ({m.base_url})" if getattr(m, "remote", False) else local

        if args.json:
            for m in models:
                print(json.dumps({"name": m.name, "architecture": m.architecture, "size_bytes": m.size_bytes,
                                  "context_length": m.context_length, "source": m.source,
                                  "quantization": m.quantization, "backend": "remote" if getattr(m, "remote", False)
                                  else local, "path": str(m.path) if m.path is not None else None,
                                  "problem": getattr(m, "problem", None)}))
        else:
            for m in models:
                print(f"{m.name:32} {m.architecture:8} {_size(m.size_bytes):>9}  ctx {m.context_length:<6} {m.source:8} {backend(m)}")
                if getattr(m, "problem", None):  # a file it needs is gone: said, with what to do
                    print(f"{'':32} cannot load: {shown(m.problem)}; `wren models rm {m.name}` takes it off the list")
        return 0
    finally:
        await engine.close()


async def _cmd_conversations(args) -> int:
    engine = _open_engine()
    try:
        if args.action == "list":
            convs = await engine.conversations.list()
            for c in convs:
                if args.json:  # JSON escapes control characters itself
                    print(json.dumps({"id": c.id, "title": c.title, "updated_at": c.updated_at.isoformat(),
                                      "terminal": c.settings.get(ORIGIN_KEY) == TERMINAL_ORIGIN}))
                else:
                    print(f"{c.id:6}  {c.updated_at:%Y-%m-%d %H:%M}  {shown(c.title) or '(untitled)'}")
            return 0
        if args.id is None:
            raise WrenError(f"`wren conversations {args.action}` needs a conversation id")
        fmt = "json" if args.action == "export" and args.format == "json" else "markdown"
        sys.stdout.write(shown(await engine.conversations.export(args.id, fmt)))
        return 0
    finally:
        await engine.close()


class _Notices(logging.Handler):
    """The engine's notices for the user now (a database found damaged when opened: what is
    listed may be incomplete) on standard error, before the command's output."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "wren_notice", False):
            print(f"wren: warning: {record.getMessage()}", file=sys.stderr)


def _show_notices() -> None:
    logger = logging.getLogger("wren.engine.store")
    if not any(isinstance(h, _Notices) for h in logger.handlers):
        logger.addHandler(_Notices(logging.WARNING))


_MAX_ID = 2**63 - 1  # SQLite's integers, and so every id Wren gives out, are 64-bit


def _check_ids(args: argparse.Namespace) -> None:
    """An id argument too large for any row is "not a valid id" before anything opens."""
    for name, value in vars(args).items():
        if (name == "id" or name.endswith("_id")) and isinstance(value, int) and not -_MAX_ID <= value <= _MAX_ID:
            what = name.replace("_", " ")
            raise InvalidRequest(f"{value} is not a valid {what}: Wren's ids are whole numbers up to {_MAX_ID}")


def main(argv: Sequence[str] | None = None, *, held: bool = False) -> int:
    """`held`: launch.main blocked Ctrl+C's signal before the imports; `wren chat` keeps it
    blocked (its router takes it), every other command gets it back here."""
    as_program = argv is None  # run as `wren`; a test calling main(argv) keeps its own hooks
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(extensions=not _is_builtin(argv)).parse_args(argv)  # --help, --version: exit here
    if held and getattr(args, "func", None) is not _cmd_chat:
        sigint.release()
    try:
        if as_program:  # after the arguments, so --help and a usage error write nothing to the data folder
            from ..crashreport import install_crash_hooks

            install_crash_hooks("wren")  # threads and fatal errors; the main thread's below
        from ..logs import setup_logging

        setup_logging()
        _show_notices()
        _check_ids(args)
        result = args.func(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return int(result or 0)
    except WrenError as exc:
        print(f"wren: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`wren conversations list | head -1`): what it wanted it
        # has. Whatever is still buffered goes nowhere, quietly.
        _discard_stdout()
        return 0
    except Exception as exc:  # a bug: the traceback as usual, and a local, redacted report
        if sigint.caused_by_ctrl_c(exc):  # Ctrl+C in the middle of an import: stopped, not a bug
            return _INTERRUPTED
        known = _known_failure(exc)
        if known is not None:  # the machine around Wren, not a bug: no traceback, no report
            print(f"wren: {known}", file=sys.stderr)
            return 2
        return _crashed(exc, args.command)


# A file or folder Wren may not use: the machine's settings, not a bug in Wren.
_REFUSED = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
            errno.EROFS: "read-only file system", errno.ENOSPC: "no space left on the disk",
            errno.EDQUOT: "disk quota exceeded"}


def _known_failure(exc: Exception) -> str | None:
    """The sentence for a failure outside Wren (a locked keyring, a read-only or full disk, a
    damaged database), or None for a bug."""
    from ..network.lock import locked_in

    if (locked := locked_in(exc)) is not None:  # the offline lock, in its own words, however it was wrapped
        return str(locked)
    keyring_errors = sys.modules.get("keyring.errors")
    if keyring_errors is not None and isinstance(exc, keyring_errors.KeyringError):
        from ..providers.keys import explain_keyring_error

        return explain_keyring_error(exc)
    if isinstance(exc, OSError) and exc.errno in _REFUSED:
        where = f"{exc.filename}: " if exc.filename else ""
        advice = ("free some space and try again" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                  else "check that you own it and may write there (for Wren's data folder, set WREN_HOME "
                       "to a writable folder)")
        return f"cannot use {where}{_REFUSED[exc.errno]}; {advice}"
    from ..store.health import is_database_error

    if is_database_error(exc):  # one a Store did not turn into a StoreError: is the file damaged?
        from .. import paths
        from ..store.health import check_file, damaged_message

        try:
            path = paths.database_path()
        except OSError:  # no data folder to look in: then it is reported as the bug it may be
            return None
        problems = check_file(path)
        if problems:
            return damaged_message(path, problems)
    return None


def _crashed(exc: Exception, command: str) -> int:
    import traceback

    from ..crashreport import write_crash_report

    traceback.print_exception(exc)
    path = write_crash_report(exc, program="wren", where=f"wren {command}")
    if path is not None:
        print(f"wren: an unexpected error; a crash report was saved at {path} "
              "(it stays on this computer; it holds no prompts or answers)", file=sys.stderr)
    return 1


def _is_builtin(argv: list[str]) -> bool:
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    return command in _BUILTIN


def _discard_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (captured by a test)
        pass


if __name__ == "__main__":
    sys.exit(main())
