"""Detectors built from word lists: the shipped content categories and the user's block list."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from .detector import UNBOUNDED_CAP, Detector, regex_shape

# The longest phrase a list may hold; keeps every phrase detector's reach small.
MAX_PHRASE = 80


def parse_wordlist(text: str) -> list[str]:
    """One phrase per line; blank lines and `#` comments are ignored."""
    phrases = []
    for line in text.splitlines():
        phrase = line.split("#", 1)[0].strip()
        if phrase:
            phrases.append(phrase[:MAX_PHRASE])
    return phrases


def shipped_wordlists() -> dict[str, list[str]]:
    folder = resources.files("wren.resources") / "safety" / "wordlists"
    lists: dict[str, list[str]] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".txt"):
            lists[entry.name[:-4]] = parse_wordlist(entry.read_text(encoding="utf-8"))
    return lists


def user_wordlists(folder: Path, warnings: list[str]) -> dict[str, list[str]]:
    lists: dict[str, list[str]] = {}
    if not folder.is_dir():
        return lists
    for path in sorted(folder.glob("*.txt")):
        try:
            lists[path.stem] = parse_wordlist(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            warnings.append(f"{path}: cannot read this word list ({exc}); it is ignored")
    return lists


def phrase_pattern(phrases: Iterable[str]) -> re.Pattern[str] | None:
    """Whole-word, case-insensitive; spaces and hyphens in a phrase match either.

    The first character is matched by a class before the word-edge lookbehind, so the
    regex engine skips to plausible starts instead of trying every position (3x faster);
    each branch then checks which first character it got.
    """
    by_first: dict[str, set[tuple[int, str]]] = {}
    for phrase in phrases:
        words = [w for w in re.split(r"[\s-]+", phrase.strip()) if w]
        if not words:
            continue
        rest = r"[\s-]{1,3}+".join([re.escape(words[0][1:])] + [re.escape(w) for w in words[1:]])
        by_first.setdefault(words[0][0].lower(), set()).add((len(phrase), rest))
    if not by_first:
        return None
    firsts = {c for first in by_first for c in (first, first.upper())}
    chars = "".join(re.escape(c) for c in sorted(firsts))
    groups = []
    for first, rests in sorted(by_first.items()):
        # Longest first, so "kill myself" wins over a shorter entry at the same start.
        ordered = "|".join(r for _, r in sorted(rests, key=lambda a: (-a[0], a[1])))
        groups.append(f"(?<={re.escape(first)})(?:{ordered})")
    return re.compile(rf"[{chars}](?<!\w[\s\S])(?i:{'|'.join(groups)})(?!\w)")


def content_detectors(lists: dict[str, list[str]]) -> list[Detector]:
    detectors = []
    for name, phrases in sorted(lists.items()):
        pattern = phrase_pattern(phrases)
        if pattern is not None:
            detectors.append(Detector(f"content.{name}", f"wordlist:{name}", pattern, reveal=None))
    return detectors


def blocklist_detectors(
    words: list[str], patterns: list[str], warnings: list[str]
) -> list[Detector]:
    """The user's own forbidden words and regular expressions, category `user.blocklist`.

    Raises ValueError naming a pattern that does not compile, can match nothing at all
    (an empty match), or anchors with ^/$ (text is scanned in pieces, so those would mean
    different things in a message and in a streamed answer).
    """
    detectors = []
    pattern = phrase_pattern(words)
    if pattern is not None:
        detectors.append(Detector("user.blocklist", "blocklist:words", pattern))
    for number, source in enumerate(patterns, 1):
        try:
            compiled = re.compile(source)
            shape = regex_shape(source)
        except (re.error, RecursionError, OverflowError) as exc:
            raise ValueError(
                f"block-list pattern {source!r} is not a valid regular expression: {exc}"
            ) from exc
        if shape.min_width == 0:
            raise ValueError(f"block-list pattern {source!r} matches the empty string")
        if shape.anchored:
            raise ValueError(
                f"block-list pattern {source!r} uses ^ or $, which a streamed answer cannot "
                r"honour; use \b for word edges instead"
            )
        if shape.nested_unbounded:
            warnings.append(
                f"block-list pattern {source!r} nests unbounded repeats and may be very slow "
                "on long text; bound them, e.g. {1,50} instead of +"
            )
        elif shape.reach > UNBOUNDED_CAP:
            warnings.append(
                f"block-list pattern {source!r} has no length limit; in streamed answers only "
                f"its first {UNBOUNDED_CAP} characters are guaranteed to be caught"
            )
        detectors.append(Detector("user.blocklist", f"blocklist:pattern{number}", compiled))
    return detectors
