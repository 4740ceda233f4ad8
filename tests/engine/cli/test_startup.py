"""`wren ask` starts fast: parsing its command line imports no model framework, no
database layer and no optional command."""

from __future__ import annotations

import subprocess
import sys

from tests.engine.cli.conftest import REPO

HEAVY = ("torch", "peewee", "tokenizers", "jinja2", "safetensors", "httpx", "mcp", "starlette",
         "wren.engine.api", "wren.engine.store", "wren.engine.modelhub", "wren.engine.terminal.chat", "wren.engine.terminal.completion",
         "wren.engine.memory", "wren.engine.safety", "readline")


def test_parsing_ask_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from wren.engine.terminal.main import build_parser, _is_builtin\n"
        "argv = ['ask', '--no-save', '--file', 'x.txt', 'what', 'is', 'this']\n"
        "build_parser(extensions=not _is_builtin(argv)).parse_args(argv)\n"
        "import wren.engine.terminal.question, wren.engine.terminal.output\n"
        f"heavy = {HEAVY!r}\n"
        "print(' '.join(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == ""
