"""`wren tokens TEXT [--model M] [--json]`: a text as the model's tokens.

Loads only the tokenizer (of --model, else the default model), never the model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ..errors import WrenError
from ..token_view import TokenPiece, visible


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "tokens", help="show a text as the model's tokens (boundaries, ids, spaces as ·)",
        description="Cut TEXT into the tokens of the model's tokenizer (--model, else the default "
                    "model) and show each with its id and character span; spaces show as ·, "
                    "newlines as ↵, pieces of a character's bytes as <0x..>. Loads no model. "
                    "TEXT '-' reads standard input.",
    )
    p.add_argument("text", help="the text ('-' reads standard input)")
    p.add_argument("--model", help="whose tokenizer (default: the default model)")
    p.add_argument("--json", action="store_true", help="print JSON: model, count and each token")
    p.set_defaults(func=_tokens)


def render(pieces: list[TokenPiece]) -> str:
    """The text with a boundary │ between tokens, then one line per token."""
    if not pieces:
        return "(no tokens: the text is empty)\n"
    lines = ["│".join(visible(p.text) for p in pieces), ""]
    width = max(len(str(p.id)) for p in pieces)
    for n, p in enumerate(pieces):
        lines.append(f"{n:>4}  {p.id:>{width}}  {p.start:>5}-{p.end:<5}  {visible(p.text)}")
    lines.append(f"{len(pieces)} token{'s' if len(pieces) != 1 else ''}")
    return "\n".join(lines) + "\n"


def _tokens(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    try:
        return asyncio.run(_run(text, args))
    except WrenError as exc:
        print(f"wren tokens: {exc}", file=sys.stderr)
        return 2


async def _run(text: str, args: argparse.Namespace) -> int:
    from ..api import Engine

    engine = Engine.open()
    try:
        name = args.model or await engine.models.default()
        found = await engine.models.tokens(text, args.model)
    finally:
        await engine.close()
    if args.json:
        print(json.dumps({"model": name, "count": len(found), "tokens": [p.to_dict() for p in found]},
                         ensure_ascii=False))
    else:
        sys.stdout.write(render(found))
    return 0
