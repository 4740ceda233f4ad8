"""`wren scan`: check a text against the safety policy without sending it anywhere.

Prints one finding per line (category, action, span, rule, masked preview), or one JSON
object per line with --json. Exit status: 0 when the text would go through (allowed,
warned or redacted), 1 when something in it would be blocked, 2 for a usage error.
Policy warnings (a broken user policy file) go to standard error.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..events import SafetyAction
from ..safety.policy import DESTINATIONS, Policy
from ..safety.scanner import scan

EXIT_OK = 0
EXIT_BLOCKED = 1


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "scan",
        help="check text for secrets, personal data and policy categories",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--destination",
        choices=DESTINATIONS,
        default="local",
        help="where the text would go: the local model or a remote server (default: local)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per finding")
    parser.add_argument("text", metavar="TEXT", help="the text to scan, or - for standard input")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    policy, warnings = Policy.load()
    for warning in warnings:
        print(f"wren scan: {warning}", file=sys.stderr)
    result = scan(text, policy, args.destination)
    for f in result.findings:
        if args.json:
            record = {
                "category": f.category,
                "action": f.action.value,
                "span": list(f.span),
                "rule": f.rule,
                "preview": f.preview,
                "allowed_by": f.allowed_by,
            }
            print(json.dumps(record, ensure_ascii=False))
        else:
            reason = f.rule if f.allowed_by is None else f"{f.rule} (allow: {f.allowed_by})"
            print(f"{f.category}\t{f.action.value}\t{f.span[0]}-{f.span[1]}\t{reason}\t{f.preview}")
    return EXIT_BLOCKED if result.action is SafetyAction.BLOCK else EXIT_OK
