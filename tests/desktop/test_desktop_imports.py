"""desktop/ reaches models only through the engine: no torch, mlx or peewee in its code, and
importing the app pulls in neither torch nor mlx."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

DESKTOP = Path(__file__).resolve().parents[2] / "desktop"
FORBIDDEN = {"torch", "mlx", "mlx_lm", "peewee"}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("__import__", "import_module"):
            roots.update(a.value.split(".")[0] for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return roots


def test_no_desktop_module_imports_torch_mlx_or_peewee():
    files = sorted(DESKTOP.rglob("*.py"))
    assert len(files) > 10
    offenders = {str(p.relative_to(DESKTOP)): sorted(_imported_roots(p) & FORBIDDEN) for p in files}
    assert not {k: v for k, v in offenders.items() if v}


def test_importing_the_app_loads_no_model_framework():
    modules = [f"wren.desktop.{'.'.join(p.relative_to(DESKTOP).with_suffix('').parts)}" for p in sorted(DESKTOP.rglob("*.py"))]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name.removesuffix('.__init__'))\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'mlx', 'mlx_lm'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=DESKTOP.parent, check=True,
                         env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == ""
