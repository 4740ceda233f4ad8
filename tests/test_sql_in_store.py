"""All SQL lives in engine/store/: no other module of the engine or the window talks to the
database but through the store's named functions.

Outside engine/store/, a module may not
- call `execute_sql` (peewee) or a DB-API `execute`/`executemany`/`executescript` with SQL text;
- import peewee, playhouse or sqlite3;
- import a peewee table class (or a tuple of them, such as TABLES) from engine.store's model
  modules, nor those modules themselves, since every peewee query starts from a table class;
- hold SQL text: a string (or the constant parts of an f-string) that reads as a statement
  ("SELECT … FROM", "INSERT INTO", "UPDATE … SET", "DELETE FROM", "PRAGMA", "VACUUM",
  "CREATE TABLE", …). Docstrings are prose and are not checked.

Not caught: a method call on a row object handed out by the store (`row.save()`); the
store's functions do not hand those out for writing.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import peewee as pw
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("engine", "desktop")
STORE = ROOT / "engine" / "store"
DB_MODULES = {"peewee", "playhouse", "sqlite3"}
MODEL_MODULES = ("engine.store.models", "engine.store.memory_models")
CURSOR_CALLS = {"execute", "executemany", "executescript"}
SQL = re.compile(
    r"^\s*(?:SELECT\b[\s\S]*\bFROM\b|SELECT\s+\d|INSERT\s+(?:OR\s+\w+\s+)?INTO\b|REPLACE\s+INTO\b"
    r"|UPDATE\s+\S+\s+SET\b|DELETE\s+FROM\b|PRAGMA\s+\w|VACUUM\b|ANALYZE\b|REINDEX\b"
    r"|(?:CREATE|DROP)\s+(?:UNIQUE\s+|VIRTUAL\s+|TEMP\s+|TEMPORARY\s+)*(?:TABLE|INDEX|VIEW|TRIGGER)\b"
    r"|ALTER\s+TABLE\b|BEGIN\s+(?:IMMEDIATE|EXCLUSIVE|DEFERRED|TRANSACTION)\b|WITH\s+\w+\s+AS\s*\()"
)


def _table_names(module: str) -> set[str]:
    """The names in a model module that are peewee tables or tuples of them."""
    def is_table(value: object) -> bool:
        return isinstance(value, type) and issubclass(value, pw.Model)

    return {name for name, value in vars(importlib.import_module("wren." + module)).items()
            if is_table(value) or (isinstance(value, tuple) and any(is_table(v) for v in value))}


TABLES = {module: _table_names(module) for module in MODEL_MODULES}


def _absolute(node: ast.ImportFrom, module: str) -> str:
    """The imported module's dotted name ("engine.store.models"), relative imports resolved
    against `module`, the importing module's own dotted name."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
    return None


def _import_problems(node: ast.AST, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [f"imports {a.name}" for a in node.names
                if a.name.split(".")[0] in DB_MODULES or a.name.removeprefix("wren.") in MODEL_MODULES]
    if not isinstance(node, ast.ImportFrom):
        return []
    source = _absolute(node, module).removeprefix("wren.")
    if source.split(".")[0] in DB_MODULES:
        return [f"imports from {source}"]
    if source in TABLES:
        return [f"imports the table {a.name} from {source}" for a in node.names
                if a.name in TABLES[source] or a.name == "*"]
    return [f"imports the module {source}.{a.name}" for a in node.names if f"{source}.{a.name}" in TABLES]


def sql_problems(source: str, module: str) -> list[str]:
    """What in `source` (the text of the module named `module`, e.g. "engine.memory.store")
    talks to the database directly, one line each as "line N: what"."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    problems = []
    for node in ast.walk(tree):
        found = _import_problems(node, module)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name == "execute_sql":
                found.append("calls execute_sql")
            elif name in CURSOR_CALLS and node.args and _text(node.args[0]) is not None:
                found.append(f"calls {name} with SQL text")
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in docs:
            text = _text(node)
            if text is not None and SQL.match(text):
                found.append(f"holds SQL text {text[:40]!r}")
        problems += [f"line {getattr(node, 'lineno', '?')}: {what}" for what in found]
    return problems


def _modules():
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if STORE not in path.parents:
                # a package's __init__ keeps its name here, so ".x" resolves inside the package
                yield path, ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_no_sql_outside_the_store():
    offenders = []
    for path, module in _modules():
        offenders += [f"{path.relative_to(ROOT)} {p}" for p in sql_problems(path.read_text(), module)]
    assert not offenders, "SQL belongs in engine/store/ (a named function there):\n" + "\n".join(offenders)


def test_the_scan_covers_the_modules_that_used_to_hold_sql():
    scanned = {module for _, module in _modules()}
    assert {"engine.privacy", "engine.memory.store", "engine.memory.vectors", "engine.context.summary",
            "engine.memory.__init__"} <= scanned
    assert not any(m.startswith("engine.store") for m in scanned)
    assert {"Memory", "MEMORY_TABLES"} <= TABLES["engine.store.memory_models"]
    assert "utcnow" not in TABLES["engine.store.models"]


# -- the check itself, fed violations ------------------------------------------------------

@pytest.mark.parametrize("source, what", [
    ("def f(db):\n    return db.execute_sql('SELECT 1')\n", "execute_sql"),
    ("def f(db, q):\n    return db.execute_sql(q)\n", "execute_sql"),
    ("def f(conn):\n    conn.execute('DELETE FROM memory')\n", "execute with SQL text"),
    ("def f(conn, t):\n    conn.executescript(f'DROP TABLE {t}')\n", "executescript with SQL text"),
    ("import peewee as pw\n", "imports peewee"),
    ("import sqlite3\n", "imports sqlite3"),
    ("from playhouse.sqlite_ext import FTS5Model\n", "imports from playhouse"),
    ("from ..store.memory_models import Memory\n", "the table Memory"),
    ("from ..store.models import TABLES, utcnow\n", "the table TABLES"),
    ("from wren.engine.store.models import Conversation\n", "the table Conversation"),
    ("from ..store import memory_models\n", "the module engine.store.memory_models"),
    ("import wren.engine.store.models\n", "imports wren.engine.store.models"),
    ("Q = 'SELECT id, text FROM memory WHERE id = ?'\n", "SQL text"),
    ("def f(t):\n    return f'INSERT OR REPLACE INTO {t} (a) VALUES (?)'\n", "SQL text"),
    ("Q = ('UPDATE message SET meta = ? '\n     'WHERE id = ?')\n", "SQL text"),
    ("Q = 'PRAGMA data_version'\n", "SQL text"),
    ("Q = 'VACUUM'\n", "SQL text"),
    ("Q = 'CREATE VIRTUAL TABLE x USING fts5(a)'\n", "SQL text"),
])
def test_the_check_finds_a_violation(source, what):
    problems = sql_problems(source, "engine.memory.example")
    assert problems and any(what in p for p in problems), problems


@pytest.mark.parametrize("source", [
    "from ..store.models import utcnow\n",
    "from ..store import Store\n",
    "from ..store.memories import memory_candidates\n",
    '"""Reads: SELECT id FROM memory is what the store runs."""\n',
    "def f():\n    'DELETE FROM x, in a docstring'\n",
    "MSG = 'Select the model to load from the list'\n",
    "MSG = 'update the settings, then set a key'\n",
    "def f(tool):\n    return tool.execute({'q': 1})\n",
    "rules = []\nrules.insert(1, 'start: x')\n",
])
def test_the_check_lets_plain_code_pass(source):
    assert sql_problems(source, "engine.memory.example") == []


def test_relative_imports_resolve_against_the_module():
    # engine/store/x.py's "from .models import Memory" is the store's own; from a module one
    # package down (engine/memory/x.py) "..store.models" is the same module.
    assert sql_problems("from .models import Memory\n", "engine.other.x") == []
    assert sql_problems("from ..store.models import Message\n", "engine.memory.x")
    assert sql_problems("from .store.models import Message\n", "engine.privacy")
    # a package's __init__: "." is the package itself
    assert sql_problems("from ..store.models import Message\n", "engine.memory.__init__")
    assert sql_problems("from .models import Message\n", "engine.store.__init__")
    assert sql_problems("from .models import Message\n", "engine.memory.__init__") == []
    assert sql_problems("from ..store.models import Message\n", "engine.memory.retrieve")
