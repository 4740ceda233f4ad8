"""Changing the user's policy file from settings: one action, or block-list entries.

The file is re-read, changed and written back whole; comments in it are not kept, which
the file's header says. A broken file is never overwritten: the error names its line."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..events import SafetyAction
from ..paths import private_dir, private_file
from .policy import Policy, PolicyError

DESTINATIONS = ("local", "remote")
_HEADER = (
    "# Your changes to Wren's safety policy, merged over the shipped one.\n"
    "# Settings → Safety rewrites this file (comments are not kept).\n\n"
)


@dataclass(frozen=True)
class RuleRow:
    """One category as the settings page lists it."""

    category: str
    local: SafetyAction
    remote: SafetyAction


def rule_rows(policy: Policy) -> list[RuleRow]:
    categories = sorted({d.category for d in policy.detectors} | {"user.blocklist"})
    return [RuleRow(c, policy.action_for(c, "local"), policy.action_for(c, "remote")) for c in categories]


def policy_path(data_dir: Path) -> Path:
    return Path(data_dir) / "safety" / "policy.toml"


def _read(path: Path) -> dict:
    if not path.is_file():
        return {"version": 1}
    text = path.read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: {exc}; fix or remove the file before changing rules here") from None


def set_action(data_dir: Path, category: str, destination: str, action: SafetyAction) -> None:
    if destination not in DESTINATIONS:
        raise PolicyError(f"unknown destination {destination!r}; use local or remote")
    path = policy_path(data_dir)
    doc = _read(path)
    actions = doc.setdefault("actions", {})
    current = actions.get(category)
    entry = dict(current) if isinstance(current, dict) else {d: current for d in DESTINATIONS} if current else {}
    entry[destination] = SafetyAction(action).value
    actions[category] = entry
    _write(path, doc)


def blocklist(data_dir: Path) -> tuple[list[str], list[str]]:
    """The user's own blocked words and patterns as saved (empty if the file is unreadable;
    `Policy.load` reports why)."""
    try:
        block = _read(policy_path(data_dir)).get("blocklist") or {}
    except (OSError, UnicodeDecodeError, PolicyError):
        return [], []
    return [str(w) for w in block.get("words", [])], [str(p) for p in block.get("patterns", [])]


def set_blocklist(data_dir: Path, words: list[str], patterns: list[str]) -> None:
    path = policy_path(data_dir)
    doc = _read(path)
    doc["blocklist"] = {"words": [w for w in words if w.strip()], "patterns": [p for p in patterns if p.strip()]}
    _write(path, doc)


def _write(path: Path, doc: dict) -> None:
    text = _dump(doc)
    Policy.from_toml(text, str(path))  # a rule Wren could not load never reaches the disk
    private_dir(path.parent)  # the block list may name what the user keeps secret
    tmp = path.with_suffix(".toml.tmp")
    private_file(tmp).write_text(text, encoding="utf-8")
    tmp.replace(path)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON's escapes are valid TOML basic strings
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise PolicyError(f"cannot write {v!r} to a policy file")


def _dump(doc: dict) -> str:
    """TOML for the policy file's shapes: scalars, [tables] of scalars, [[arrays]] of tables."""
    lines = [_HEADER.rstrip("\n"), ""]
    for key, value in doc.items():
        if not isinstance(value, (dict, list)) or (isinstance(value, list) and not all(isinstance(x, dict) for x in value)):
            lines.append(f"{key} = {_value(value)}")
    for key, value in doc.items():
        if isinstance(value, dict):
            lines += ["", f"[{key}]"] + [f"{json.dumps(k)} = {_value(v)}" for k, v in value.items()]
        elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            for table in value:
                lines += ["", f"[[{key}]]"] + [f"{json.dumps(k)} = {_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
