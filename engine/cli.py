"""`wren`: the terminal front end (chat, ask, models, conversations, scan)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Sequence

from engine.errors import WrenError
from engine.events import Delta, Failed, Finished, FinishReason, event_to_dict
from engine.inference.sampling import SamplingParams
from engine.inference.select import BACKEND_NAMES


def _sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=BACKEND_NAMES, help="inference backend (default: setting, else auto)")
    p.add_argument("--model", help="installed model name (see `wren models`)")
    p.add_argument("--seed", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--max-tokens", type=int)


def _params(args, base: SamplingParams) -> SamplingParams:
    changes = {
        k: v
        for k, v in (
            ("seed", args.seed), ("temperature", args.temperature), ("top_p", args.top_p),
            ("top_k", args.top_k), ("max_tokens", args.max_tokens),
        )
        if v is not None
    }
    return base.with_(**changes)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wren", description="Wren, a private local AI assistant.")
    sub = parser.add_subparsers(dest="command", required=True)

    chat = sub.add_parser("chat", help="chat in the terminal (Ctrl+C stops an answer)")
    _sampling_args(chat)
    chat.set_defaults(func=_cmd_chat)

    ask = sub.add_parser("ask", help="ask one question and stream the answer")
    _sampling_args(ask)
    ask.add_argument("--json", action="store_true", help="one JSON object per event, each with a `type`")
    ask.add_argument("text", help="the question, or - to read it from standard input")
    ask.set_defaults(func=_cmd_ask)

    models = sub.add_parser("models", help="list installed models")
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=_cmd_models)

    convs = sub.add_parser("conversations", help="list, show or export conversations")
    convs.add_argument("action", nargs="?", choices=("list", "show", "export"), default="list")
    convs.add_argument("id", nargs="?", type=int)
    convs.add_argument("--format", choices=("markdown", "json"), default="markdown")
    convs.add_argument("--json", action="store_true", help="list as JSON")
    convs.set_defaults(func=_cmd_conversations)

    for register in _extensions():
        register(sub)
    return parser


def _extensions():
    """Subcommands that live beside the parts they belong to."""
    from engine.memory.cli import register as memory
    from engine.safety.cli import register as safety

    return [safety, memory]


def _open_engine():
    from engine.api import Engine

    return Engine.open()


async def _load(engine, args) -> None:
    if args.model or args.backend:
        await engine.load_model(args.model, backend=args.backend)
    else:
        await engine.load_model()


async def _cmd_ask(args) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    engine = _open_engine()
    try:
        await _load(engine, args)
        from engine.api import SendOptions

        params = _params(args, await engine.default_sampling())
        conv = await engine.create_conversation(" ".join(text.split())[:60])
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, engine.stop)
        code = 0
        async for event in engine.send(conv.id, text, SendOptions(sampling=params)):
            if args.json:
                print(json.dumps(event_to_dict(event), ensure_ascii=False), flush=True)
            elif isinstance(event, Delta):
                print(event.text, end="", flush=True)
            elif isinstance(event, Failed):
                print(f"\nwren: {event.error}", file=sys.stderr)
                code = 1
            elif isinstance(event, Finished) and not args.json:
                print()
        return code
    finally:
        await engine.close()


async def _cmd_chat(args) -> int:
    engine = _open_engine()
    loop = asyncio.get_running_loop()
    try:
        print("Loading the model…", file=sys.stderr)
        status = await _load_and_report(engine, args)
        params = _params(args, await engine.default_sampling())
        from engine.api import SendOptions

        conv = await engine.create_conversation()
        print("Type a message. /new starts a new chat, /model [NAME] shows or switches the model, "
              "Ctrl+C stops an answer, Ctrl+D quits.", file=sys.stderr)
        while True:
            try:
                line = await loop.run_in_executor(None, input, "you> ")
            except (EOFError, KeyboardInterrupt):
                print()
                return 0
            line = line.strip()
            if not line:
                continue
            if line == "/new":
                conv = await engine.create_conversation()
                print("(new chat)", file=sys.stderr)
                continue
            if line.startswith("/model"):
                name = line[len("/model"):].strip()
                if name:
                    try:
                        status = await engine.load_model(name, backend=args.backend)
                    except WrenError as exc:
                        print(f"wren: {exc}", file=sys.stderr)
                        continue
                print(f"(model {status.name} on {status.backend})", file=sys.stderr)
                continue
            if not conv.title:
                conv = await engine.rename_conversation(conv.id, " ".join(line.split())[:60])
            loop.add_signal_handler(signal.SIGINT, engine.stop)
            try:
                async for event in engine.send(conv.id, line, SendOptions(sampling=params)):
                    if isinstance(event, Delta):
                        print(event.text, end="", flush=True)
                    elif isinstance(event, Failed):
                        print(f"\nwren: {event.error}", file=sys.stderr)
                    elif isinstance(event, Finished):
                        note = " [stopped]" if event.reason is FinishReason.CANCELLED else ""
                        print(note)
            except WrenError as exc:
                print(f"wren: {exc}", file=sys.stderr)
            finally:
                loop.remove_signal_handler(signal.SIGINT)
    finally:
        await engine.close()


async def _load_and_report(engine, args):
    status = await _load(engine, args) or engine.current_model
    print(f"(model {status.name} on {status.backend}, loaded in {status.load_seconds:.1f} s)", file=sys.stderr)
    return status


async def _cmd_models(args) -> int:
    from engine.inference.select import resolve_backend

    engine = _open_engine()
    try:
        models = await engine.list_models()
        backend = resolve_backend("auto").name
        if args.json:
            for m in models:
                print(json.dumps({"name": m.name, "architecture": m.architecture, "size_bytes": m.size_bytes,
                                  "context_length": m.context_length, "source": m.source,
                                  "quantization": m.quantization, "backend": backend, "path": str(m.path)}))
        else:
            for m in models:
                print(f"{m.name:32} {m.architecture:8} {m.size_bytes / 1e6:8.0f} MB  ctx {m.context_length:<6} {m.source:8} {backend}")
        return 0
    finally:
        await engine.close()


async def _cmd_conversations(args) -> int:
    engine = _open_engine()
    try:
        if args.action == "list":
            convs = await engine.list_conversations()
            for c in convs:
                if args.json:
                    print(json.dumps({"id": c.id, "title": c.title, "updated_at": c.updated_at.isoformat()}))
                else:
                    print(f"{c.id:6}  {c.updated_at:%Y-%m-%d %H:%M}  {c.title or '(untitled)'}")
            return 0
        if args.id is None:
            raise WrenError(f"`wren conversations {args.action}` needs a conversation id")
        fmt = "json" if args.action == "export" and args.format == "json" else "markdown"
        sys.stdout.write(await engine.export(args.id, fmt))
        return 0
    finally:
        await engine.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from engine.logs import setup_logging

        setup_logging()
        result = args.func(args)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except WrenError as exc:
        print(f"wren: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
