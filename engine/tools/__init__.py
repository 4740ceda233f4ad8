"""Tools the model may call: the registry and its sources (the built-in tools, MCP
servers), the call formats of each model family, and one answer's calls (docs/tools.md)."""
