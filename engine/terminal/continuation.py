"""`wren continue MESSAGE_ID [--json]`: extend an answer that ended stopped, interrupted
or at the length limit; the same message grows (engine.chat.continue_answer)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ..errors import WrenError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "continue", help="go on with an answer that was stopped, interrupted or cut at the length limit",
        description="Extend the answer MESSAGE_ID where it ended; the new text is streamed and "
                    "added to the same message. `wren ask --json` prints each answer's id; "
                    "`wren conversations export CONVERSATION_ID --format json` lists a chat's messages with theirs.",
    )
    p.add_argument("message_id", type=int, help="the id of the answer to continue")
    p.add_argument("--json", action="store_true", help="print each event as a JSON line")
    p.set_defaults(func=_continue)


def _continue(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except WrenError as exc:
        print(f"wren continue: {exc}", file=sys.stderr)
        return 2


async def _run(args: argparse.Namespace) -> int:
    from ..events import Delta, Failed, Finished, FinishReason, event_to_dict
    from .main import _open_engine

    engine = _open_engine(one_shot=True)  # one answer, then the process ends: decoded eagerly
    code = 0
    try:
        async for event in engine.chat.continue_answer(args.message_id):
            if args.json:
                print(json.dumps(event_to_dict(event), ensure_ascii=False), flush=True)
            elif isinstance(event, Delta):
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Failed):
                print(f"\nwren continue: {event.error}", file=sys.stderr)
            if isinstance(event, Finished):
                code = 1 if event.reason in (FinishReason.ERROR, FinishReason.BLOCKED) else 0
        if not args.json:
            print()
    finally:
        await engine.close()
    return code
