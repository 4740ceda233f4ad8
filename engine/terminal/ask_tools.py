"""`wren ask`'s tool options: --tools, --tool-choice and --approve, and what the terminal
shows and asks while an answer calls tools (main.py and ask.py call these three functions;
the checking of the names is ask_request.tool_fields)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, TextIO

from ..events import Event, ToolApprovalNeeded, ToolCall, ToolResult
from .ask_request import tool_fields
from .output import clean, shown

SHOWN_CHARS = 300  # of a result, on the terminal (the model sees its whole budget)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tools", metavar="NAME,NAME|all|none",
                   help="the tools the model may call (default: the chat's, else none); `wren tools list` names them")
    p.add_argument("--tool-choice", default="auto", metavar="auto|none|NAME",
                   help="auto: the model decides; none: no calls; NAME: the answer starts with a call of that tool")
    p.add_argument("--approve", action="store_true",
                   help="run calls that need approval without asking (else the terminal asks: once, always or no)")


async def send_options(engine: Any, args: argparse.Namespace) -> dict:
    """SendOptions fields from the command line (a bad name fails before anything runs)."""
    return await tool_fields(engine, args.tools, args.tool_choice)


async def on_event(engine: Any, event: Event, args: argparse.Namespace, err: TextIO | None = None) -> None:
    """Show a call and its result on standard error (not with --json: those are JSON lines),
    and answer an approval: --approve allows once; else the terminal asks; with no terminal
    to ask on, the call is declined. A tool's result (an MCP server's text) and the model's
    arguments are untrusted: on a terminal they lose their control characters and escape
    sequences, as the answer does (output.py)."""
    err = err or sys.stderr
    if isinstance(event, ToolCall) and not args.json:
        line = f"[tool] {event.name} {json.dumps(event.arguments, ensure_ascii=False)}"
        print(shown(line, err), file=err, flush=True)
    elif isinstance(event, ToolResult) and not args.json:
        text = event.content if len(event.content) <= SHOWN_CHARS else event.content[:SHOWN_CHARS] + " …"
        mark = "error" if event.is_error else "result"
        line = f"[{mark}] {' '.join(text.split())} ({event.duration:.2f} s)"
        print(shown(line, err), file=err, flush=True)
    elif isinstance(event, ToolApprovalNeeded):
        if args.approve:
            decision = "once"
        else:
            decision = await asyncio.get_running_loop().run_in_executor(None, _ask_terminal, event)
        engine.tools.approve(event.id, decision)


TTY = "/dev/tty"  # where approvals are asked (tests point it at a pseudo-terminal)


def _ask_terminal(event: ToolApprovalNeeded) -> str:
    # Standard input may be the question itself, so the terminal is opened by name: once to
    # read, once to write (a terminal cannot be opened "r+" in text mode: it is not seekable,
    # which Python reports as an OSError, and every approval was declined as "no terminal").
    try:
        tty_in = open(TTY, encoding="utf-8")
    except OSError:
        print(f"wren: {event.name} needs approval and there is no terminal to ask on; declined "
              "(pass --approve to allow calls)", file=sys.stderr)
        return "deny"
    try:
        tty_out = open(TTY, "w", encoding="utf-8")
    except OSError:
        tty_in.close()
        print(f"wren: {event.name} needs approval and the terminal cannot be written to; declined "
              "(pass --approve to allow calls)", file=sys.stderr)
        return "deny"
    with tty_in, tty_out:
        return _ask(event, tty_in, tty_out)


def _ask(event: ToolApprovalNeeded, tty_in: TextIO, tty: TextIO) -> str:
    arguments = json.dumps(event.arguments, ensure_ascii=False, indent=2)
    tty.write(clean(f"\nThe model wants to run {event.name} with:\n{arguments}\n"))  # always a terminal
    while True:
        tty.write("Allow? [o]nce, [a]lways for this tool, [n]o: ")
        tty.flush()
        line = tty_in.readline()
        if not line:
            return "deny"
        answer = line.strip().lower()
        if answer in ("o", "once", "y", "yes"):
            return "once"
        if answer in ("a", "always"):
            return "always"
        if answer in ("n", "no", "d", "deny", ""):
            return "deny"
