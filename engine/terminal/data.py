"""`wren data export PATH` and `wren data erase --yes [--models]`: all the user's data at once."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import InvalidRequest


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="export or erase all your data")
    actions = data.add_subparsers(dest="action", required=True)
    p = actions.add_parser("export", help="conversations (JSON and Markdown), memories and settings "
                                          "in one zip readable by you alone; no models, no keys")
    p.add_argument("path", help="the .zip file to write, or a folder to put one in")
    p.set_defaults(func=_export)
    p = actions.add_parser("erase", help="delete conversations, memories, settings, logs and caches "
                                         "(needs --yes); models are kept unless --models")
    p.add_argument("--yes", action="store_true", help="really delete everything")
    p.add_argument("--models", action="store_true", help="delete the installed models too")
    p.add_argument("--json", action="store_true", help="print what was deleted as JSON")
    p.set_defaults(func=_erase)


def _engine():
    from ..api import Engine

    return Engine.open()


async def _export(args: argparse.Namespace) -> int:
    engine = _engine()
    try:
        path = await engine.privacy.export_all(args.path)
    finally:
        await engine.close()
    print(path)
    return 0


async def _erase(args: argparse.Namespace) -> int:
    if not args.yes:
        raise InvalidRequest("`wren data erase` deletes all your conversations, memories, settings, "
                             "logs and caches and cannot be undone; run it again with --yes")
    from .. import paths
    from ..errors import DatabaseDamaged
    from ..store.health import check_file
    from .resident import stop_for_erase

    await stop_for_erase()  # no engine keeps the data open or its answers going while it is deleted
    try:
        engine = _engine()
    except DatabaseDamaged as exc:  # not even readable: nothing to count, only files to delete
        return _erase_damaged(args, exc.problems)
    except Exception:
        problems = check_file(paths.database_path())  # any other failure: is it the damage?
        if not problems:
            raise
        return _erase_damaged(args, problems)
    damage = engine.store.damage
    try:
        report = None if damage else await engine.privacy.erase_all(keep_models=not args.models)
    except DatabaseDamaged as exc:  # found while erasing
        damage = exc.problems
    finally:
        await engine.close()
    if report is None:
        return _erase_damaged(args, damage)
    if args.json:
        print(json.dumps({"rows": report.rows, "removed": report.removed, "models_kept": report.models_kept}))
    else:
        rows = report.rows
        print(f"Erased {rows.get('conversation', 0)} conversation(s), {rows.get('message', 0)} message(s), "
              f"{rows.get('memory', 0)} memory(ies) and {rows.get('setting', 0)} setting(s); "
              f"logs and caches emptied; models {'kept' if report.models_kept else 'deleted'}.",
              file=sys.stdout)
    return 0


def _erase_damaged(args: argparse.Namespace, problems: tuple[str, ...]) -> int:
    """Erase over a damaged database: its files are deleted unread (erase must not need to
    read what it deletes), then logs, caches and (with --models) models as usual."""
    from .. import paths
    from ..privacy import erase_files
    from ..store.health import remove_database_files

    why = "; ".join(problems[:3]) or "unreadable"
    removed = remove_database_files(paths.database_path())
    removed += erase_files(models=args.models)
    if args.json:
        print(json.dumps({"rows": {}, "removed": removed, "models_kept": not args.models, "damaged": why}))
    else:
        print(f"The database was damaged ({why}), so its files were deleted without reading them: every "
              f"conversation, memory and setting is gone, uncounted; logs and caches emptied; models "
              f"{'deleted' if args.models else 'kept'}.")
    return 0
