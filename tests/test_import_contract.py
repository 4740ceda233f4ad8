"""The import contract (docs/architecture.md, "Import boundaries"), checked on the source.

- `desktop/` imports the engine only through its facade, `engine.api`, and the plain data
  type modules `engine.events`, `engine.records` and `engine.errors` (plus the package's
  `__version__`);
- `engine/inference` never imports `engine.store`;
- the safety scanners (`engine/safety`) never import `engine.inference`.

Every import statement counts, at module level or inside a function, and relative imports
are resolved. A module that imports a forbidden module's parent package (`from engine import
store`) is caught too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What desktop/ may import from the engine.
DESKTOP_ALLOWED = {"engine", "engine.api", "engine.events", "engine.records", "engine.errors"}
# From the bare `engine` package, only these names (anything else is a submodule).
ENGINE_PACKAGE_NAMES = {"__version__"}

# Desktop files that still reach past the facade, with what they may import for now.
# Each entry is debt except where the reason says otherwise; the lead shrinks this list.
# An entry that is no longer needed fails test_allow_list_has_no_stale_entries.
DESKTOP_EXCEPTIONS: dict[str, set[str]] = {
    # Start-up order, kept on purpose: logging and the single-instance check run before the
    # facade (and torch) load, so a second start hands over to the first at once.
    # The window hosts the terminal's questions: while it runs, `wren ask` for the model it
    # has loaded is answered by its engine (the terminal package's host, started and stopped here).
    "desktop/app.py": {"engine.logs", "engine.paths", "engine.terminal.resident_host"},
}


@dataclass(frozen=True)
class Rule:
    """Files under `where` must not import anything under `forbidden`."""

    where: str
    forbidden: tuple[str, ...]
    why: str


ENGINE_RULES = (
    Rule("engine/inference", ("engine.store",), "inference never touches the conversation store"),
    Rule("engine/safety", ("engine.inference",), "the safety scanners never depend on a model"),
)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module an import statement in `source` names, fully qualified. For `from X import
    a, b` both X and X.a, X.b are returned, since a, b may be submodules."""
    tree = ast.parse(source)
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(p for p in [*base_parts, node.module or ""] if p)
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    # Wren installs its folders as wren.engine, wren.desktop: the rules speak of the folders
    return {name.removeprefix("wren.") for name in found}


def _is_under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def desktop_violations(source: str, module: str, allowed_extra: set[str] = frozenset()) -> list[str]:
    """The engine modules `source` (the desktop module `module`) imports beyond the contract."""
    bad = set()
    tree_imports = imported_modules(source, module)
    for name in tree_imports:
        if not _is_under(name, "engine"):
            continue
        if name.startswith("engine.") and name.rpartition(".")[0] in {"engine.api", "engine.events",
                                                                     "engine.records", "engine.errors"}:
            continue  # `from engine.api import Engine` yields engine.api.Engine: a name, not a module
        if name.startswith("engine.") and name.count(".") == 1 and name.split(".")[1] in ENGINE_PACKAGE_NAMES:
            continue
        top = ".".join(name.split(".")[:2])
        if name in DESKTOP_ALLOWED or top in DESKTOP_ALLOWED - {"engine"}:
            continue
        if any(_is_under(name, extra) for extra in allowed_extra):
            continue
        bad.add(name)
    # `from engine.context import X` gives both engine.context and engine.context.X; say the module once.
    return sorted(b for b in bad if not any(b != o and _is_under(b, o) for o in bad))


def rule_violations(source: str, module: str, rule: Rule, is_package: bool = False) -> list[str]:
    names = imported_modules(source, module, is_package)
    return sorted(n for n in names if any(_is_under(n, f) for f in rule.forbidden))


def _sources(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        yield path, path.read_text(encoding="utf-8"), _module_name(path, ROOT), path.name == "__init__.py"


def test_desktop_imports_only_the_facade_and_plain_types():
    offenders = []
    for path, source, module, _ in _sources("desktop"):
        rel = path.relative_to(ROOT).as_posix()
        bad = desktop_violations(source, module, DESKTOP_EXCEPTIONS.get(rel, set()))
        if bad:
            offenders.append(f"{rel}: {', '.join(bad)} (import these from engine.api instead)")
    assert not offenders, "\n".join(offenders)


def test_allow_list_has_no_stale_entries():
    stale = []
    for rel, allowed in DESKTOP_EXCEPTIONS.items():
        path = ROOT / rel
        if not path.exists():
            stale.append(f"{rel}: no such file")
            continue
        used = desktop_violations(path.read_text(encoding="utf-8"), _module_name(path, ROOT))
        for entry in allowed:
            if not any(_is_under(u, entry) for u in used):
                stale.append(f"{rel}: no longer imports {entry}; drop it from DESKTOP_EXCEPTIONS")
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("rule", ENGINE_RULES, ids=lambda r: r.where)
def test_engine_layer_rules(rule):
    assert (ROOT / rule.where).is_dir(), f"{rule.where} is gone: update the contract"
    offenders = []
    for path, source, module, is_package in _sources(rule.where):
        bad = rule_violations(source, module, rule, is_package)
        if bad:
            offenders.append(f"{path.relative_to(ROOT)}: {', '.join(bad)} ({rule.why})")
    assert not offenders, "\n".join(offenders)


# -- the checker catches what it should (fake modules) ---------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "from engine.inference.select import BACKEND_NAMES\n",
        "import engine.store\n",
        "from engine import store\n",
        "def later():\n    from engine.memory import MemoryInfo\n",
        "from engine.context import ContextReport\n",
    ],
)
def test_desktop_checker_flags_a_fake_violation(source):
    assert desktop_violations(source, "desktop.fake.module")


@pytest.mark.parametrize(
    "source",
    [
        "from engine.api import Engine, SamplingParams\n",
        "from engine.events import Finished\nfrom engine.records import Role\nfrom engine.errors import WrenError\n",
        "from engine import __version__\n",
        "import engine.api\n",
        "from desktop.chat.view import ChatView\nimport json\n",
    ],
)
def test_desktop_checker_accepts_the_contract(source):
    assert desktop_violations(source, "desktop.fake.module") == []


def test_desktop_exception_applies_only_to_what_it_names():
    source = "from engine.paths import data_dir\nfrom engine.store import Store\n"
    assert desktop_violations(source, "desktop.app", {"engine.paths"}) == ["engine.store"]


def test_engine_rules_flag_fake_violations_including_relative_imports():
    inference, safety = ENGINE_RULES
    assert rule_violations("from engine.store import Store\n", "engine.inference.worker", inference)
    assert rule_violations("from ...store import Store\n", "engine.inference.backends.fake", inference)
    assert rule_violations("from .. import store\n", "engine.inference.fake", inference)
    assert rule_violations("import engine.inference.worker\n", "engine.safety.scanner", safety)
    assert rule_violations("from ..inference import sampling\n", "engine.safety.fake", safety)
    # and leaves lawful imports alone
    assert not rule_violations("from engine.events import Delta\nfrom . import sampling\n",
                               "engine.inference.worker", inference)
    assert not rule_violations("from engine.safety.policy import Policy\n", "engine.safety.scanner", safety)
    # a package's own relative imports resolve against the package itself
    assert rule_violations("from .store import Store\n", "engine", inference, is_package=True)
