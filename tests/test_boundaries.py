"""engine never imports Qt; desktop never imports torch, mlx or peewee."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RULES = {
    "engine": {"PySide6", "qasync", "shiboken6"},
    "desktop": {"torch", "mlx", "mlx_lm", "peewee"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(RULES))
def test_no_forbidden_imports_in_source(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imports(path) & RULES[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)}: {sorted(bad)}")
    assert not offenders, "\n".join(offenders)


def test_engine_api_import_pulls_in_no_qt():
    code = (
        "import sys, wren.engine.api, wren.engine.terminal.main\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'qasync', 'shiboken6')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""
