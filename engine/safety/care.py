"""Care, not a gate, for messages that suggest the writer may hurt themselves.

A message in a care category (self-harm) is never held back by the window and never met
with rule ids: the person sees supportive words and where to find help, and the model
answers with a system note that asks it for care. The words are a resource, one file per
language (resources/safety-care/<lang>.json); a file of the same name in the data folder's
safety/care/ replaces the shipped one, so help lines can be made local. The findings and
their rule ids stay in the message's stored safety notices, for diagnostics.
"""

from __future__ import annotations

import json
import locale
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import InvalidRequest
from ..events import SafetyAction

log = logging.getLogger(__name__)

DEFAULT_LANGUAGE = "en"
CARE_CATEGORIES = ("content.self_harm",)


@dataclass(frozen=True, slots=True)
class HelpLine:
    text: str
    url: str = ""


@dataclass(frozen=True, slots=True)
class CareMessage:
    """What a person is shown, and what the model is told, when a message needs care."""

    language: str
    categories: tuple[str, ...]
    title: str
    message: str
    help: tuple[HelpLine, ...]
    system_note: str


def _language(requested: str | None) -> str:
    if requested:
        return requested
    for var in ("WREN_LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var)
        if value and value not in ("C", "POSIX"):
            return value
    return (locale.getlocale()[0] or DEFAULT_LANGUAGE)


def _candidates(language: str) -> list[str]:
    """"de_AT.UTF-8" → ["de_AT", "de", "en"]."""
    tag = language.split(".")[0].split("@")[0].replace("-", "_")
    names = [tag, tag.split("_")[0], DEFAULT_LANGUAGE]
    return list(dict.fromkeys(n for n in names if n))


def parse_care(text: str, language: str, source: str) -> CareMessage:
    """A care file's JSON, checked: a bad file is an error that names the file and the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"{source}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise InvalidRequest(f"{source}: expected a JSON object")

    def field(name: str) -> str:
        value = data.get(name)
        if not isinstance(value, str) or not value.strip():
            raise InvalidRequest(f"{source}: '{name}' must be a non-empty string")
        return value.strip()

    lines = data.get("help", [])
    if not isinstance(lines, list) or not lines:
        raise InvalidRequest(f"{source}: 'help' must be a non-empty list of {{\"text\", \"url\"}} objects")
    help_lines = []
    for i, line in enumerate(lines):
        if not isinstance(line, dict) or not isinstance(line.get("text"), str) or not line["text"].strip():
            raise InvalidRequest(f"{source}: help[{i}] needs a non-empty 'text'")
        url = line.get("url", "")
        if not isinstance(url, str) or (url and not url.startswith(("https://", "http://", "tel:"))):
            raise InvalidRequest(f"{source}: help[{i}].url must be an http(s) or tel: address")
        help_lines.append(HelpLine(line["text"].strip(), url))
    categories = data.get("categories", list(CARE_CATEGORIES))
    if not isinstance(categories, list) or not all(isinstance(c, str) and c for c in categories):
        raise InvalidRequest(f"{source}: 'categories' must be a list of category names")
    return CareMessage(language, tuple(categories), field("title"), field("message"), tuple(help_lines),
                       field("system_note"))


def load_care(language: str | None = None, home: Path | None = None) -> CareMessage:
    """The care message in `language` (else the user's), from the data folder's
    safety/care/ first, then Wren's own; English when neither has that language. A broken
    file of the user's is logged and skipped, so care never fails to show."""
    shipped = resources.files("wren.resources") / "safety-care"
    for name in _candidates(_language(language)):
        if home is not None:
            mine = home / "safety" / "care" / f"{name}.json"
            if mine.is_file():
                try:
                    return parse_care(mine.read_text(encoding="utf-8"), name, str(mine))
                except InvalidRequest as exc:
                    log.warning("ignoring %s", exc)
        entry = shipped / f"{name}.json"
        if entry.is_file():
            return parse_care(entry.read_text(encoding="utf-8"), name, f"resources/safety-care/{name}.json")
    raise InvalidRequest(f"no care message for {language!r}: resources/safety-care/{DEFAULT_LANGUAGE}.json is missing")


def is_care_category(category: str) -> bool:
    return category in CARE_CATEGORIES


def needs_care(findings: Iterable) -> bool:
    """Any finding (or SafetyNotice) in a care category that the policy did not allow."""
    return any(is_care_category(f.category) and f.action is not SafetyAction.ALLOW for f in findings)


def with_care_note(system_prompt: str, note: str) -> str:
    """The system prompt with the care note after it (the note alone if there is none)."""
    return f"{system_prompt.rstrip()}\n\n{note}" if system_prompt.strip() else note

