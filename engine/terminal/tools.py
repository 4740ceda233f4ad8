"""`wren tools …` and `wren mcp …`: the tools a model may call, and the user's MCP servers.

    wren tools list [--json]
    wren tools call NAME --args JSON [--json]
    wren mcp add NAME -- COMMAND [ARGS...]      (--env KEY=VALUE before the --)
    wren mcp add NAME --url URL                 (--header "Name: value")
    wren mcp import FILE                        (Claude desktop's mcpServers JSON; - reads stdin)
    wren mcp list [--json] | rm NAME | test NAME [--json] | log NAME [-n LINES]

main.py adds these with `register(subparsers)`; each handler is `(args) -> int` or a
coroutine of it. Configuration commands touch only mcp.json; `test`, `tools list` and
`tools call` start the servers they need and stop them before returning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import InvalidRequest
from .output import is_terminal, shown

ADD_USAGE = "wren mcp add NAME [--env KEY=VALUE]... -- COMMAND [ARGS...]  |  wren mcp add NAME --url URL [--header 'K: V']..."


def register(subparsers: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON")

    tools = subparsers.add_parser("tools", help="list the tools a model may call, or run one")
    actions = tools.add_subparsers(dest="action", required=True)
    p = actions.add_parser("list", parents=[common], help="every tool: built-in and MCP servers' (starts the servers)")
    p.set_defaults(func=_tools_list)
    p = actions.add_parser("call", parents=[common], help="run a tool directly (no approval: you asked)")
    p.add_argument("name", help="the tool's name, as `wren tools list` shows it")
    p.add_argument("--args", default="{}", metavar="JSON", help="the arguments, a JSON object (default {})")
    p.set_defaults(func=_tools_call)

    mcp = subparsers.add_parser("mcp", help="add, import, list, test or remove MCP servers")
    actions = mcp.add_subparsers(dest="action", required=True)
    p = actions.add_parser(
        "add", help="add a stdio server (a command) or a streamable-HTTP server (a URL)", usage=ADD_USAGE,
        description="Options (--env, --header, --url, --timeout, --off) go before the --; everything after "
                    "it is the command and its arguments.")
    p.add_argument("spec", nargs=argparse.REMAINDER, metavar="NAME ...")
    p.set_defaults(func=_mcp_add)
    p = actions.add_parser("import", parents=[common], help="add every server in an mcpServers JSON file")
    p.add_argument("file", help="the JSON file (Claude desktop's claude_desktop_config.json works); - reads stdin")
    p.set_defaults(func=_mcp_import)
    p = actions.add_parser("list", parents=[common], help="the configured servers")
    p.set_defaults(func=_mcp_list)
    p = actions.add_parser("rm", parents=[common], help="remove a server")
    p.add_argument("name")
    p.set_defaults(func=_mcp_rm)
    p = actions.add_parser("test", parents=[common], help="start a server and list its tools")
    p.add_argument("name")
    p.set_defaults(func=_mcp_test)
    p = actions.add_parser("log", help="what a server said (stderr, its log messages) and what Wren did with it")
    p.add_argument("name")
    p.add_argument("-n", "--lines", type=int, default=200, help="the last N lines (default 200)")
    p.set_defaults(func=_mcp_log)


class _Refusing(argparse.ArgumentParser):
    """An argument parser whose mistakes are InvalidRequest (`wren: …`, status 2)."""

    def error(self, message: str):  # type: ignore[override]
        raise InvalidRequest(f"{message}; usage: {ADD_USAGE}")


def _add_parser() -> argparse.ArgumentParser:
    p = _Refusing(prog="wren mcp add", add_help=False)
    p.add_argument("name")
    p.add_argument("--url")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'")
    p.add_argument("--timeout", type=float)
    p.add_argument("--off", action="store_true", help="add it turned off")
    p.add_argument("--replace", action="store_true", help="replace a server of the same name")
    p.add_argument("--json", action="store_true")
    return p


def _pairs(items: list[str], sep: str, what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, found, value = item.partition(sep)
        if not found or not key.strip():
            raise InvalidRequest(f"{what} {item!r} must look like NAME{sep}VALUE")
        out[key.strip()] = value.strip() if sep == ":" else value
    return out


def _manager():
    from .. import paths
    from ..tools.mcp import McpManager
    from ..tools.mcp_config import config_path

    return McpManager(config_path(), log_dir=paths.logs_dir() / "mcp")


async def _mcp_add(args) -> int:
    spec = list(args.spec)
    if "--" in spec:
        cut = spec.index("--")
        options, command = spec[:cut], spec[cut + 1:]
    else:
        options, command = spec, []
    opts = _add_parser().parse_args(options)
    if command and opts.url:
        raise InvalidRequest("give a command (after --) or --url, not both")
    if not command and not opts.url:
        raise InvalidRequest(f"say how to reach the server; usage: {ADD_USAGE}")
    if opts.url and opts.env:
        raise InvalidRequest("--env is for a command server; a URL server takes --header")
    manager = _manager()
    from ..tools.mcp_config import server_from_entry

    entry: dict[str, Any] = ({"url": opts.url, "headers": _pairs(opts.header, ":", "--header")} if opts.url else
                             {"command": command[0], "args": command[1:], "env": _pairs(opts.env, "=", "--env")})
    if opts.header and not opts.url:
        raise InvalidRequest("--header is for a URL server; a command server takes --env")
    if opts.timeout is not None:
        entry["timeout"] = opts.timeout
    entry["disabled"] = opts.off
    server = await manager.add(server_from_entry(opts.name, entry), replace=opts.replace)
    if opts.json:
        print(json.dumps({"added": server.name, **server.to_entry()}, ensure_ascii=False))
    else:
        print(f"added MCP server {server.name!r} ({_reach(server)}); `wren mcp test {_quote(server.name)}` starts it "
              "and lists its tools")
    return 0


async def _mcp_import(args) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        path = Path(args.file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InvalidRequest(f"no file {str(path)!r}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidRequest(f"cannot read {str(path)!r}: {exc}") from None
    names = await _manager().import_json(text)
    if args.json:
        print(json.dumps({"imported": names}, ensure_ascii=False))
    else:
        print(f"imported {len(names)} MCP server{'s' if len(names) != 1 else ''}: {', '.join(names)}")
    return 0


def _mcp_list(args) -> int:
    states = _manager().states()
    if args.json:
        for state in states:
            c = state.config
            print(json.dumps({"name": c.name, "transport": c.transport, "command": c.command, "args": list(c.args),
                              "env": sorted(c.env), "url": c.url, "headers": sorted(c.headers),
                              "enabled": c.enabled, "timeout": c.timeout}, ensure_ascii=False))
        return 0
    if not states:
        print("no MCP servers; add one with `wren mcp add NAME -- COMMAND` or `wren mcp import FILE`")
    for state in states:
        c = state.config
        print(f"{c.name:20} {c.transport:5} {'on ' if c.enabled else 'off'}  {_reach(c)}")
    return 0


async def _mcp_rm(args) -> int:
    await _manager().remove(args.name)
    print(json.dumps({"removed": args.name}) if args.json else f"removed MCP server {args.name!r}")
    return 0


async def _mcp_test(args) -> int:
    from ..tools.mcp import McpFailure

    manager = _manager()
    try:
        try:
            tools = await manager.test(args.name)
        except McpFailure as exc:
            log = manager.log(args.name)
            tail = "\n".join(log.splitlines()[-5:])
            raise McpFailure(f"MCP server {args.name!r} could not start: {exc}" + (f"\n{tail}" if tail else "")) from None
    finally:
        await manager.aclose()
    if args.json:
        for tool in tools:
            print(json.dumps({"name": tool.qualified, "description": tool.description,
                              "parameters": tool.input_schema}, ensure_ascii=False))
    else:
        print(f"MCP server {args.name!r} works: {len(tools)} tool{'s' if len(tools) != 1 else ''}")
        for tool in tools:
            print(shown(f"  {tool.qualified:32} {_first_line(tool.description)}"))
    return 0


def _mcp_log(args) -> int:
    manager = _manager()
    manager.config(args.name)  # a clear error for an unknown name
    file = manager.log_file(args.name)
    try:
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines() if file else []
    except FileNotFoundError:
        lines = []
    if not lines:
        print(f"MCP server {args.name!r} has no log yet: it logs once Wren starts it", file=sys.stderr)
    for line in lines[-args.lines:]:
        print(line)
    return 0


async def _tools_list(args) -> int:
    engine = _open_engine()
    try:
        await engine.tools.prepare_sources()
        tools = await engine.tools.list()
        failed = [(s, await engine.tools.mcp_server_log(s.name))
                  for s in await engine.tools.mcp_servers() if s.enabled and s.state == "failed"]
    finally:
        await engine.close()
    for server, log in failed:  # a server whose tools are absent says why (stderr: --json stays one tool per line)
        tail = "".join(f"\n  {line}" for line in log.splitlines()[-3:])
        print(shown(f"wren tools list: MCP server {server.name!r} did not start, so its tools are missing: "
                    f"{server.error or 'no reason given'}{tail}\n  (`wren mcp log {server.name}` has the rest)"),
              file=sys.stderr)
    for tool in tools:
        if args.json:
            print(json.dumps({"name": tool.name, "description": tool.description, "parameters": tool.parameters,
                              "needs_approval": tool.needs_approval, "source": tool.source,
                              "enabled": tool.enabled}, ensure_ascii=False))
        else:
            marks = ("" if tool.enabled else " [off]") + (" [asks first]" if tool.needs_approval else "")
            print(shown(f"{tool.name:32} {tool.source:14} {_first_line(tool.description)}{marks}"))
    return 0


async def _tools_call(args) -> int:
    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"--args is not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(arguments, dict):
        raise InvalidRequest(f"--args must be a JSON object of the tool's arguments, not {type(arguments).__name__}")
    engine = _open_engine()
    try:
        await engine.tools.prepare_sources([args.name])  # starts only the MCP server that owns it
        if engine.tools.registry.find(args.name) is None:  # unknown: every server's tools, for the suggestion
            await engine.tools.prepare_sources()
        result = await engine.tools.call(args.name, arguments)
    finally:
        await engine.close()
    # The result is the tool's (an MCP server's) text: on a terminal without control
    # characters or escape sequences, as a model's answer; to a pipe exactly as it came.
    if args.json:
        from ..events import event_to_dict

        print(json.dumps(event_to_dict(result), ensure_ascii=is_terminal(sys.stdout)))
    else:
        print(shown(result.content))
    return 1 if result.is_error else 0


def _open_engine():
    from .main import _open_engine as open_engine

    return open_engine()


def _reach(config) -> str:
    if config.command is not None:
        return " ".join([config.command, *(_quote(a) for a in config.args)])
    return str(config.url)


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _first_line(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= 80 else line[:79] + "…"
