"""Every `wren …` command that a subcommand's help mentions exists: `wren continue --help`
sent users to a `wren show` there never was."""

from __future__ import annotations

import argparse
import re

from wren.engine.terminal.main import build_parser

MENTION = re.compile(r"`wren ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _texts(parser: argparse.ArgumentParser):
    yield parser.description or ""
    yield parser.epilog or ""
    for action in parser._actions:
        yield action.help if isinstance(action.help, str) else ""
    for child in _subparsers(parser).values():
        yield from _texts(child)


def test_every_wren_command_a_help_text_mentions_exists():
    root = build_parser(extensions=True)
    commands = _subparsers(root)
    assert "continue" in commands and "conversations" in commands
    wrong = []
    for text in _texts(root):
        for first, second in MENTION.findall(text):
            if first not in commands:
                wrong.append(f"`wren {first}` in {text!r}")
                continue
            actions = _subparsers(commands[first])
            if second and actions and second not in actions:
                wrong.append(f"`wren {first} {second}` in {text!r}")
    assert wrong == []
