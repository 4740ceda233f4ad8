"""A tool's name in words ("current_datetime" -> "Current date and time"); the name the
model calls stays in the tooltip. An MCP server's tool ("server__tool") names its server."""

from __future__ import annotations

WORDS = {"datetime": "date and time", "url": "URL", "urls": "URLs", "api": "API", "id": "ID", "json": "JSON",
         "http": "HTTP", "pdf": "PDF", "csv": "CSV", "sql": "SQL", "html": "HTML", "mcp": "MCP"}
MCP_SEPARATOR = "__"


def _words(name: str) -> str:
    words = [WORDS.get(w.lower(), w) for w in name.replace("-", "_").split("_") if w]
    text = " ".join(words)
    return text[:1].upper() + text[1:] if text else name


def tool_label(name: str) -> str:
    server, sep, tool = name.partition(MCP_SEPARATOR)
    if sep and server and tool:
        return f"{_words(tool)} (from {server})"
    return _words(name)
