"""`wren ask` starts fast: parsing its command line imports no model framework, no
database layer and no optional command."""

from __future__ import annotations

import subprocess
import sys

from tests.engine.cli.conftest import REPO

HEAVY = ("torch", "peewee", "tokenizers", "jinja2", "safetensors", "httpx", "mcp", "starlette",
         "engine.api", "engine.store", "engine.modelhub", "engine.cli_chat", "engine.cli_completion",
         "engine.memory", "engine.safety", "readline")


def test_parsing_ask_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from engine.cli import build_parser, _is_builtin\n"
        "argv = ['ask', '--no-save', '--file', 'x.txt', 'what', 'is', 'this']\n"
        "build_parser(extensions=not _is_builtin(argv)).parse_args(argv)\n"
        "import engine.cli_input, engine.cli_terminal\n"
        f"heavy = {HEAVY!r}\n"
        "print(' '.join(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == ""
