"""`wren privacy ledger [--json]`, `wren privacy offline on|off|status` and `wren privacy
report PATH`: what Wren connected to, and the offline lock (engine/network)."""

from __future__ import annotations

import argparse

from ..network import ledger, lock, report


def register(subparsers: argparse._SubParsersAction) -> None:
    privacy = subparsers.add_parser("privacy", help="what Wren connected to (the network ledger) and the offline lock")
    actions = privacy.add_subparsers(dest="action", required=True)
    p = actions.add_parser("ledger", help="every connection Wren's processes opened or were refused, oldest first")
    p.add_argument("--json", action="store_true", help="the whole privacy report as JSON")
    p.add_argument("--last", type=int, metavar="N", help="only the last N entries")
    p.set_defaults(func=_ledger)
    p = actions.add_parser("offline", help="the offline lock: refuse every connection that is not this machine's "
                                           "loopback (also WREN_OFFLINE=1)")
    p.add_argument("state", choices=("on", "off", "status"), help="turn it on or off, or say whether it is on")
    p.set_defaults(func=_offline)
    p = actions.add_parser("report", help="write the privacy report: JSON for a path ending in .json, else text")
    p.add_argument("path", help="the file to write (written whole or not at all)")
    p.set_defaults(func=_report)


def _ledger(args: argparse.Namespace) -> int:
    built = report.build()
    if args.last is not None:
        built["entries"] = built["entries"][-args.last:] if args.last > 0 else []
    print(report.as_json(built) if args.json else report.as_text(built), end="")
    return 0


def _offline(args: argparse.Namespace) -> int:
    state = lock.state() if args.state == "status" else lock.set_offline(args.state == "on")
    print(f"offline lock: {state.describe()}")
    if state.on:
        print(f"child processes: {report.children_note()}")
    return 0


def _report(args: argparse.Namespace) -> int:
    path = report.export(args.path)
    print(f"{path} ({len(ledger.entries())} entries)")
    return 0
