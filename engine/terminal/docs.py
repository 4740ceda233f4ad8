"""`wren docs …` and `wren projects …`: the document library and projects from the terminal.

main.py adds these with `register(subparsers)`; each handler opens the user's database
itself. `wren docs add` indexes in the foreground with its progress on standard error
(Ctrl+C stops it: what was indexed stays, the rest is picked up by the next pass)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

from .. import paths
from ..errors import NotFound
from ..store import Store


def register(subparsers: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON")

    docs = subparsers.add_parser("docs", help="the document library: add, list, remove, search, status")
    actions = docs.add_subparsers(dest="action", required=True)
    p = actions.add_parser("add", parents=[common], help="add files or folders and index them now")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--watch", action="store_true",
                   help="watch the folders: changes are picked up while Wren runs, and at its next start")
    p.set_defaults(func=_add)
    p = actions.add_parser("list", parents=[common], help="the files and folders in the library")
    p.set_defaults(func=_list)
    p = actions.add_parser("rm", parents=[common], help="remove a file or folder (by path or id) and its index")
    p.add_argument("target", metavar="PATH|ID")
    p.set_defaults(func=_rm)
    p = actions.add_parser("search", parents=[common], help="the passages best matching a question")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=5, help="how many passages (default 5)")
    p.add_argument("--project", help="search this project's documents only")
    p.add_argument("--expand", action="store_true",
                   help="load the model; it writes a few other phrasings of the question, searched too")
    p.set_defaults(func=lambda args: _search_expanded(args) if args.expand else _search(args))
    p = actions.add_parser("status", parents=[common], help="what is indexed, and what was skipped and why")
    p.set_defaults(func=_status)
    p = actions.add_parser("sync", parents=[common], help="index what changed in the library since the last pass")
    p.set_defaults(func=_sync)

    projects = subparsers.add_parser("projects", help="projects: chats, documents and instructions together")
    acts = projects.add_subparsers(dest="action", required=True)
    p = acts.add_parser("create", parents=[common], help="make a project")
    p.add_argument("name")
    p.add_argument("--instructions", default="", help="what the model should know in this project's chats")
    p.set_defaults(func=_project_create)
    p = acts.add_parser("list", parents=[common], help="every project")
    p.set_defaults(func=_project_list)
    p = acts.add_parser("rm", parents=[common], help="delete a project (its chats and the files stay)")
    p.add_argument("name")
    p.set_defaults(func=_project_rm)
    p = acts.add_parser("add-docs", parents=[common], help="add library files or folders to a project")
    p.add_argument("name")
    p.add_argument("targets", nargs="+", metavar="PATH|ID",
                   help="library ids, or paths (added to the library first if they are not in it)")
    p.set_defaults(func=_project_add_docs)
    p = acts.add_parser("instructions", parents=[common], help="show or set a project's instructions")
    p.add_argument("name")
    p.add_argument("text", nargs="?", help="the new instructions ('' clears them)")
    p.set_defaults(func=_project_instructions)


def _with_library(fn: Callable[[Any, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        from ..library.library import LibraryIndex
        from ..memory.embed import shared_embedder

        store = Store(paths.database_path())
        try:
            store.bind()
            return fn(LibraryIndex(store.db, lambda f: f(store.db), shared_embedder), args)
        finally:
            store.close()

    handler.__name__ = fn.__name__
    return handler


def _projects(library) -> Any:
    from ..library.projects import Projects

    return Projects(library.run_db)


def _print(rows: list[dict], as_json: bool, line: Callable[[dict], str]) -> None:
    for row in rows:
        print(json.dumps(row, ensure_ascii=False) if as_json else line(row))


def _index_with_progress(library, source_ids: list[int] | None) -> dict:
    """Index in a thread while this one shows its progress on standard error."""
    result: dict = {}

    def work() -> None:
        try:
            result["progress"] = library.sync(source_ids)
        except BaseException as exc:  # raised again on the main thread
            result["error"] = exc

    worker = threading.Thread(target=work, name="wren-docs-index", daemon=True)
    worker.start()
    tty = sys.stderr.isatty()
    try:
        while worker.is_alive():
            worker.join(0.5)
            p = library.progress
            if tty and p.total:
                print(f"\r{p.phase}: {p.done}/{p.total} files, {p.embedded} passages embedded ",
                      end="", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        library.stop()
        worker.join()
        raise
    if tty:
        print(file=sys.stderr)
    if "error" in result:
        raise result["error"]
    return result["progress"].to_dict()


@_with_library
def _add(library, args) -> int:
    added = library.add(args.paths, watch=args.watch)
    progress = _index_with_progress(library, [s["id"] for s in added])
    status = library.status()
    out = {"added": added, "progress": progress, "counts": status["counts"]}
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        for s in added:
            print(f"{s['id']:4}  {s['kind']:6}  {s['path']}{'  (watched)' if s['watch'] else ''}")
        print(f"indexed {progress['changed']} file(s), {progress['unchanged']} unchanged, "
              f"{progress['removed']} removed; {status['skipped_total']} skipped (wren docs status)")
    return 0


@_with_library
def _sync(library, args) -> int:
    progress = _index_with_progress(library, None)
    print(json.dumps(progress) if args.json else
          f"indexed {progress['changed']} file(s), {progress['unchanged']} unchanged, {progress['moved']} moved, "
          f"{progress['removed']} removed")
    return 0


@_with_library
def _list(library, args) -> int:
    def line(s: dict) -> str:
        files = s["files"]
        return (f"{s['id']:4}  {s['kind']:6}  {s['path']}  {files['indexed']} indexed, {files['skipped']} skipped, "
                f"{files['failed']} failed, {s['chunks']} passages{'  (watched)' if s['watch'] else ''}")

    _print(library.sources(), args.json, line)
    return 0


@_with_library
def _rm(library, args) -> int:
    gone = library.remove(args.target)
    print(json.dumps(gone, ensure_ascii=False) if args.json else
          f"removed {', '.join(gone['removed'])} ({gone['files']} file(s)) and their index")
    return 0


@_with_library
def _search(library, args) -> int:
    source_ids = None
    if args.project:
        source_ids = _projects(library).scope(None, args.project, None, "all").source_ids
    _print_passages(library.search(args.query, args.limit, source_ids), args.json)
    return 0


def _print_passages(passages: list, as_json: bool) -> None:
    for p in passages:
        if as_json:
            print(json.dumps({"path": p.path, "location": p.location, "text": p.text, "score": round(p.score, 6)},
                             ensure_ascii=False))
        else:
            print(f"{p.path} ({p.where})  {p.score:.4f}\n  {' '.join(p.text.split())[:300]}")


async def _search_expanded(args) -> int:
    """`wren docs search --expand`: the default model loaded, its phrasings of the query (on
    standard error) searched beside it (engine/library/expand.py); the query alone if the
    model writes nothing usable."""
    from ..errors import InvalidRequest
    from .main import _open_engine

    if not args.query.strip():
        raise InvalidRequest("the search is empty: give some words to look for")
    if args.limit < 1:
        raise InvalidRequest(f"--limit must be at least 1, not {args.limit}")
    engine = _open_engine(one_shot=True)
    try:
        source_ids = (await engine.library.scope(None, args.project, True)).source_ids if args.project else None
        await engine.models.load()
        passages = await engine.library.search(args.query, args.limit, source_ids, expand=True)
        also = engine.library.last_expansion
        print(f"also searched: {' | '.join(also)}" if also else "also searched: nothing (the model wrote no usable "
              "phrasing; the question alone)", file=sys.stderr)
        _print_passages(passages, args.json)
        return 0
    finally:
        await engine.close()


@_with_library
def _status(library, args) -> int:
    status = library.status()
    if args.json:
        print(json.dumps(status, ensure_ascii=False))
        return 0
    counts = status["counts"]
    print(f"{counts.get('indexed', 0)} file(s) indexed, {counts.get('skipped', 0)} skipped, "
          f"{counts.get('failed', 0)} failed, {counts.get('pending', 0)} waiting; "
          f"{counts['chunks']} passages, {counts['vectors']} with vectors")
    for row in status["skipped"]:
        print(f"  {row['state']}: {row['path']}: {row['reason']}")
    if status["skipped_total"] > len(status["skipped"]):
        print(f"  … and {status['skipped_total'] - len(status['skipped'])} more (--json lists the first ones)")
    return 0


# -- projects ------------------------------------------------------------------------------

def _project_line(p: dict) -> str:
    instructions = " ".join(p.get("instructions", "").split())
    return (f"{p['name']}  {len(p.get('source_ids', []))} source(s), {len(p.get('chats', []))} chat(s)"
            f"{'  — ' + instructions[:80] if instructions else ''}")


@_with_library
def _project_create(library, args) -> int:
    _print([_projects(library).create(args.name, args.instructions)], args.json, _project_line)
    return 0


@_with_library
def _project_list(library, args) -> int:
    _print(_projects(library).list(), args.json, _project_line)
    return 0


@_with_library
def _project_rm(library, args) -> int:
    gone = _projects(library).remove(args.name)
    print(json.dumps({"removed": gone}) if args.json else f"removed the project {gone['name']}")
    return 0


@_with_library
def _project_add_docs(library, args) -> int:
    projects = _projects(library)
    projects.get(args.name)  # an unknown project is an error before anything is added
    ids: list[int] = []
    new: list[int] = []
    for target in args.targets:
        try:
            ids += [s["id"] for s in library.find_sources(target)]
        except NotFound:  # not in the library yet: added (and indexed) now
            if target.isdigit():
                raise
            added = library.add([target])
            new += [s["id"] for s in added]
    if new:
        _index_with_progress(library, new)
    projects.add_sources(args.name, ids + new)
    project = next(p for p in projects.list() if p["name"] == args.name)
    _print([project], args.json, _project_line)
    return 0


@_with_library
def _project_instructions(library, args) -> int:
    projects = _projects(library)
    project = projects.set_instructions(args.name, args.text) if args.text is not None else projects.get(args.name)
    print(json.dumps(project, ensure_ascii=False) if args.json else project["instructions"])
    return 0

