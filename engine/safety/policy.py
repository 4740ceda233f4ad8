"""The safety policy: which action each category gets per destination, and what is allowed.

The shipped policy lives in resources/safety/policy.toml; a user's
<data dir>/safety/policy.toml is merged over it. A broken user file never stops Wren: the
loader reports the file and line and keeps the shipped policy.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import WrenError
from ..events import SafetyAction
from . import credentials, personal, wordlists
from .detector import Detector

DESTINATIONS = ("local", "remote")
STRENGTH = {SafetyAction.ALLOW: 0, SafetyAction.WARN: 1, SafetyAction.REDACT: 2, SafetyAction.BLOCK: 3}
BUILTIN_DETECTORS: tuple[Detector, ...] = credentials.DETECTORS + personal.DETECTORS

_TOP_KEYS = {"version", "actions", "allow", "blocklist"}
_ALLOW_KEYS = {"id", "categories", "values", "patterns", "where", "destinations", "action", "enabled"}
_SHIPPED_NAME = "resources/safety/policy.toml"


class PolicyError(WrenError, ValueError):
    """A safety policy Wren cannot use; the message names the file, the line and the problem."""


def strongest(actions) -> SafetyAction:
    return max(actions, key=STRENGTH.__getitem__, default=SafetyAction.ALLOW)


def check_destination(destination: str) -> str:
    if destination not in DESTINATIONS:
        raise ValueError(f"destination must be 'local' or 'remote', not {destination!r}")
    return destination


def covers(prefix: str, category: str) -> bool:
    return category == prefix or category.startswith(prefix + ".")


@dataclass(frozen=True)
class AllowRule:
    id: str
    categories: tuple[str, ...] = ()
    values: frozenset[str] = frozenset()
    patterns: tuple[re.Pattern[str], ...] = ()
    where: str = "anywhere"
    destinations: tuple[str, ...] = DESTINATIONS
    action: SafetyAction = SafetyAction.ALLOW

    def applies(self, category: str, value: str, in_code: bool, destination: str) -> bool:
        if destination not in self.destinations or (self.where == "code" and not in_code):
            return False
        if self.categories and not any(covers(c, category) for c in self.categories):
            return False
        if self.values or self.patterns:
            return value in self.values or any(p.fullmatch(value) for p in self.patterns)
        return True


@dataclass(frozen=True, eq=False)
class Policy:
    # category prefix -> destination -> action; a prefix may name only one destination
    actions: dict[str, dict[str, SafetyAction]]
    allow: tuple[AllowRule, ...]
    detectors: tuple[Detector, ...]
    sources: tuple[str, ...] = ()
    _cache: dict = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"Policy(sources={self.sources}, detectors={len(self.detectors)})"

    def action_for(self, category: str, destination: str) -> SafetyAction:
        """The category's action before allow rules: the longest dotted prefix that names
        this destination wins, then "default", then allow."""
        key = (category, destination)
        if key not in self._cache:
            name: str | None = category
            action = None
            while name is not None and action is None:
                action = self.actions.get(name, {}).get(destination)
                name = name.rsplit(".", 1)[0] if "." in name else None
            if action is None:
                action = self.actions.get("default", {}).get(destination, SafetyAction.ALLOW)
            self._cache[key] = action
        return self._cache[key]

    def decide(
        self, detector: Detector, value: str, in_code: bool, destination: str
    ) -> tuple[SafetyAction, str | None]:
        """The action for one match, and the allow rule that lowered it, if any."""
        action = self.action_for(detector.category, destination)
        if action is SafetyAction.ALLOW:
            return action, None
        for rule in self.allow:
            if rule.applies(detector.category, value, in_code, destination):
                if STRENGTH[rule.action] < STRENGTH[action]:
                    return rule.action, rule.id
        return action, None

    @classmethod
    def shipped(cls) -> Policy:
        return _shipped()

    @classmethod
    def load(cls, data_dir: Path | str | None = None) -> tuple[Policy, list[str]]:
        """The shipped policy with the user's override merged over it, and any warnings.

        Never raises for a bad user file: the warning names the file and line, and the
        shipped policy (plus the user's readable word lists) is used instead.
        """
        if data_dir is None:
            from ..paths import data_dir as default_dir

            data_dir = default_dir()
        folder = Path(data_dir) / "safety"
        warnings: list[str] = []
        extra_lists = wordlists.user_wordlists(folder / "wordlists", warnings)
        base = _shipped_document()
        path = folder / "policy.toml"
        if path.is_file():
            try:
                text = path.read_text(encoding="utf-8")
                document = _parse(text, str(path))
                policy = _build(_merge(base, document, text, str(path)), extra_lists, warnings,
                                text, str(path))
                return policy, warnings
            except (OSError, UnicodeDecodeError) as exc:
                warnings.append(f"{path}: cannot read ({exc}); using the shipped safety policy")
            except PolicyError as exc:
                warnings.append(f"{exc}; using the shipped safety policy")
        policy = _build(base, extra_lists, warnings, None, _SHIPPED_NAME)
        return policy, warnings

    @classmethod
    def from_toml(cls, text: str, name: str = "policy.toml") -> Policy:
        """A policy from TOML merged over the shipped one; raises PolicyError. For tests."""
        return _build(_merge(_shipped_document(), _parse(text, name), text, name), {}, [], text, name)


@functools.cache
def _shipped_text() -> str:
    return (resources.files("wren.resources") / "safety" / "policy.toml").read_text(encoding="utf-8")


def _shipped_document() -> dict:
    return _parse(_shipped_text(), _SHIPPED_NAME)


@functools.cache
def _shipped() -> Policy:
    return _build(_shipped_document(), {}, [], None, _SHIPPED_NAME)


def _parse(text: str, name: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line N, column M)"
        raise PolicyError(f"{name}: {exc}") from exc


def line_of(text: str | None, *needles: str) -> int | None:
    """The first line that holds every needle, to point a user at their mistake."""
    if not text:
        return None
    for number, line in enumerate(text.splitlines(), 1):
        if all(n in line for n in needles):
            return number
    return None


def _fail(name: str, text: str | None, problem: str, *needles: str) -> PolicyError:
    for variant in (needles, tuple(n.replace("\\", "\\\\") for n in needles)):
        line = line_of(text, *variant)
        if line is not None:
            return PolicyError(f"{name}, line {line}: {problem}")
    return PolicyError(f"{name}: {problem}")


def _merge(base: dict, over: dict, text: str, name: str) -> dict:
    """`over` (a policy file, `text` as read from `name`) laid over `base`."""
    unknown = set(over) - _TOP_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise _fail(name, text, f"unknown setting {key!r} (expected one of "
                    f"{', '.join(sorted(_TOP_KEYS))})", key)
    out = dict(base)
    if "actions" in over:
        if not isinstance(over["actions"], dict):
            raise _fail(name, text, "[actions] must be a table", "actions")
        out["actions"] = _merged_actions(base.get("actions", {}), over["actions"])
    if "allow" in over:
        if not isinstance(over["allow"], list):
            raise _fail(name, text, "allow rules must be written as [[allow]] tables", "allow")
        out["allow"] = _merged_allow(base.get("allow", []), over["allow"])
    if "blocklist" in over:
        out["blocklist"] = _merged_blocklist(base.get("blocklist", {}), over["blocklist"], text, name)
    return out


def _merged_actions(base: dict, over: dict) -> dict:
    merged = dict(base)
    # `pii = "redact"` means all personal data: it replaces shipped entries below it.
    for category in over:
        for shipped in list(merged):
            if shipped.startswith(category + ".") and shipped not in over:
                del merged[shipped]
    for category, value in over.items():
        # `secret = { remote = "block" }` changes only remote; a plain word changes both.
        if isinstance(value, dict) and isinstance(merged.get(category), dict):
            value = {**merged[category], **value}
        merged[category] = value
    return merged


def _merged_allow(base: list, over: list) -> list:
    """A rule with the id of an earlier one replaces it; `enabled = false` only removes it."""
    rules = list(base)
    for rule in over:
        rule_id = rule.get("id") if isinstance(rule, dict) else None
        rules = [r for r in rules if rule_id is None or r.get("id") != rule_id]
        if not (isinstance(rule, dict) and rule.get("enabled") is False):
            rules.append(rule)
    return rules


def _merged_blocklist(base: dict, block, text: str, name: str) -> dict:
    """Words and patterns add to the earlier lists."""
    if not isinstance(block, dict):
        raise _fail(name, text, "[blocklist] must be a table", "blocklist")
    merged = dict(base)
    for key, value in block.items():
        if key not in ("words", "patterns") or not _is_str_list(value):
            raise _fail(name, text, f"[blocklist] {key} must be a list of strings "
                        "(keys: words, patterns)", key)
        merged[key] = list(merged.get(key, [])) + value
    return merged


def _is_str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _action(value, name: str, text: str | None, where: str) -> SafetyAction:
    try:
        return SafetyAction(value)
    except (ValueError, TypeError):
        raise _fail(name, text, f"{where}: {value!r} is not an action "
                    "(allow, warn, redact, block)", str(value)) from None


def _build(
    doc: dict, extra_lists: dict[str, list[str]], warnings: list[str], text: str | None, name: str
) -> Policy:
    actions: dict[str, dict[str, SafetyAction]] = {}
    for category, value in doc.get("actions", {}).items():
        if isinstance(value, str):
            action = _action(value, name, text, f"action for {category!r}")
            actions[category] = {d: action for d in DESTINATIONS}
        elif isinstance(value, dict) and set(value) <= set(DESTINATIONS):
            actions[category] = {
                d: _action(v, name, text, f"{category!r} {d}") for d, v in value.items()
            }
        else:
            raise _fail(name, text, f"action for {category!r} must be an action or a table "
                        "with 'local' and/or 'remote'", category)

    allow = tuple(_allow_rule(i, r, name, text) for i, r in enumerate(doc.get("allow", []), 1))

    block = doc.get("blocklist", {})
    try:
        blocklist = wordlists.blocklist_detectors(
            list(block.get("words", [])), list(block.get("patterns", [])), warnings
        )
    except ValueError as exc:
        bad = next((p for p in block.get("patterns", []) if repr(p) in str(exc)), "patterns")
        raise _fail(name, text, str(exc), bad) from None

    lists = wordlists.shipped_wordlists()
    for list_name, phrases in extra_lists.items():
        lists[list_name] = lists.get(list_name, []) + phrases
    detectors = BUILTIN_DETECTORS + tuple(wordlists.content_detectors(lists)) + tuple(blocklist)

    known = {d.category for d in detectors} | {"user.blocklist"}
    for category in actions:
        if category != "default" and not any(covers(category, k) for k in known):
            line = line_of(text, category)
            where = f"{name}, line {line}" if line else name
            warnings.append(f"{where}: category {category!r} matches no detector; "
                            "it has no effect")
    sources = (_SHIPPED_NAME,) if name == _SHIPPED_NAME else (_SHIPPED_NAME, name)
    return Policy(actions=actions, allow=allow, detectors=detectors, sources=sources)


def _allow_rule(number: int, raw, name: str, text: str | None) -> AllowRule:
    if not isinstance(raw, dict):
        raise _fail(name, text, f"allow rule {number} must be a table", "allow")
    rule_id = str(raw.get("id", f"allow{number}"))
    anchor = raw.get("id", "[[allow]]")
    unknown = set(raw) - _ALLOW_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise _fail(name, text, f"allow rule {rule_id!r}: unknown key {key!r}", key)
    for key in ("categories", "values", "patterns", "destinations"):
        if key in raw and not _is_str_list(raw[key]):
            raise _fail(name, text, f"allow rule {rule_id!r}: {key} must be a list of strings",
                        key)
    where = raw.get("where", "anywhere")
    if where not in ("anywhere", "code"):
        raise _fail(name, text, f"allow rule {rule_id!r}: where must be 'anywhere' or 'code', "
                    f"not {where!r}", str(where))
    action = _action(raw.get("action", "allow"), name, text, f"allow rule {rule_id!r}")
    if action not in (SafetyAction.ALLOW, SafetyAction.WARN):
        raise _fail(name, text, f"allow rule {rule_id!r}: action must be 'allow' or 'warn'",
                    action.value)
    destinations = tuple(raw.get("destinations", DESTINATIONS))
    for d in destinations:
        if d not in DESTINATIONS:
            raise _fail(name, text, f"allow rule {rule_id!r}: unknown destination {d!r}", d)
    patterns = []
    for source in raw.get("patterns", []):
        try:
            patterns.append(re.compile(source))
        except re.error as exc:
            raise _fail(name, text, f"allow rule {rule_id!r}: pattern {source!r} is not a "
                        f"valid regular expression: {exc}", source) from None
    if not (raw.get("categories") or raw.get("values") or patterns):
        raise _fail(name, text, f"allow rule {rule_id!r} would allow everything: give it "
                    "categories, values or patterns", str(anchor))
    return AllowRule(
        id=rule_id,
        categories=tuple(raw.get("categories", ())),
        values=frozenset(raw.get("values", ())),
        patterns=tuple(patterns),
        where=where,
        destinations=destinations,
        action=action,
    )
