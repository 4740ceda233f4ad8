"""`wren memories …` and `wren context …`: memory and context reports from the terminal.

main.py adds these with `register(subparsers)`; each handler is `(args) -> int` and
opens the user's database itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from .. import paths
from ..context.report import ContextReport, PartKind, PartState, report_from_meta
from ..errors import InvalidRequest, NotFound
from ..memory.records import MemoryInfo
from ..memory.service import MemoryService
from ..records import Role
from ..store import Store


def register(subparsers: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON")

    mem = subparsers.add_parser("memories", help="list, search, add, edit or forget memories")
    actions = mem.add_subparsers(dest="action", required=True)
    p = actions.add_parser("list", parents=[common], help="every memory, newest first")
    p.set_defaults(func=_list)
    p = actions.add_parser("search", parents=[common], help="memories matching words")
    p.add_argument("query")
    p.set_defaults(func=_search)
    p = actions.add_parser("add", parents=[common], help="save a memory")
    p.add_argument("text")
    p.set_defaults(func=_add)
    p = actions.add_parser("edit", parents=[common], help="change a memory's text")
    p.add_argument("id", type=int)
    p.add_argument("text")
    p.set_defaults(func=_edit)
    p = actions.add_parser("forget", parents=[common], help="delete one memory")
    p.add_argument("id", type=int)
    p.set_defaults(func=_forget)
    p = actions.add_parser("clear", parents=[common], help="delete every memory (needs --yes)")
    p.add_argument("--yes", action="store_true", help="really delete them all")
    p.set_defaults(func=_clear)
    p = actions.add_parser("settings", parents=[common], help="show or change memory settings")
    for flag in ("memory", "reference-history", "suggest"):
        p.add_argument(f"--{flag}", choices=("on", "off"))
    p.set_defaults(func=_settings)

    ctx = subparsers.add_parser("context", parents=[common],
                                help="what the model saw for a conversation's last answer")
    ctx.add_argument("conversation_id", type=int)
    ctx.set_defaults(func=_context)


def _with_memory(fn: Callable[[MemoryService, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        store = Store(paths.database_path())
        try:
            return fn(MemoryService(store), args)
        finally:
            store.close()

    handler.__name__ = fn.__name__
    return handler


def _print_memories(memories: list[MemoryInfo], as_json: bool) -> None:
    for m in memories:
        if as_json:
            print(json.dumps(m.to_dict(), ensure_ascii=False))
        else:
            print(f"{m.id:6}  {m.updated_at:%Y-%m-%d}  {m.text}")


@_with_memory
def _list(service: MemoryService, args) -> int:
    _print_memories(service.list(), args.json)
    return 0


@_with_memory
def _search(service: MemoryService, args) -> int:
    if not args.query.strip():
        raise InvalidRequest("the search is empty: give some words to look for")
    found = service.search(args.query)
    _print_memories(found, args.json)
    if not found and not args.json:  # an empty output read as "did it run?"
        print(f"no memory matches {args.query.strip()!r}", file=sys.stderr)
    return 0


@_with_memory
def _add(service: MemoryService, args) -> int:
    _print_memories([service.add(args.text)], args.json)
    return 0


@_with_memory
def _edit(service: MemoryService, args) -> int:
    _print_memories([service.edit(args.id, args.text)], args.json)
    return 0


@_with_memory
def _forget(service: MemoryService, args) -> int:
    gone = service.delete(args.id)
    if args.json:
        print(json.dumps({"forgotten": gone.to_dict()}, ensure_ascii=False))
    else:
        print(f"forgot {gone.id}: {gone.text}")
    return 0


@_with_memory
def _clear(service: MemoryService, args) -> int:
    if not args.yes:
        raise InvalidRequest(
            f"this would delete {_memories(service.count())}; run "
            "`wren memories clear --yes` to do it"
        )
    count = service.clear()
    print(json.dumps({"cleared": count}) if args.json else f"forgot {_memories(count)}")
    return 0


def _memories(count: int) -> str:
    return "the one memory" if count == 1 else "no memories" if count == 0 else f"all {count} memories"


@_with_memory
def _settings(service: MemoryService, args) -> int:
    changes = {
        key: getattr(args, attr) == "on"
        for key, attr in (("enabled", "memory"), ("reference_history", "reference_history"), ("suggest", "suggest"))
        if getattr(args, attr) is not None
    }
    current = service.update_settings(**changes) if changes else service.settings()
    if args.json:
        print(json.dumps(current.to_dict()))
    else:
        for key, value in current.to_dict().items():
            print(f"{key:18} {'on' if value is True else 'off' if value is False else value}")
    return 0


def _context(args) -> int:
    store = Store(paths.database_path())
    try:
        messages = store.messages(args.conversation_id)
        answer = next((m for m in reversed(messages) if m.role is Role.ASSISTANT and report_from_meta(m.meta)), None)
        if answer is None:
            raise NotFound(f"conversation {args.conversation_id} has no answer with a context report yet")
        report = report_from_meta(answer.meta)
        assert report is not None  # the answer was picked for having one
        still_there = set(MemoryService(store).get_many(report.memory_ids))
    finally:
        store.close()
    if args.json:
        data = report.to_dict()
        data["message_id"] = answer.id
        data["forgotten_memory_ids"] = [i for i in report.memory_ids if i not in still_there]
        print(json.dumps(data, ensure_ascii=False))
    else:
        sys.stdout.write(format_report(report, answer.id, still_there))
    return 0


def format_report(report: ContextReport, message_id: int | None = None,
                  existing_memory_ids: set[int] | None = None) -> str:
    """The report as text: one line per part, then the rendered prompt."""
    exact = "exact" if report.exact else "estimated"
    lines = [
        f"answer {message_id}: prompt {report.prompt_tokens:,} of {report.budget:,} tokens ({exact}; "
        f"window {report.window:,}, {report.reserve:,} kept for the answer)"
    ]
    if report.summarize_calls:
        lines.append(f"summarized with {report.summarize_calls} model call(s)")
    for p in report.parts:
        label = p.kind.value + (f" ({p.role})" if p.role else "")
        ids = ""
        if p.kind is PartKind.HISTORY and len(p.source_ids) == 2:
            ids = f"#{p.source_ids[0]}–#{p.source_ids[1]} ({p.items} messages)"
        elif p.source_ids:
            ids = " ".join(f"#{i}" for i in p.source_ids)
        detail = p.text if p.kind in (PartKind.MEMORY, PartKind.PAST_CHAT, PartKind.ATTACHMENT) else ""
        if p.kind is PartKind.DOCUMENT:  # "[n] file (where)": the passage is in the prompt below
            detail = p.text.split("\n", 1)[0]
        if (p.kind is PartKind.MEMORY and existing_memory_ids is not None
                and p.state is PartState.INCLUDED and p.source_ids[0] not in existing_memory_ids):
            detail += " [forgotten since]"
        note = f" — {p.note}" if p.note else ""
        lines.append(f"  {p.state.value:10} {label:22} {p.tokens:7,} tok  {ids} {detail}{note}".rstrip())
    lines += ["", "--- rendered prompt ---", report.rendered_prompt, ""]
    return "\n".join(lines)
