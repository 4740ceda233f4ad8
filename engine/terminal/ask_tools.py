"""`wren ask`'s tool options: --tools, --tool-choice and --approve, and what the terminal
shows and asks while an answer calls tools (engine/cli.py calls these three functions)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, TextIO

from ..errors import InvalidRequest
from ..events import Event, ToolApprovalNeeded, ToolCall, ToolResult
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
    fields: dict = {}
    # An MCP server's tools are in the registry once it has listed them: start the servers
    # the command names (every enabled one for `--tools all`) before checking the names.
    value = (args.tools or "").strip()
    choice = (args.tool_choice or "auto").strip()
    wanted = [n.strip() for n in value.split(",") if n.strip() and value not in ("all", "none")]
    if choice not in ("auto", "none"):
        wanted.append(choice)
    if value == "all":
        await engine.prepare_tool_sources()
    elif wanted:
        await engine.prepare_tool_sources(wanted)
    known = [t.name for t in await engine.tools()]
    if args.tools is not None:
        value = args.tools.strip()
        if value == "all":
            names = [t.name for t in await engine.tools() if t.enabled]
        elif value in ("none", ""):
            names = []
        else:
            names = [n.strip() for n in value.split(",") if n.strip()]
            unknown = [n for n in names if n not in known]
            if unknown:
                raise InvalidRequest(f"--tools names {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'} "
                                     f"not a tool; the tools are: {', '.join(known)}")
        fields["tools"] = tuple(names)
    choice = (args.tool_choice or "auto").strip()
    if choice not in ("auto", "none") and choice not in known:
        raise InvalidRequest(f"--tool-choice {choice} is not auto, none or a tool; the tools are: {', '.join(known)}")
    fields["tool_choice"] = choice
    return fields


async def on_event(engine: Any, event: Event, args: argparse.Namespace, err: TextIO | None = None) -> None:
    """Show a call and its result on standard error (not with --json: those are JSON lines),
    and answer an approval: --approve allows once; else the terminal asks; with no terminal
    to ask on, the call is declined. A tool's result (an MCP server's text) and the model's
    arguments are untrusted: on a terminal they lose their control characters and escape
    sequences, as the answer does (engine/cli_terminal.py)."""
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
        engine.approve_tool(event.id, decision)


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
