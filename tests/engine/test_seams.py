"""The seams named in docs/architecture.md: the answering half (engine/turns.py,
engine/titles.py) uses the engine only through `TurnHost`, never a private member."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from wren.engine.api import Engine
from wren.engine.turn.host import TurnHost

ROOT = Path(__file__).resolve().parents[2]
HOST_NAMES = {"e", "engine", "host"}  # how turns.py and titles.py name the engine they were given


def _private_reaches(path: Path) -> list[str]:
    """`x._name` where x is the engine (a local `e`, or `self.e` / `self.turns.e`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        owner = node.value
        named = (isinstance(owner, ast.Name) and owner.id in HOST_NAMES) or (
            isinstance(owner, ast.Attribute) and owner.attr in HOST_NAMES)
        if named:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return sorted(found)


def test_turns_and_titles_reach_no_private_member_of_the_engine():
    reaches = _private_reaches(ROOT / "engine" / "turns.py") + _private_reaches(ROOT / "engine" / "titles.py")
    assert reaches == [], reaches


def test_the_check_catches_a_private_reach(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f(self, e):\n    e._db()\n    self.e._status\n    e.db()\n")
    assert _private_reaches(sample) == ["sample.py:2 ._db", "sample.py:3 ._status"]


def _members(protocol: type) -> set[str]:
    """The protocol's members, its base protocols' included (TurnHost extends ToolHost)."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or not getattr(klass, "_is_protocol", False) or klass.__name__ == "Protocol":
            continue
        names |= {n for n in vars(klass).get("__annotations__", {}) if not n.startswith("_")}
        names |= {n for n, v in vars(klass).items()
                  if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


def test_the_engine_implements_every_member_of_the_seam():
    members = _members(TurnHost)
    assert {"db", "store_for", "model_status", "answer_started", "assembler_for", "policy", "tools", "settings",
            "models"} <= members
    missing = sorted(n for n in members if not hasattr(Engine, n) and n not in _instance_attributes())
    assert missing == [], missing
    for name in members:
        wanted = getattr(TurnHost, name, None)
        have = getattr(Engine, name, None)
        if inspect.iscoroutinefunction(wanted):
            assert inspect.iscoroutinefunction(have), f"Engine.{name} must be async, as TurnHost says"


def test_what_turns_uses_of_the_engine_is_in_the_seam():
    """Every attribute turns.py and titles.py read from the engine is declared in TurnHost,
    so the protocol is the whole interface, not a subset of it."""
    members = _members(TurnHost)
    used = set()
    for path in (ROOT / "engine" / "turns.py", ROOT / "engine" / "titles.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Attribute) and (
                    (isinstance(node.value, ast.Name) and node.value.id == "e")
                    or (isinstance(node.value, ast.Attribute) and node.value.attr == "e")):
                used.add(node.attr)
    assert used, "turns.py no longer names the engine `e`: update HOST_NAMES"
    assert sorted(used - members) == []


def _instance_attributes() -> set[str]:
    """The attributes Engine.__init__ and its core's (`Core.__init__`) set on the engine
    (`self.x = ...`), read from engine/api.py and engine/core.py (not from the live class,
    which another test may have patched)."""
    names: set[str] = set()
    for path, klass in (("api.py", "Engine"), ("core.py", "Core")):
        tree = ast.parse((ROOT / "engine" / path).read_text("utf-8"))
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == klass)
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        names |= {node.attr for node in ast.walk(init)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return names
