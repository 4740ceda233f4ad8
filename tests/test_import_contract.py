"""The import contract (docs/architecture.md, "Import boundaries"), checked on the source.

- `desktop/` imports the engine through `engine.api` (the Engine and its services) and the
  modules of the plain types and constants it shows (DESKTOP_ALLOWED: records, events,
  errors and each area's own record module); none of those loads torch or mlx;
- the engine's core never imports its front ends: nothing outside `engine/terminal` and
  `engine/server` imports them or the facade `engine.api` that wires the services;
- `engine/inference` never imports `engine.store`;
- the safety scanners (`engine/safety`) never import `engine.inference`;
- there is no import circle between the engine's modules: every module-level import
  counts, those under `if TYPE_CHECKING:` too.

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

# What desktop/ may import from the engine: the Engine, and the modules of the plain types
# and constants its services hand out (each loads without torch or mlx: tested below).
DESKTOP_ALLOWED = {
    "engine", "engine.api", "engine.events", "engine.records", "engine.errors",
    "engine.context.report", "engine.context.settings", "engine.context.assemble",  # ContextReport, ContextOverflow
    "engine.crashreport", "engine.ghost", "engine.inference.presets", "engine.inference.sampling",
    "engine.inference.select", "engine.memory.records", "engine.memory.settings", "engine.modelhub.catalog",
    "engine.modelhub.registry", "engine.modelhub.sizing", "engine.models", "engine.paths", "engine.privacy", "engine.providers.config",
    "engine.safety.care", "engine.safety.scanner", "engine.token_view", "engine.tools.mcp_facade",
    "engine.tools.registry",
}
# What the desktop must never load through those modules.
DESKTOP_NEVER_LOADS = ("torch", "mlx")
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
    "desktop/app.py": {"engine.logs", "engine.terminal.resident_host"},
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
        if name.startswith("engine.") and name.rpartition(".")[0] in DESKTOP_ALLOWED - {"engine"}:
            continue  # `from engine.api import Engine` yields engine.api.Engine: a name, not a module
        if name.startswith("engine.") and name.count(".") == 1 and name.split(".")[1] in ENGINE_PACKAGE_NAMES:
            continue
        if name in DESKTOP_ALLOWED:
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
            offenders.append(f"{rel}: {', '.join(bad)} (the desktop reaches the engine through engine.api and "
                             "the plain-type modules in DESKTOP_ALLOWED)")
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
        "from engine.inference.worker import ModelWorker\n",
        "from engine.chat import Chat\n",
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


# -- the core imports none of its front ends -------------------------------------------

FRONT_ENDS = ("engine/terminal", "engine/server")
CORE_FORBIDDEN = ("engine.terminal", "engine.server", "engine.api")


def core_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """What a core module (`module`, outside the front ends) imports of the front ends or
    of the facade that wires the services."""
    if module == "engine.api":  # the facade may not import the front ends, but is itself allowed
        forbidden = CORE_FORBIDDEN[:2]
    else:
        forbidden = CORE_FORBIDDEN
    names = imported_modules(source, module, is_package)
    return sorted(n for n in names if any(_is_under(n, f) for f in forbidden))


def test_the_core_imports_no_front_end_and_not_the_facade():
    offenders = []
    for path, source, module, is_package in _sources("engine"):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel.startswith(front + "/") for front in FRONT_ENDS):
            continue
        bad = core_violations(source, module, is_package)
        if bad:
            offenders.append(f"{rel}: {', '.join(bad)}")
    assert not offenders, "the engine core imports a front end or the facade:\n" + "\n".join(offenders)


def test_core_checker_flags_fake_violations():
    assert "engine.terminal.output" in core_violations("from .terminal.output import ORIGIN_KEY\n", "engine.records")
    assert core_violations("def f():\n    from ..server.serving import Serving\n", "engine.memory.facade")
    assert core_violations("from .api import Engine\n", "engine.chat")
    assert core_violations("from .terminal import resident\n", "engine.api")
    assert not core_violations("from .api import Engine\n", "engine.api")
    assert not core_violations("from .records import SendOptions\n", "engine.chat")


# -- no import circles -----------------------------------------------------------------


def _module_level_imports(body: list[ast.stmt], pkg: str, files: dict, edges: set[str]) -> None:
    """Add to `edges` the modules of `files` that the statements in `body` import (inside
    `if`/`try` blocks too, not inside functions or classes); `pkg` resolves relative imports."""
    for node in body:
        if isinstance(node, ast.If):
            _module_level_imports(node.body + node.orelse, pkg, files, edges)
        elif isinstance(node, ast.Try):
            handlers = [stmt for handler in node.handlers for stmt in handler.body]
            _module_level_imports(node.body + handlers + node.orelse + node.finalbody, pkg, files, edges)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name.removeprefix("wren.")
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name:
                    edges.add(name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(p for p in [*parts, node.module or ""] if p)
            else:
                base = (node.module or "").removeprefix("wren.")
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files]
            edges.update(subs)
            if base in files and len(subs) < len(node.names):
                edges.add(base)


def module_graph(root: Path, package: str = "engine") -> dict[str, set[str]]:
    """Each module of `root/package` -> the package's modules it imports at module level
    (inside `if`/`try` blocks too: a TYPE_CHECKING import counts). `from X import a` is an
    import of X.a where that is a module, else of X."""
    files = {_module_name(p, root): p for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: set[str] = set()
        _module_level_imports(ast.parse(path.read_text("utf-8")).body, pkg, files, edges)
        edges.discard(module)
        graph[module] = edges
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return circles


def test_the_engine_has_no_import_circle():
    circles = import_circles(module_graph(ROOT))
    assert circles == [], "import circles in engine/ (move what both sides need below them):\n" + "\n".join(
        " <-> ".join(c) for c in circles)


def test_the_circle_finder_sees_a_type_checking_circle(tmp_path):
    pkg = tmp_path / "engine"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub.b import B\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import A\nclass B: ...\n")
    (pkg / "c.py").write_text("def f():\n    from .a import A\n")  # inside a function: not module level
    (pkg / "d.py").write_text("from . import c\n")
    assert import_circles(module_graph(tmp_path)) == [["engine.a", "engine.sub.b"]]
    (pkg / "sub" / "b.py").write_text("class B: ...\n")
    assert import_circles(module_graph(tmp_path)) == []


# -- what the desktop imports stays light ------------------------------------------------


def test_the_modules_the_desktop_may_import_load_without_torch_or_mlx():
    """The plain-type modules load in a fresh interpreter without torch or mlx (the facade
    itself is the engine: it loads what the engine needs)."""
    import subprocess
    import sys

    modules = sorted(m for m in DESKTOP_ALLOWED if m not in ("engine", "engine.api"))
    code = ("import importlib, json, sys\n"
            f"out = {{}}\nfor m in {modules!r}:\n"
            "    importlib.import_module('wren.' + m)\n"
            f"    out[m] = [n for n in {DESKTOP_NEVER_LOADS!r} if n in sys.modules]\n"
            "print(json.dumps(out))\n")
    # each module on its own: one that loads torch must not hide behind an earlier one
    heavy = {}
    for module in modules:
        run = subprocess.run([sys.executable, "-c", code.replace(repr(modules), repr([module]))],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert run.returncode == 0, run.stderr[-2000:]
        import json

        loaded = json.loads(run.stdout.strip().splitlines()[-1])[module]
        if loaded:
            heavy[module] = loaded
    assert heavy == {}, f"modules the desktop may import load {heavy}"
