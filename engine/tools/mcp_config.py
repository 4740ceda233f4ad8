"""The MCP servers the user configured: `mcp.json` in Wren's data folder.

The file uses the `mcpServers` layout that Claude desktop and other apps share, so a user
can read it, edit it by hand, or bring theirs with `import_mcp_servers`:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@scope/server"], "env": {"KEY": "…"}},
        "remote": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "…"}},
        "off": {"command": "thing", "disabled": true, "timeout": 120}}}

`timeout` is how long one tool call may take, in seconds (default 60). A missing file means
no servers. Every check below names the entry and what was wrong with it.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .. import paths
from ..errors import InvalidRequest

CONFIG_FILE = "mcp.json"
DEFAULT_CALL_TIMEOUT = 60.0
MAX_NAME_CHARS = 64
# Keys other apps write that Wren reads past without complaint.
_IGNORED_KEYS = {"description", "autoApprove", "alwaysAllow", "transportType", "cwd", "note", "notes"}
_STDIO_TYPES = {"stdio"}
_HTTP_TYPES = {"http", "streamable-http", "streamableHttp", "streamable_http"}

_file_lock = threading.Lock()


@dataclass(frozen=True)
class McpServerConfig:
    """One server: a command Wren starts (stdio) or a URL it connects to (streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    timeout: float = DEFAULT_CALL_TIMEOUT

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    def to_entry(self) -> dict[str, Any]:
        """The server's entry in `mcpServers`."""
        entry: dict[str, Any]
        if self.command is not None:
            entry = {"command": self.command, "args": list(self.args)}
            if self.env:
                entry["env"] = dict(self.env)
        else:
            entry = {"url": self.url}
            if self.headers:
                entry["headers"] = dict(self.headers)
        if not self.enabled:
            entry["disabled"] = True
        if self.timeout != DEFAULT_CALL_TIMEOUT:
            entry["timeout"] = self.timeout
        return entry


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(f"an MCP server needs a name, not {name!r}")
    if name != name.strip():
        raise InvalidRequest(f"MCP server name {name!r} starts or ends with spaces")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidRequest(f"MCP server name {name[:20]!r}… is longer than {MAX_NAME_CHARS} characters")
    if any(ord(c) < 32 for c in name):
        raise InvalidRequest(f"MCP server name {name!r} contains control characters")
    return name


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(f"{what} must be a list of strings, not {_short(value)}")
    return tuple(value)


def _string_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{what} must be an object of names to strings, not {_short(value)}")
    out = {}
    for key, item in value.items():
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            item = str(item)  # "PORT": 8080 is what people mean
        if not isinstance(item, str):
            raise InvalidRequest(f"{what}[{key!r}] must be a string, not {_short(item)}")
        out[str(key)] = item
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def check_url(url: Any, what: str) -> str:
    if not isinstance(url, str) or not url.strip():
        raise InvalidRequest(f"{what}: 'url' must be a non-empty string, not {_short(url)}")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidRequest(f"{what}: 'url' must be an http:// or https:// address, not {url!r}")
    return url.strip()


def server_from_entry(name: Any, entry: Any) -> McpServerConfig:
    """One `mcpServers` entry as a server, or InvalidRequest naming the entry and the fault."""
    name = check_name(name)
    what = f"MCP server {name!r}"
    if not isinstance(entry, dict):
        raise InvalidRequest(f"{what} must be an object with 'command' or 'url', not {_short(entry)}")
    command, url = _transport(entry, what)
    unknown = set(entry) - {"type", "command", "args", "env", "url", "serverUrl", "headers", "disabled",
                            "enabled", "timeout"} - _IGNORED_KEYS
    if unknown:
        raise InvalidRequest(f"{what} has keys Wren does not know: {', '.join(sorted(unknown))}")
    enabled = _enabled(entry, what)
    timeout = entry.get("timeout", DEFAULT_CALL_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise InvalidRequest(f"{what}: 'timeout' must be a number of seconds from 1 to 3600, not {_short(timeout)}")
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise InvalidRequest(f"{what}: 'command' must be a non-empty string, not {_short(command)}")
        if "headers" in entry:
            raise InvalidRequest(f"{what}: 'headers' belong to a 'url' server, not a 'command' one")
        args = _strings(entry.get("args", []), f"{what}: 'args'")
        env = _string_map(entry.get("env", {}), f"{what}: 'env'")
        return McpServerConfig(name, command=command.strip(), args=args, env=env, enabled=enabled,
                               timeout=float(timeout))
    if "args" in entry or "env" in entry:
        raise InvalidRequest(f"{what}: 'args' and 'env' belong to a 'command' server, not a 'url' one")
    headers = _string_map(entry.get("headers", {}), f"{what}: 'headers'")
    return McpServerConfig(name, url=check_url(url, what), headers=headers, enabled=enabled,
                           timeout=float(timeout))


def _transport(entry: dict, what: str) -> tuple[Any, Any]:
    """An entry's `command` and `url` (one of them None), checked against its `type`."""
    kind = entry.get("type")
    if kind is not None and kind not in _STDIO_TYPES | _HTTP_TYPES:
        if kind == "sse":
            raise InvalidRequest(f"{what} uses the old SSE transport, which Wren does not speak; "
                                 "use the server's streamable HTTP address (often ending in /mcp)")
        raise InvalidRequest(f"{what} has type {kind!r}; Wren speaks 'stdio' and 'http' (streamable HTTP)")
    command, url = entry.get("command"), entry.get("url", entry.get("serverUrl"))
    if command is not None and url is not None:
        raise InvalidRequest(f"{what} has both 'command' and 'url'; give one")
    if command is None and url is None:
        raise InvalidRequest(f"{what} needs 'command' (a program Wren starts) or 'url' (a streamable HTTP server)")
    if kind in _STDIO_TYPES and command is None:
        raise InvalidRequest(f"{what} says type 'stdio' but has no 'command'")
    if kind in _HTTP_TYPES and url is None:
        raise InvalidRequest(f"{what} says type {kind!r} but has no 'url'")
    return command, url


def _enabled(entry: dict, what: str) -> bool:
    """Off when `disabled` is true or `enabled` is false (both may be given)."""
    enabled = True
    for key, on_when in (("disabled", False), ("enabled", True)):
        if key in entry:
            if not isinstance(entry[key], bool):
                raise InvalidRequest(f"{what}: {key!r} must be true or false, not {_short(entry[key])}")
            enabled = enabled and entry[key] is on_when
    return enabled


def parse_servers(text: str) -> list[McpServerConfig]:
    """The servers in an `mcpServers` JSON text (Claude desktop's layout; a VS Code style
    `servers` object, or a bare object of entries, is read the same way). Every bad entry is
    named in one error, and then none is taken."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the MCP servers JSON does not parse: {exc.msg} at line {exc.lineno}, "
                             f"column {exc.colno}") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the MCP servers JSON must be an object with an \"mcpServers\" object inside")
    if "mcpServers" in data:
        entries = data["mcpServers"]
    elif "servers" in data:
        entries = data["servers"]
    elif data and all(isinstance(v, dict) and ("command" in v or "url" in v) for v in data.values()):
        entries = data
    else:
        raise InvalidRequest("the MCP servers JSON has no \"mcpServers\" object "
                             "(expected {\"mcpServers\": {\"name\": {\"command\": …}}})")
    if not isinstance(entries, dict):
        raise InvalidRequest(f"\"mcpServers\" must be an object of named servers, not {_short(entries)}")
    if not entries:
        raise InvalidRequest("\"mcpServers\" lists no servers")
    servers, problems = [], []
    for name, entry in entries.items():
        try:
            servers.append(server_from_entry(name, entry))
        except InvalidRequest as exc:
            problems.append(str(exc))
    if problems:
        head = "nothing was imported; " if len(entries) > 1 else ""
        raise InvalidRequest(head + "; ".join(problems))
    return servers


def config_path() -> Path:
    return paths.data_dir() / CONFIG_FILE


def load(path: Path | None = None) -> dict[str, McpServerConfig]:
    """The configured servers by name, in file order; a file that no longer reads (edited
    by hand) is an InvalidRequest naming the file and the fault."""
    path = path or config_path()
    with _file_lock:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise InvalidRequest(f"cannot read the MCP servers file {path}: {exc.strerror}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the MCP servers file {path} does not parse: {exc.msg} at line {exc.lineno}") from None
    entries = data.get("mcpServers", {}) if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise InvalidRequest(f"the MCP servers file {path} has no \"mcpServers\" object")
    try:
        return {name: server_from_entry(name, entry) for name, entry in entries.items()}
    except InvalidRequest as exc:
        raise InvalidRequest(f"in {path}: {exc}") from None


def save(servers: dict[str, McpServerConfig], path: Path | None = None) -> None:
    """Write every server, atomically; the file is the user's only (env may hold keys)."""
    path = path or config_path()
    text = json.dumps({"mcpServers": {name: s.to_entry() for name, s in servers.items()}},
                      indent=2, ensure_ascii=False) + "\n"
    with _file_lock:
        paths.make_dirs(path.parent)
        fd, staging = tempfile.mkstemp(prefix=".mcp-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(staging, 0o600)
            os.replace(staging, path)
        except BaseException:
            Path(staging).unlink(missing_ok=True)
            raise
