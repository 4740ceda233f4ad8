"""Every module and file docs/architecture.md names exists in the tree.

The page names code by path (`engine/turn/plan.py`, `desktop/bridge.py`, a folder as
`engine/terminal/`) and by installed module name (`wren.engine.records`, `python -m
wren.engine.terminal`); `engine.chat.send` there is the Engine object's attribute, not a
module, and is not checked here. A path may hold a pattern (`engine/inference/quant/_C*.so`,
`<data>` and the like stand for any name): some file must match it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "docs" / "architecture.md"]
TOP = ("engine", "desktop", "resources", "packaging", "tests", "bench", "docs", "scripts")
PATH = re.compile(r"(?<![\w./<>-])((?:" + "|".join(TOP) + r")/[\w./*<>-]*)")
MODULE = re.compile(r"(?<![\w.])wren\.((?:engine|desktop|resources)(?:\.\w+)+)")


def named_paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".") for m in PATH.finditer(text)}


def named_modules(text: str) -> set[str]:
    return {m.group(1) for m in MODULE.finditer(text)}


def path_exists(name: str) -> bool:
    pattern = re.sub(r"<[^>]*>", "*", name).rstrip("/")
    if "*" in pattern:
        return any(ROOT.glob(pattern))
    return (ROOT / pattern).exists()


def module_exists(dotted: str) -> bool:
    """A module (file or package) of the tree, or a name defined or imported in one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if source.is_file() or (base.is_dir() and cut == len(parts)):
            rest = parts[cut:]
            if not rest:
                return True
            if len(rest) > 1 or not source.is_file():
                return False
            return re.search(rf"\b{re.escape(rest[0])}\b", source.read_text(encoding="utf-8")) is not None
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_the_page_names_exists(page: Path):
    text = page.read_text(encoding="utf-8")
    names = named_paths(text)
    assert len(names) > 20, f"{page.name} names almost no code: the pattern no longer finds its paths"
    missing = sorted(n for n in names if not path_exists(n))
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_module_the_page_names_exists(page: Path):
    missing = sorted(m for m in named_modules(page.read_text(encoding="utf-8")) if not module_exists(m))
    assert not missing, f"{page.name} names modules that do not exist: {missing}"


def test_the_checks_tell_present_from_absent():
    text = ("`engine/turn/plan.py`, engine/terminal/, `engine/no_such.py`, resources/safety-care/<lang>.json, "
            "`python -m wren.engine.terminal`, wren.engine.records.SendOptions, wren.engine.cli")
    assert named_paths(text) == {"engine/turn/plan.py", "engine/terminal/", "engine/no_such.py",
                                 "resources/safety-care/<lang>.json"}
    assert [n for n in sorted(named_paths(text)) if not path_exists(n)] == ["engine/no_such.py"]
    assert named_modules(text) == {"engine.terminal", "engine.records.SendOptions", "engine.cli"}
    assert module_exists("engine.terminal") and module_exists("engine.records.SendOptions")
    assert not module_exists("engine.cli")  # moved to engine/terminal/ (issue 26)
    assert not module_exists("engine.records.NoSuchName")
